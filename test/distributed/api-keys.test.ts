/**
 * API keys on the distributed deployment: `otm keys` writes them into Redis (REDIS_URL); the
 * ingress and query processes look them up there (ApiKeyAuthenticator, a lookup kept 5 s), so a
 * revocation made by the command is refused within 6 s.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiKeyAuthenticator } from '@otm/http';
import { openRedisApiKeyStore } from '@otm/distributed';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';
import { OTM_BIN, startOtm, stop } from '../process.js';

const run = promisify(execFile);

const enabled = integrationEnabled('otm keys on Redis (own redis-server)');
describe.skipIf(!enabled)('otm keys on Redis', () => {
  let redis: RedisService;
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis({ own: true });
  });
  afterAll(async () => {
    await redis?.stop();
  });

  const keys = async (...args: string[]) => {
    try {
      const { stdout } = await run(process.execPath, [OTM_BIN, 'keys', ...args], {
        env: { PATH: process.env.PATH ?? '', OTM_ENTITY_STORE: 'redis', REDIS_URL: redis.url },
      });
      return { code: 0, stdout };
    } catch (e) {
      return { code: (e as { code: number }).code, stdout: (e as { stdout: string }).stdout };
    }
  };

  it('create, list, revoke through the command; every process refuses a revoked key within 6 s', async () => {
    const made = await keys('create', '--tenant', 'fleet-one', '--scopes', 'read,write:events', '--name', 'gateway');
    expect(made.code).toBe(0);
    const key = made.stdout.trim();
    const opened = openRedisApiKeyStore(redis.url);
    const { store } = opened;
    try {
      const auth = new ApiKeyAuthenticator(store);
      const ok = await auth.verify(key);
      expect('principal' in ok && { tenant: ok.principal.tenant, scopes: [...ok.principal.scopes] }).toEqual({
        tenant: 'fleet-one',
        scopes: ['read', 'write:events'],
      });
      const listed = (await keys('list', '--tenant', 'fleet-one')).stdout.trim().split('\n');
      expect(listed).toHaveLength(2);
      expect(listed.join('\n')).not.toContain(key);
      const id = listed[1]!.split('\t')[0]!;
      expect((await keys('revoke', id)).code).toBe(0);
      const since = Date.now();
      let outcome = await auth.verify(key);
      while ('principal' in outcome && Date.now() - since < 8_000) {
        await new Promise((r) => setTimeout(r, 200));
        outcome = await auth.verify(key);
      }
      expect(outcome).toEqual({ status: 401, message: 'the bearer token is not valid: the API key has been revoked' });
      expect(Date.now() - since).toBeLessThanOrEqual(6_000);
      expect((await store.list('fleet-one'))[0]!.revokedAt).toMatch(/^\d{4}-/);
    } finally {
      await opened.close();
    }
  }, 30_000);

  it('a query role without OTM_TOKENS takes API keys when OTM_STREAM_TICKET_SECRET is set, and refuses to start without it', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-keys-only-'));
    // The Redis entity store (where the keys are); the events in a data folder of its own, which
    // is enough for a query role to answer.
    const env = { OTM_ENTITY_STORE: 'redis', REDIS_URL: redis.url, OTM_DATA_DIR: dataDir };
    try {
      const refused = await startOtm(['query'], env).then(
        async (r) => {
          await stop(r);
          return '';
        },
        (e: Error) => e.message,
      );
      expect(refused).toMatch(/OTM_TOKENS: is required by otm query unless OTM_STREAM_TICKET_SECRET is set/);

      const made = await keys('create', '--tenant', 'keys-only', '--scopes', 'read', '--name', 'reader');
      expect(made.code).toBe(0);
      const key = made.stdout.trim();
      const query = await startOtm(['query'], { ...env, OTM_STREAM_TICKET_SECRET: 'x'.repeat(40) });
      try {
        expect(query.stdout()).toMatch(/authenticate with an API key \(otm keys create\)/);
        const list = await fetch(`${query.url}/api/v5/vehicles`, { headers: { authorization: `Bearer ${key}` } });
        expect(list.status).toBe(200);
        expect(await list.json()).toEqual({ items: [], next: null });
        const none = await fetch(`${query.url}/api/v5/vehicles`, { headers: { authorization: 'Bearer not-a-key' } });
        expect(none.status).toBe(401);
      } finally {
        await stop(query);
      }
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});
