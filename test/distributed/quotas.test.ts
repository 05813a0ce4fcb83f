/**
 * Quotas on the distributed deployment: two `otm ingress` processes on one Redis count one quota
 * (the GCRA script of packages/distributed/src/redis/rate-limit.ts), per credential and per tenant.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';
import { startOtm, stop, type Running } from '../process.js';

const event = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `5d000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
});

const enabled = integrationEnabled('quotas shared through Redis (own redis-server)');
describe.skipIf(!enabled)('quotas shared by two ingress processes through Redis', () => {
  let redis: RedisService;
  const ingress: Running[] = [];
  const dirs: string[] = [];
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis({ own: true });
    for (let i = 0; i < 2; i++) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-quota-dist-'));
      dirs.push(dir);
      ingress.push(
        await startOtm(['ingress'], {
          OTM_BUS: 'memory',
          OTM_ENTITY_STORE: 'redis',
          REDIS_URL: redis.url,
          OTM_DATA_DIR: dir,
          OTM_TOKENS: 'unit-one-token:acme:read,unit-two-token:acme:read,other-tenant-token:globex:read',
          OTM_RATE_LIMIT: '6/m',
          OTM_TENANT_RATE_LIMIT: '10/m',
          OTM_BULK_THREADS: '0',
        }),
      );
    }
  }, 60_000);
  afterAll(async () => {
    for (const r of ingress) await stop(r);
    await redis?.stop();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });

  // POST /api/v5/validate/<kind>: served by the ingress, counted like any request, and needs no
  // worker behind the in-process bus (a PUT would be answered 503 by an ingress alone).
  const put = (i: number, token: string, n: number) =>
    fetch(`${ingress[i]!.url}/api/v5/validate/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(event(n)),
    });

  it("one credential's requests to either process count against one quota; a tenant's credentials share its quota", async () => {
    const remaining: string[] = [];
    for (let n = 0; n < 6; n++) {
      const res = await put(n % 2, 'unit-one-token', n);
      expect(res.status, await res.clone().text()).toBe(200);
      remaining.push(res.headers.get('ratelimit-remaining')!);
    }
    // The credential's quota (6) has less left than the tenant's (10): that one is reported.
    expect(remaining).toEqual(['5', '4', '3', '2', '1', '0']);
    for (const i of [0, 1]) {
      const refused = await put(i, 'unit-one-token', 100 + i);
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(Number(refused.headers.get('retry-after'))).toBeLessThanOrEqual(10);
      expect(await refused.json()).toEqual([{ type: 'tooManyRequests', message: expect.stringContaining('OTM_RATE_LIMIT') }]);
    }
    // The tenant has 4 left (10 - 6), whichever process and credential.
    for (let n = 0; n < 4; n++) expect((await put(n % 2, 'unit-two-token', 200 + n)).status).toBe(200);
    const tenantOver = await put(1, 'unit-two-token', 300);
    expect(tenantOver.status).toBe(429);
    expect(((await tenantOver.json()) as { message: string }[])[0]!.message).toContain('OTM_TENANT_RATE_LIMIT');
    // Another tenant is not affected.
    const other = await put(0, 'other-tenant-token', 400);
    expect(other.status).toBe(200);
    expect(other.headers.get('ratelimit-remaining')).toBe('5');
  }, 30_000);

  it('fails open when Redis does not answer: requests go through, counted in otm_rate_limit_failures_total', async () => {
    await redis.stop();
    const started = Date.now();
    const res = await put(0, 'other-tenant-token', 500);
    expect(res.status).toBe(200);
    expect(res.headers.get('ratelimit-remaining')).toBeNull();
    expect(Date.now() - started).toBeLessThan(3_000);
    const metrics = await (await fetch(`${ingress[0]!.url}/metrics`)).text();
    expect(metrics).toMatch(/otm_rate_limit_failures_total [1-9]/);
  }, 30_000);
});
