/**
 * Redis at `maxmemory` with the `noeviction` policy (issue 42): a private redis-server made small
 * with CONFIG SET refuses the entity store's writes with "OOM command not allowed when used
 * memory > 'maxmemory'"; the store turns that into a StorageRefused (retryable: the Kafka consumer
 * retries without committing, consumer.ts), its write state is down naming the cause, and once
 * Redis has memory again the same writes succeed and every acknowledged one is there.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../../../../test/infra/services.js';
import { StorageRefused, registry } from '@otm/core';
import { RedisEntityStore } from '../../src/index.js';
import { isClassified, isRetryable } from '../../src/kafka/consumer.js';

const enabled = integrationEnabled('RedisEntityStore at maxmemory (own redis-server)');
describe.skipIf(!enabled)('RedisEntityStore at maxmemory with noeviction', () => {
  let redis: RedisService;
  let admin: Redis;
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis({ own: true });
    admin = new Redis(redis.url);
  });
  afterAll(async () => {
    await admin?.quit();
    await redis?.stop();
  });

  const refusedCount = async () =>
    (await registry.getSingleMetric('otm_writes_refused_total')!.get()).values.find(
      (v) => v.labels.store === 'redis' && v.labels.cause === 'out-of-memory',
    )?.value ?? 0;

  it('refuses writes with a retryable StorageRefused, says so, and takes them again once Redis has memory', async () => {
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', String(used + 2 * 1024 * 1024));
    const store = new RedisEntityStore({ url: redis.url, prefix: 'oom', cacheLatest: false });
    const doc = (i: number) => JSON.stringify({ id: `v${i}`, name: `vehicle ${i}`, pad: 'x'.repeat(4000) });
    const put = (key: string, i: number) =>
      store.unit(async (tx) =>
        tx.put('acme', { kind: 'vehicles', key, lifecycleRank: 0, json: doc(i), stamp: { modified: i, acceptedAt: i } }),
      );
    const acknowledged: string[] = [];
    const before = await refusedCount();
    let refusal: unknown;
    for (let i = 0; i < 5_000 && refusal === undefined; i++) {
      const key = randomUUID();
      try {
        await put(key, i);
        acknowledged.push(key);
      } catch (e) {
        refusal = e;
      }
    }
    // Redis's own words, carried as the cause; retryable, and classified for the consumer's rule.
    expect(refusal).toBeInstanceOf(StorageRefused);
    expect(refusal).toMatchObject({ store: 'redis', refusal: 'out-of-memory', retryable: true });
    expect((refusal as Error).message).toMatch(/OOM command not allowed when used memory > 'maxmemory'/);
    expect(isClassified(refusal)).toBe(true);
    expect(isRetryable(refusal)).toBe(true);
    expect(acknowledged.length).toBeGreaterThan(50);
    const [part] = store.parts();
    expect(part!.name).toBe('store redis');
    expect(part!.status()).toMatchObject({ up: false, reason: expect.stringMatching(/out of memory.*maxmemory/) });
    expect(await refusedCount()).toBeGreaterThan(before);
    // The feed's and positions' writes of the telemetry worker are refused alike.
    await expect(
      store.telemetry.appendFeed([{ tenant: 'acme', op: 'put', kind: 'events', key: randomUUID(), lifecycleRank: 0 }]),
    ).rejects.toBeInstanceOf(StorageRefused);
    // Reads go on.
    expect((await store.get('acme', 'vehicles', acknowledged[0]!))?.json).toBe(doc(0));

    // Memory again: the same write succeeds, the state is up, nothing acknowledged is missing.
    await admin.config('SET', 'maxmemory', '0');
    const retried = randomUUID();
    await put(retried, 99_999);
    expect(part!.status().up).toBe(true);
    for (const [i, key] of acknowledged.entries()) expect((await store.get('acme', 'vehicles', key))?.json).toBe(doc(i));
    expect((await store.get('acme', 'vehicles', retried))?.json).toBe(doc(99_999));
    await store.close();
  });
});
