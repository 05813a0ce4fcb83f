/** RedisEntityStore beyond the EntityStore contract: key layout, restarts, Redis going away. */
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../../../../test/infra/services.js';
import { encodeVersion } from '@otm/core';
import { RedisEntityStore } from '../../src/index.js';
import { entityCacheReads } from '../../src/redis/metrics.js';
import { TrackedCache } from '../../src/redis/tracked-cache.js';

/** Polls `f` until it returns true (every 5 ms, at most `ms`); whether it did. */
async function until(f: () => Promise<boolean> | boolean, ms = 3_000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (await f()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
}

const enabled = integrationEnabled('RedisEntityStore (own redis-server)');
describe.skipIf(!enabled)('RedisEntityStore', () => {
  let redis: RedisService;
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis({ own: true });
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('keeps one hash per entity under a cluster hash tag, encoded like the LMDB store', async () => {
    const store = new RedisEntityStore({ url: redis.url, prefix: 'kl' });
    const key = randomUUID();
    await store.unit(async (tx) => {
      tx.put('acme:x{y}', { kind: 'trips', key, lifecycleRank: 4, json: '{"a":1}', stamp: { modified: 5, acceptedAt: 6 } });
      tx.addHolder('acme:x{y}', { kind: 'trips', key }, { kind: 'consignments', key: 'c1', lifecycleRank: 0 });
      tx.addPending('acme:x{y}', 'trips', key, { acceptedAt: 7, eventKey: 'e1', event: { x: 1 } });
    });
    const raw = new Redis(redis.url);
    const tag = `{acme%3Ax%7By%7D:trips:${key}}`;
    expect(await raw.hgetall(`kl:e:${tag}`)).toEqual({ '4': '5 6\n{"a":1}' });
    expect(await raw.smembers(`kl:h:${tag}`)).toEqual(['consignments\u0000c1\u00000']);
    expect(await raw.zrange(`kl:p:${tag}`, '0', '-1', 'WITHSCORES')).toEqual(['000000000000007\u0000e1', '7']);
    expect(await raw.hget(`kl:pe:${tag}`, '000000000000007\u0000e1')).toBe('{"acceptedAt":7,"eventKey":"e1","event":{"x":1}}');
    await raw.quit();
    await store.close();
  });

  it('a unit whose read keys another process changed before its commit runs again on the new state', async () => {
    const a = new RedisEntityStore({ url: redis.url, prefix: 'race' });
    const b = new RedisEntityStore({ url: redis.url, prefix: 'race' });
    const key = randomUUID();
    const version = (json: string, at: number) => ({
      kind: 'vehicles' as const,
      key,
      lifecycleRank: 0,
      json,
      stamp: { modified: at, acceptedAt: at },
    });
    await b.unit(async (tx) => tx.put('t', version('{"v":1}', 1)));
    const seen: Array<string | undefined> = [];
    await a.unit(async (tx) => {
      const cur = await tx.get('t', 'vehicles', key);
      seen.push(cur?.json);
      // The first time, another worker commits a newer version between this read and the commit.
      if (seen.length === 1) await b.unit(async (tx2) => tx2.put('t', version('{"v":2}', 2)));
      tx.put('t', version(JSON.stringify({ after: cur?.json }), 3));
    });
    expect(seen).toEqual(['{"v":1}', '{"v":2}']);
    expect((await a.get('t', 'vehicles', key))?.json).toBe(JSON.stringify({ after: '{"v":2}' }));
    // A unit that reads nothing another process touches commits at once.
    let runs = 0;
    await a.unit(async (tx) => {
      runs++;
      await tx.holders('t', 'vehicles', key);
      tx.addHolder('t', { kind: 'vehicles', key }, { kind: 'trips', key: 'x', lifecycleRank: 0 });
    });
    expect(runs).toBe(1);
    await a.close();
    await b.close();
  });

  it('acknowledged units survive a restart of Redis (appendonly yes, appendfsync always)', async () => {
    const store = new RedisEntityStore({ url: redis.url, prefix: 'rs' });
    const key = randomUUID();
    await store.unit(async (tx) =>
      tx.put('t', { kind: 'trips', key, lifecycleRank: 0, json: '{}', stamp: { modified: 0, acceptedAt: 1 } }),
    );
    await redis.restart();
    const again = new RedisEntityStore({ url: redis.url, prefix: 'rs' });
    expect((await again.get('t', 'trips', key))?.json).toBe('{}');
    await again.close();
    await store.close();
  });

  it('answers a retryable 503 within its bound when Redis takes the connection but never answers', async () => {
    // A server that accepts and stays silent, like a Redis that hangs: the bound comes from the
    // client's command timeout for a client the store made, from the store for one handed in.
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((s) => void sockets.add(s));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const url = `redis://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
    const own = new RedisEntityStore({ url, commandTimeoutMs: 500 });
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: null });
    client.on('error', () => {});
    const handedIn = new RedisEntityStore({ client, commandTimeoutMs: 500 });
    try {
      for (const store of [own, handedIn]) {
        const t0 = Date.now();
        await expect(store.get('t', 'trips', randomUUID())).rejects.toMatchObject({ status: 503, retryable: true });
        expect(Date.now() - t0).toBeLessThan(3_000);
      }
    } finally {
      client.disconnect();
      await own.close().catch(() => {});
      for (const s of sockets) s.destroy();
      silent.close();
    }
  });

  it('answers a retryable 503 within its bound when Redis is unreachable, and is not ready', async () => {
    const store = new RedisEntityStore({ url: 'redis://127.0.0.1:1', commandTimeoutMs: 800 });
    const t0 = Date.now();
    await expect(store.get('t', 'trips', randomUUID())).rejects.toMatchObject({ status: 503, retryable: true });
    await expect(store.unit(async (tx) => tx.delete('t', 'trips', 'k'))).rejects.toMatchObject({ status: 503 });
    expect(await store.ready()).toBe(false);
    expect(Date.now() - t0).toBeLessThan(3_000);
    await store.close();
  });

  describe('the latest version kept in the process (CLIENT TRACKING)', () => {
    const version = (key: string, v: number) => ({
      kind: 'trips' as const,
      key,
      lifecycleRank: 0,
      json: `{"v":${v}}`,
      stamp: { modified: v, acceptedAt: v },
    });
    const hashKey = (prefix: string, key: string) => `${prefix}:e:{t:trips:${key}}`;

    it('answers again from memory, and drops a version another client changed or removed', async () => {
      const a = new RedisEntityStore({ url: redis.url, prefix: 'tc' });
      const b = new RedisEntityStore({ url: redis.url, prefix: 'tc', cacheLatest: false });
      const raw = new Redis(redis.url);
      const key = randomUUID();
      try {
        expect(await until(() => a.cachingLatest)).toBe(true);
        await b.unit(async (tx) => tx.put('t', version(key, 1)));
        const reads = async (result: string) => (await entityCacheReads.get()).values.find((v) => v.labels.result === result)?.value ?? 0;
        const [hits, misses] = [await reads('hit'), await reads('miss')];
        const first = await a.get('t', 'trips', key);
        expect(first?.json).toBe('{"v":1}');
        expect(await a.get('t', 'trips', key)).toBe(first); // the same object: not read from Redis again
        expect([await reads('hit'), await reads('miss')]).toEqual([hits + 1, misses + 1]);
        // Another process's unit, then a client that is not a store at all.
        await b.unit(async (tx) => tx.put('t', version(key, 2)));
        expect(await until(async () => (await a.get('t', 'trips', key))?.json === '{"v":2}')).toBe(true);
        await raw.hset(hashKey('tc', key), '0', encodeVersion('{"v":3}', { modified: 3, acceptedAt: 3 }));
        expect(await until(async () => (await a.get('t', 'trips', key))?.json === '{"v":3}')).toBe(true);
        for (let i = 0; i < 20; i++) expect((await a.get('t', 'trips', key))?.json).toBe('{"v":3}');
        await raw.del(hashKey('tc', key));
        expect(await until(async () => (await a.get('t', 'trips', key)) === undefined)).toBe(true);
        // A store made with cacheLatest: false reads Redis every time.
        await b.unit(async (tx) => tx.put('t', version(key, 4)));
        expect(await b.get('t', 'trips', key)).not.toBe(await b.get('t', 'trips', key));
        expect(b.cachingLatest).toBe(false);
      } finally {
        raw.disconnect();
        await a.close();
        await b.close();
      }
    });

    it("reads its own units' writes at once", async () => {
      const a = new RedisEntityStore({ url: redis.url, prefix: 'tc' });
      const key = randomUUID();
      // Redis's invalidations held back (the listener's socket not read): only the store's own
      // bookkeeping can tell it that its cached version is old.
      const listener = (a as unknown as { cache: { listener: Redis } }).cache.listener;
      try {
        expect(await until(() => a.cachingLatest)).toBe(true);
        listener.stream.pause();
        for (let v = 1; v <= 20; v++) {
          await a.unit(async (tx) => tx.put('t', version(key, v)));
          expect((await a.get('t', 'trips', key))?.json).toBe(`{"v":${v}}`);
          expect((await a.get('t', 'trips', key))?.json).toBe(`{"v":${v}}`);
        }
      } finally {
        listener.stream.resume();
        await a.close();
      }
    });

    it('keeps nothing while tracking is down, and is exact again once it is back', async () => {
      const a = new RedisEntityStore({ url: redis.url, prefix: 'tc' });
      const raw = new Redis(redis.url);
      const key = randomUUID();
      try {
        expect(await until(() => a.cachingLatest)).toBe(true);
        await raw.hset(hashKey('tc', key), '0', encodeVersion('{"v":1}', { modified: 1, acceptedAt: 1 }));
        expect((await a.get('t', 'trips', key))?.json).toBe('{"v":1}');
        // The connection that receives the invalidations goes away; a change made meanwhile is
        // announced to nobody.
        await raw.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
        await raw.hset(hashKey('tc', key), '0', encodeVersion('{"v":2}', { modified: 2, acceptedAt: 2 }));
        expect(await until(async () => (await a.get('t', 'trips', key))?.json === '{"v":2}')).toBe(true);
        // Back on a new connection (ioredis reconnects): kept again, and dropped again on a change.
        expect(await until(() => a.cachingLatest)).toBe(true);
        const kept = await a.get('t', 'trips', key);
        expect(await a.get('t', 'trips', key)).toBe(kept);
        await raw.hset(hashKey('tc', key), '0', encodeVersion('{"v":3}', { modified: 3, acceptedAt: 3 }));
        expect(await until(async () => (await a.get('t', 'trips', key))?.json === '{"v":3}')).toBe(true);
        // FLUSHDB: Redis drops everything, and says so with one message for all keys.
        await raw.flushdb();
        expect(await until(async () => (await a.get('t', 'trips', key)) === undefined)).toBe(true);
      } finally {
        raw.disconnect();
        await a.close();
      }
    });

    it('has Redis track only the entities it keeps, not the events it looks for (OPTIN)', async () => {
      const a = new RedisEntityStore({ url: redis.url, prefix: 'tk' });
      const raw = new Redis(redis.url);
      const trackedKeys = async () => Number(/tracking_total_keys:(\d+)/.exec(await raw.info('stats'))![1]);
      try {
        expect(await until(() => a.cachingLatest)).toBe(true);
        const before = await trackedKeys();
        for (let i = 0; i < 50; i++) expect(await a.get('t', 'events', randomUUID())).toBeUndefined();
        expect(await trackedKeys()).toBe(before);
        for (let i = 0; i < 50; i++) await a.get('t', 'trips', randomUUID());
        expect(await trackedKeys()).toBe(before + 50);
      } finally {
        raw.disconnect();
        await a.close();
      }
    });

    it('does not turn tracking on when its two connections are on different servers (after a failover)', async () => {
      // The listener made to report another server's run_id, as when a failover moved the reader
      // to a new primary while the listener is still on the old one: its client id means nothing
      // there (or names another client), so nothing may be kept.
      const reader = new Redis(redis.url);
      const duplicate = reader.duplicate.bind(reader);
      reader.duplicate = (override) => {
        const other = duplicate(override);
        const info = other.info.bind(other);
        other.info = (async (...args: Parameters<typeof info>) =>
          String(await info(...args)).replace(/^run_id:\w+/m, 'run_id:0123456789abcdef')) as typeof other.info;
        return other;
      };
      const cache = new TrackedCache(reader);
      try {
        await new Promise((r) => setTimeout(r, 500));
        expect(cache.tracking).toBe(false);
      } finally {
        await cache.close();
        reader.disconnect();
      }
    });

    it("names the current listener connection when an earlier connection's setup answers late", async () => {
      // The listener's first connection goes away while its setup is under way, and that setup's
      // answers come back only after the next connection's setup turned tracking on. Were the late
      // setup to record its (closed) connection's client id, the reader's next reconnection would
      // point tracking at a client that no longer exists: refused, and no cache from then on.
      const reader = new Redis(redis.url);
      const warnings: string[] = [];
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      let firstInfo!: () => void;
      const firstInfoAsked = new Promise<void>((r) => (firstInfo = r));
      let listener!: Redis;
      const duplicate = reader.duplicate.bind(reader);
      reader.duplicate = (override) => {
        listener = duplicate(override);
        const info = listener.info.bind(listener);
        let calls = 0;
        // ioredis's own ready check asks INFO too (with no section): only the cache's setup is held.
        listener.info = (async (...args: Parameters<typeof info>) => {
          const first = args[0] === 'server' && ++calls === 1;
          if (first) firstInfo();
          const answer = await info(...args);
          if (first) await gate;
          return answer;
        }) as typeof listener.info;
        return listener;
      };
      const cache = new TrackedCache(reader, (m) => warnings.push(m));
      try {
        await firstInfoAsked;
        listener.disconnect(true); // closes, then ioredis connects again
        expect(await until(() => cache.tracking)).toBe(true);
        release();
        await new Promise((r) => setTimeout(r, 100));
        // The reader's connection goes away and comes back: tracking must be pointed at the
        // listener's current connection again.
        reader.disconnect(true);
        expect(await until(() => reader.status !== 'ready')).toBe(true);
        expect(await until(() => cache.tracking)).toBe(true);
        expect(warnings).toEqual([]);
      } finally {
        release();
        await cache.close();
        reader.disconnect();
      }
    });

    it('does not keep what a read brought back when its key changed while it was under way', async () => {
      const reader = new Redis(redis.url);
      const cache = new TrackedCache(reader);
      const doc = { kind: 'trips' as const, key: 'k', lifecycleRank: 0, json: '{}' };
      try {
        expect(await until(() => cache.tracking)).toBe(true);
        expect(await cache.read('k', async () => (cache.drop('k'), doc))).toBe(doc);
        expect(cache.get('k')).toBeUndefined();
        expect(await cache.read('k', async () => doc)).toBe(doc);
        expect(cache.get('k')).toBe(doc);
      } finally {
        await cache.close();
        reader.disconnect();
      }
    });
  });
});
