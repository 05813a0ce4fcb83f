/**
 * Quotas (OTM_RATE_LIMIT per credential, OTM_TENANT_RATE_LIMIT per tenant) in the embedded
 * service: 429 `tooManyRequests` with Retry-After and the RateLimit-* headers, bulk documents
 * counted one each, a tenant's credentials sharing its quota, the operational routes never limited.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, createLogger, gcra, loadConfig, parseRateLimit, parseTokens, type RateLimit } from '@otm/core';
import { MemoryRateLimiter } from '@otm/embedded';
import { createEmbeddedService, type EmbeddedService } from '../src/index.js';
import { TOKENS, auth } from './helpers.js';

const location = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `5c000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
});

let svc: (EmbeddedService & { dataDir: string }) | undefined;
afterEach(async () => {
  await svc?.close();
  if (svc) fs.rmSync(svc.dataDir, { recursive: true, force: true });
  svc = undefined;
});

async function start(quotas: { perCredential?: RateLimit; perTenant?: RateLimit }) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-quota-'));
  const s = await createEmbeddedService(
    { dataDir, bodyLimit: 1_048_576, maxDepth: 64, quotas },
    parseTokens(TOKENS),
    createLogger('silent'),
  );
  await s.app.ready();
  svc = { ...s, dataDir };
  return s.app;
}

const get = (app: EmbeddedService['app'], token = 'writer-token-acme', url = `/api/v5/events/${location(999).id}`) =>
  app.inject({ method: 'GET', url, headers: auth(token) });

describe('OTM_RATE_LIMIT, OTM_TENANT_RATE_LIMIT: the configuration', () => {
  it('reads 1000/s and 60000/m; unset is no limit', () => {
    expect(parseRateLimit('1000/s')).toEqual({ count: 1000, periodMs: 1000 });
    expect(parseRateLimit('60000/m')).toEqual({ count: 60000, periodMs: 60_000 });
    const c = loadConfig({ OTM_RATE_LIMIT: '10/s', OTM_TENANT_RATE_LIMIT: '600/m' });
    expect(c.rateLimit).toEqual({ count: 10, periodMs: 1000 });
    expect(c.tenantRateLimit).toEqual({ count: 600, periodMs: 60_000 });
    expect(loadConfig({}).rateLimit).toBeUndefined();
  });

  it.each(['10', '10/h', '0/s', 'ten/s', '-1/m', '10/ s'])('refuses %s, naming the variable', (v) => {
    for (const name of ['OTM_RATE_LIMIT', 'OTM_TENANT_RATE_LIMIT']) {
      expect(() => loadConfig({ [name]: v })).toThrow(ConfigError);
      expect(() => loadConfig({ [name]: v })).toThrow(new RegExp(`^${name}: `));
    }
  });
});

describe('GCRA', () => {
  it('lets a burst of one period through, then one each 1/rate; a refusal takes nothing', async () => {
    let now = 1_000_000;
    const limiter = new MemoryRateLimiter(() => now);
    const b = [{ key: 'k', limit: { count: 4, periodMs: 1000 } }];
    for (let i = 3; i >= 0; i--) expect(await limiter.take(b, 1)).toMatchObject({ allowed: true, remaining: i });
    const refused = await limiter.take(b, 1);
    expect(refused).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 250 });
    now += 250;
    expect(await limiter.take(b, 1)).toMatchObject({ allowed: true, remaining: 0 });
    now += 1000;
    expect(await limiter.take(b, 2)).toMatchObject({ allowed: true, remaining: 2 });
    expect(gcra(b, [0], 5, now)).toMatchObject({ allowed: false, retryAfterMs: Infinity });
  });
});

describe('quotas in the embedded service', () => {
  it('answers 429 tooManyRequests with Retry-After and RateLimit-* once a credential is over its limit, and recovers', async () => {
    const app = await start({ perCredential: { count: 3, periodMs: 1000 } });
    const seen: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await get(app);
      expect(res.statusCode).toBe(404); // counted too: an answer is an answer
      expect(res.headers['ratelimit-limit']).toBe('3');
      seen.push(String(res.headers['ratelimit-remaining']));
    }
    expect(seen).toEqual(['2', '1', '0']);
    const refused = await get(app);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['content-type']).toMatch(/^application\/json/);
    expect(refused.json()).toEqual([{ type: 'tooManyRequests', message: expect.stringContaining('OTM_RATE_LIMIT') }]);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers['ratelimit-remaining']).toBe('0');
    expect(refused.headers['ratelimit-limit']).toBe('3');
    expect(Number(refused.headers['ratelimit-reset'])).toBeGreaterThanOrEqual(1);
    expect(refused.headers['ratelimit-policy']).toBe('3;w=1');
    // Another credential of the tenant has a quota of its own.
    expect((await get(app, 'reader-token-acme')).statusCode).toBe(404);
    // Never limited: health, readiness, metrics, the OpenAPI description.
    for (const url of ['/healthz', '/readyz', '/metrics', '/api/v5/openapi.json']) {
      const res = await app.inject({ method: 'GET', url, headers: auth() });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['ratelimit-remaining'], url).toBeUndefined();
    }
    expect((await app.inject({ method: 'GET', url: '/metrics' })).body).toMatch(/otm_rate_limited_total\{limit="credential"\} 1/);
    await new Promise((r) => setTimeout(r, 1_100));
    const again = await get(app);
    expect(again.statusCode).toBe(404);
    expect(again.headers['ratelimit-remaining']).toBe('2');
  });

  it('counts every document of a bulk request', async () => {
    const app = await start({ perCredential: { count: 10, periodMs: 60_000 } });
    const bulk = (n: number, from: number, token = 'writer-token-acme') =>
      app.inject({
        method: 'POST',
        url: '/api/v5/bulk/events',
        headers: { ...auth(token), 'content-type': 'application/json' },
        payload: JSON.stringify(Array.from({ length: n }, (_, i) => location(from + i))),
      });
    const first = await bulk(7, 0);
    expect(first.statusCode).toBe(200);
    expect(first.json()).toMatchObject({ accepted: 7 });
    expect(first.headers['ratelimit-remaining']).toBe('3');
    // 4 documents, 3 left: refused, nothing stored; the 1 its arrival took stays taken.
    const over = await bulk(4, 100);
    expect(over.statusCode).toBe(429);
    expect(over.json()).toEqual([{ type: 'tooManyRequests', message: expect.stringContaining('OTM_RATE_LIMIT') }]);
    expect(Number(over.headers['retry-after'])).toBeGreaterThanOrEqual(6);
    expect(Number(over.headers['retry-after'])).toBeLessThanOrEqual(12);
    expect((await get(app, 'writer-token-acme', `/api/v5/events/${location(100).id}`)).statusCode).toBe(404);
    // More documents than one period's worth can never go through: it says so.
    const huge = await bulk(11, 200, 'writer-token-globex');
    expect(huge.statusCode).toBe(429);
    expect(huge.json()[0].message).toMatch(/smaller bulk requests/);
  });

  it("shares the tenant's quota between its credentials, and leaves other tenants alone", async () => {
    const app = await start({ perTenant: { count: 4, periodMs: 60_000 } });
    expect((await get(app, 'writer-token-acme')).statusCode).toBe(404);
    expect((await get(app, 'reader-token-acme')).statusCode).toBe(404);
    expect((await get(app, 'writer-token-acme')).statusCode).toBe(404);
    expect((await get(app, 'reader-token-acme')).headers['ratelimit-remaining']).toBe('0');
    const refused = await get(app, 'writer-token-acme');
    expect(refused.statusCode).toBe(429);
    expect(refused.json()[0].message).toContain('OTM_TENANT_RATE_LIMIT');
    expect((await get(app, 'reader-token-acme')).statusCode).toBe(429);
    const other = await get(app, 'writer-token-globex');
    expect(other.statusCode).toBe(404);
    expect(other.headers['ratelimit-remaining']).toBe('3');
  });

  it('reports the quota with the least left when both are set', async () => {
    const app = await start({ perCredential: { count: 2, periodMs: 60_000 }, perTenant: { count: 100, periodMs: 60_000 } });
    const res = await get(app);
    expect(res.headers['ratelimit-limit']).toBe('2');
    expect(res.headers['ratelimit-remaining']).toBe('1');
  });

  it('sets no RateLimit headers without quotas', async () => {
    const app = await start({});
    const res = await get(app);
    expect(res.statusCode).toBe(404);
    expect(res.headers['ratelimit-remaining']).toBeUndefined();
  });
});
