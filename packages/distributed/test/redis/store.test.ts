/**
 * RedisEntityStore beyond the EntityStore contract: key layout, restarts, Redis going away, lists
 * by facet, the change feed and latest positions.
 */
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../../../../test/infra/services.js';
import {
  applyChanges,
  createLogger,
  encodeListRecord,
  encodeVersion,
  TOPICS,
  type Envelope,
  type FeedEntry,
  type LatestPosition,
  type ListPosition,
  type ListRecord,
  type ListScan,
} from '@otm/core';
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
        // Kept in memory of its own, not as a view of the socket chunk the reply came in.
        expect(first!.bytes!.buffer.byteLength).toBe(first!.bytes!.length);
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
        // Kept as its bytes alone (keptVersion), the same document.
        const kept = await cache.read('k', async () => doc);
        expect([kept?.json, kept?.bytes?.toString()]).toEqual(['{}', '{}']);
        expect(cache.get('k')).toBe(kept);
      } finally {
        await cache.close();
        reader.disconnect();
      }
    });

    /** A reader whose cache's setup steps fail as `fail` says: CLIENT ID on the listener, CLIENT TRACKING on the reader. */
    const faulty = (fail: { id: () => Error | undefined; tracking: () => Error | undefined }) => {
      const reader = new Redis(redis.url);
      const duplicate = reader.duplicate.bind(reader);
      reader.duplicate = (override) => {
        const listener = duplicate(override);
        const client = listener.client.bind(listener) as (...args: unknown[]) => Promise<unknown>;
        listener.client = (async (...args: unknown[]) => {
          const e = args[0] === 'ID' ? fail.id() : undefined;
          if (e !== undefined) throw e;
          return client(...args);
        }) as unknown as typeof listener.client;
        return listener;
      };
      const call = reader.call.bind(reader) as (...args: unknown[]) => Promise<unknown>;
      reader.call = async (...args: unknown[]) => {
        const e = args[0] === 'CLIENT' && args[1] === 'TRACKING' ? fail.tracking() : undefined;
        if (e !== undefined) throw e;
        return call(...args);
      };
      return reader;
    };

    it('sets itself up again after a step that got no answer, with no reconnection of Redis to wait for', async () => {
      // A command timed out (a Redis frozen for a while): the connections stay, no `ready` comes again.
      let ids = 0;
      let trackings = 0;
      const reader = faulty({
        id: () => (++ids <= 2 ? new Error('Command timed out') : undefined),
        tracking: () => (++trackings <= 2 ? new Error('Command timed out') : undefined),
      });
      const warnings: string[] = [];
      const cache = new TrackedCache(reader, (m) => warnings.push(m));
      try {
        expect(await until(() => cache.tracking, 15_000)).toBe(true);
        // Two failed listener setups, then two failed TRACKING calls: each logged once, with its attempt.
        expect(warnings.map((w) => /off for now \((.+)\): .* \(attempt (\d+)\)$/.exec(w)?.slice(1))).toEqual([
          ['Command timed out', '1'],
          ['Command timed out', '2'],
          ['Command timed out', '3'],
          ['Command timed out', '4'],
        ]);
        expect([ids, trackings]).toEqual([3, 3]);
      } finally {
        await cache.close();
        reader.disconnect();
      }
    });

    it('stays off, saying so once, when the server refuses a setup command (an error answer)', async () => {
      const refusal = Object.assign(new Error("ERR unknown subcommand 'TRACKING'"), { name: 'ReplyError' });
      let trackings = 0;
      const reader = faulty({ id: () => undefined, tracking: () => (++trackings, refusal) });
      const warnings: string[] = [];
      const cache = new TrackedCache(reader, (m) => warnings.push(m));
      try {
        expect(await until(() => warnings.length > 0, 5_000)).toBe(true);
        expect(warnings).toEqual(["redis: no client-side cache (ERR unknown subcommand 'TRACKING'): every GET asks Redis"]);
        // Nothing is tried again.
        expect((cache as unknown as { retryTimer?: unknown }).retryTimer).toBeUndefined();
        expect([cache.tracking, trackings]).toEqual([false, 1]);
      } finally {
        await cache.close();
        reader.disconnect();
      }
    });
  });

  describe('lists by facet (a sorted set per tenant, kind and facet)', () => {
    const version = (key: string, at: number) => ({
      kind: 'trips' as const,
      key,
      lifecycleRank: 0,
      json: '{}',
      stamp: { modified: at, acceptedAt: at },
    });
    const record = (at: number, ...facets: string[]): ListRecord => ({ at, ranks: { 0: ['', ...facets] } });
    const byPosition = (a: ListPosition, b: ListPosition) => a.at - b.at || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
    const scan = (over: Partial<ListScan> & { facet: string }): ListScan => ({ tenant: 'lt', kind: 'trips', limit: 1000, ...over });
    /** Every page of a list, `limit` at a time. */
    async function walk(store: RedisEntityStore, over: Partial<ListScan> & { facet: string }, limit: number): Promise<ListPosition[]> {
      const out: ListPosition[] = [];
      for (let after: ListPosition | undefined; ;) {
        const page = await store.list(scan({ ...over, limit, ...(after ? { after } : {}) }));
        expect(page.length).toBeLessThanOrEqual(limit);
        out.push(...page);
        if (page.length < limit) return out;
        after = page[page.length - 1];
      }
    }

    it('keeps a record beside the entity and one sorted set per facet, every score 0, members `at|key`', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'ls1' });
      const raw = new Redis(redis.url);
      const key = randomUUID();
      try {
        const next = record(1_700_000_000_123, 'status=a:b{c}');
        await store.unit(async (tx) => {
          tx.put('lt', version(key, 1));
          expect(await tx.listRecords('lt', [{ kind: 'trips', key }])).toEqual([undefined]);
          tx.setListRecord('lt', 'trips', key, next, undefined);
        });
        expect(await raw.get(`ls1:lr:{lt:trips:${key}}`)).toBe(encodeListRecord(next));
        for (const zset of ['ls1:l:{lt:trips:}', 'ls1:l:{lt:trips:status=a%3Ab%7Bc%7D}']) {
          expect(await raw.zrange(zset, '0', '-1', 'WITHSCORES')).toEqual([`001700000000123|${key}`, '0']);
        }
        expect(await store.list(scan({ facet: 'status=a:b{c}' }))).toEqual([{ at: 1_700_000_000_123, key }]);
      } finally {
        raw.disconnect();
        await store.close();
      }
    });

    it('pages in (at, key) order by facet: strictly after the cursor, at or after `since`, before `before`', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'ls2' });
      try {
        // 60 entities at six times (ties broken by key), status a or b.
        const all = Array.from({ length: 60 }, (_, i) => ({ at: 1000 * (1 + (i % 6)), key: randomUUID(), status: i % 2 ? 'b' : 'a' }));
        await store.unit(async (tx) => {
          for (const e of all) tx.setListRecord('lt', 'trips', e.key, record(e.at, `status=${e.status}`), undefined);
        });
        const expected = (f: (e: (typeof all)[number]) => boolean) =>
          all
            .filter(f)
            .map(({ at, key }) => ({ at, key }))
            .sort(byPosition);
        expect(await walk(store, { facet: '' }, 7)).toEqual(expected(() => true));
        expect(await walk(store, { facet: 'status=a' }, 4)).toEqual(expected((e) => e.status === 'a'));
        expect(await walk(store, { facet: 'status=c' }, 4)).toEqual([]);
        expect(await walk(store, { facet: '', since: 3000, before: 5000 }, 5)).toEqual(expected((e) => e.at >= 3000 && e.at < 5000));
        expect(await walk(store, { facet: 'status=b', since: 2500 }, 3)).toEqual(expected((e) => e.status === 'b' && e.at >= 2500));
        const sorted = expected(() => true);
        // A cursor after `since`, and one before it: whichever is later bounds the page.
        expect(await store.list(scan({ facet: '', after: sorted[10]!, since: 1000 }))).toEqual(sorted.slice(11));
        expect(await store.list(scan({ facet: '', after: sorted[0]!, since: 4000 }))).toEqual(expected((e) => e.at >= 4000));
        expect(await store.list(scan({ facet: '', since: 4000, before: 4000 }))).toEqual([]);
        expect(await store.list(scan({ facet: '', before: 0 }))).toEqual([]);
        expect(await store.list(scan({ facet: '', limit: 0 }))).toEqual([]);
        expect(await store.list(scan({ facet: '', tenant: 'other' }))).toEqual([]);
      } finally {
        await store.close();
      }
    });

    it('moves an entity from the members of its previous record to those of the next, and removes them all on delete', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'ls3' });
      const raw = new Redis(redis.url);
      const key = randomUUID();
      const keysOf = async (facet: string) => (await store.list(scan({ facet }))).map((p) => `${p.at}|${p.key}`);
      try {
        const first: ListRecord = { at: 1000, ranks: { 2: ['', 'status=a', 'lifecycle=planned'], 4: ['', 'lifecycle=actual'] } };
        await store.unit(async (tx) => tx.setListRecord('lt', 'trips', key, first, undefined));
        expect(await keysOf('')).toEqual([`1000|${key}`]);
        expect(await keysOf('lifecycle=actual')).toEqual([`1000|${key}`]);
        const second = record(2000, 'status=b');
        await store.unit(async (tx) => {
          const [previous] = await tx.listRecords('lt', [{ kind: 'trips', key }]);
          expect(previous).toEqual(first);
          tx.setListRecord('lt', 'trips', key, second, previous);
        });
        expect(await keysOf('')).toEqual([`2000|${key}`]);
        expect(await keysOf('status=a')).toEqual([]);
        expect(await keysOf('lifecycle=actual')).toEqual([]);
        expect(await keysOf('status=b')).toEqual([`2000|${key}`]);
        await store.unit(async (tx) => {
          const [previous] = await tx.listRecords('lt', [{ kind: 'trips', key }]);
          tx.setListRecord('lt', 'trips', key, undefined, previous);
        });
        expect(await keysOf('')).toEqual([]);
        expect(await keysOf('status=b')).toEqual([]);
        expect(await raw.keys('ls3:*')).toEqual([]);
      } finally {
        raw.disconnect();
        await store.close();
      }
    });

    it("reads list records through the unit's own writes, and runs again when another unit changed one it read", async () => {
      const a = new RedisEntityStore({ url: redis.url, prefix: 'ls4' });
      const b = new RedisEntityStore({ url: redis.url, prefix: 'ls4' });
      const [k1, k2, k3] = [randomUUID(), randomUUID(), randomUUID()];
      try {
        await b.unit(async (tx) => tx.setListRecord('lt', 'trips', k1, record(1, 'status=a'), undefined));
        const seen: Array<Array<ListRecord | undefined>> = [];
        await a.unit(async (tx) => {
          tx.setListRecord('lt', 'trips', k2, record(5), undefined);
          const got = await tx.listRecords('lt', [
            { kind: 'trips', key: k1 },
            { kind: 'trips', key: k2 },
            { kind: 'trips', key: k3 },
            { kind: 'trips', key: k1 },
          ]);
          seen.push(got);
          // The first time, another process moves k1 between this read and the commit.
          if (seen.length === 1) {
            await b.unit(async (tx2) => tx2.setListRecord('lt', 'trips', k1, record(2, 'status=b'), record(1, 'status=a')));
          }
          tx.setListRecord('lt', 'trips', k1, record(3, 'status=c'), got[0]);
        });
        expect(seen).toEqual([
          [record(1, 'status=a'), record(5), undefined, record(1, 'status=a')],
          [record(2, 'status=b'), record(5), undefined, record(2, 'status=b')],
        ]);
        // Removed from where the second run found it: no member of an old position is left.
        expect(await a.list(scan({ facet: 'status=b' }))).toEqual([]);
        expect(await a.list(scan({ facet: 'status=c' }))).toEqual([{ at: 3, key: k1 }]);
        expect(await a.list(scan({ facet: '' }))).toEqual([
          { at: 3, key: k1 },
          { at: 5, key: k2 },
        ]);
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('lists what apply-changes stored under every facet of the document, and nothing once deleted', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'ls5' });
      const logger = createLogger('silent');
      const [trip, vehicle, actor] = [randomUUID(), randomUUID(), randomUUID()];
      const doc = {
        id: trip,
        entityType: 'trip',
        status: 'inTransit',
        externalIdentifiers: [{ id: 'EXT-1' }],
        vehicle: { associationType: 'inline', entity: { id: vehicle, entityType: 'vehicle', licensePlate: 'ZZ-99' } },
        actors: [{ associationType: 'reference', uuid: actor, entityType: 'actor' }],
      };
      const put: Envelope = {
        topic: TOPICS.entities,
        key: trip,
        message: { v: 1, op: 'put', tenant: 'lt', kind: 'trips', key: trip, acceptedAt: 1, doc },
      };
      try {
        const t0 = Date.now();
        await store.unit((tx) => applyChanges(tx, [put], { logger }));
        for (const facet of ['', 'status=inTransit', 'externalId=EXT-1', `vehicle=${vehicle}`, `actor=${actor}`]) {
          const [entry, ...rest] = await store.list(scan({ facet }));
          expect(rest, facet).toEqual([]);
          expect(entry?.key, facet).toBe(trip);
          expect(entry!.at).toBeGreaterThanOrEqual(t0);
        }
        expect((await store.list(scan({ kind: 'vehicles', facet: 'licensePlate=ZZ-99' }))).map((p) => p.key)).toEqual([vehicle]);
        const del: Envelope = {
          topic: TOPICS.entities,
          key: trip,
          message: { v: 1, op: 'delete', tenant: 'lt', kind: 'trips', key: trip, acceptedAt: 2 },
        };
        await store.unit((tx) => applyChanges(tx, [del], { logger }));
        for (const facet of ['', 'status=inTransit', `vehicle=${vehicle}`]) expect(await store.list(scan({ facet })), facet).toEqual([]);
        expect(await store.list(scan({ kind: 'vehicles', facet: '' }))).toHaveLength(1);
      } finally {
        await store.close();
      }
    });

    it('walks a list while other units change its entities: every entity is seen, those left alone exactly once', async () => {
      const walker = new RedisEntityStore({ url: redis.url, prefix: 'ls6' });
      const writer = new RedisEntityStore({ url: redis.url, prefix: 'ls6' });
      try {
        const keys = Array.from({ length: 200 }, () => randomUUID());
        await writer.unit(async (tx) =>
          keys.forEach((k, i) => tx.setListRecord('lt', 'trips', k, record(1000 + i, 'status=a'), undefined)),
        );
        const changed = new Set<string>();
        let at = 10_000;
        const seen: ListPosition[] = [];
        for (let after: ListPosition | undefined; ;) {
          const page = await walker.list(scan({ facet: 'status=a', limit: 9, ...(after ? { after } : {}) }));
          seen.push(...page);
          if (page.length < 9) break;
          after = page[page.length - 1];
          // Between pages, another process changes three entities: they move to the end of the list.
          await writer.unit(async (tx) => {
            const picked = [0, 1, 2].map(() => keys[Math.floor(Math.random() * keys.length)]!);
            const previous = await tx.listRecords(
              'lt',
              picked.map((key) => ({ kind: 'trips' as const, key })),
            );
            picked.forEach((key, i) => {
              const next = record(++at, 'status=a');
              tx.setListRecord('lt', 'trips', key, next, previous[i]);
              // Within one unit the overlay gives the record just set, should the same key come twice.
              previous.forEach((_, j) => j > i && picked[j] === key && (previous[j] = next));
              changed.add(key);
            });
          });
        }
        for (let i = 1; i < seen.length; i++) expect(byPosition(seen[i - 1]!, seen[i]!)).toBeLessThan(0);
        const count = new Map<string, number>();
        for (const p of seen) count.set(p.key, (count.get(p.key) ?? 0) + 1);
        for (const k of keys) {
          expect(count.get(k), k).toBeGreaterThanOrEqual(1);
          if (!changed.has(k)) expect(count.get(k), k).toBe(1);
        }
        expect(changed.size).toBeGreaterThan(10);
        // The list holds each entity once, at its last position.
        expect(await walker.list(scan({ facet: 'status=a' }))).toHaveLength(200);
      } finally {
        await walker.close();
        await writer.close();
      }
    });
  });

  describe('the change feed (a Redis stream per tenant)', () => {
    const version = (key: string, rank = 0, kind: 'trips' | 'events' = 'trips') => ({
      kind,
      key,
      lifecycleRank: rank,
      json: '{}',
      stamp: { modified: 1, acceptedAt: 1 },
    });
    const brief = (e: FeedEntry) => (e.op === 'put' ? `put ${e.kind} ${e.key} ${e.lifecycleRank}` : `delete ${e.kind} ${e.key}`);
    const readAll = async (store: RedisEntityStore, tenant: string, after?: string) =>
      (await store.feed.read({ tenant, limit: 10_000, ...(after ? { after } : {}) })).entries;

    it("records the puts and deletes of units in the units' commit order, then what the telemetry worker appends", async () => {
      const a = new RedisEntityStore({ url: redis.url, prefix: 'fd1' });
      const b = new RedisEntityStore({ url: redis.url, prefix: 'fd1' });
      const [k1, k2, k3] = [randomUUID(), randomUUID(), randomUUID()];
      try {
        const t0 = Date.now();
        await a.unit(async (tx) => {
          tx.put('ft', version(k1));
          tx.put('ft', version(k2));
          tx.put('other', version(k3));
        });
        await b.unit(async (tx) => {
          tx.delete('ft', 'trips', k1);
          tx.put('ft', version(k3, 4));
        });
        await a.telemetry.appendFeed([
          { tenant: 'ft', kind: 'events', key: 'e1', lifecycleRank: 4, op: 'put' },
          { tenant: 'ft', kind: 'events', key: 'e2', lifecycleRank: 0, op: 'delete' },
        ]);
        const entries = await readAll(a, 'ft');
        expect(entries.map(brief)).toEqual([
          `put trips ${k1} 0`,
          `put trips ${k2} 0`,
          `delete trips ${k1}`,
          `put trips ${k3} 4`,
          'put events e1 4',
          'delete events e2',
        ]);
        for (const e of entries) {
          expect(e.doc).toBeUndefined();
          expect(e.at).toBeGreaterThanOrEqual(t0);
          expect(e.at).toBeLessThanOrEqual(Date.now());
        }
        expect((await readAll(a, 'other')).map(brief)).toEqual([`put trips ${k3} 0`]);
        // Resumed after any entry's cursor: the entries after it.
        expect((await readAll(b, 'ft', entries[2]!.cursor)).map(brief)).toEqual(entries.slice(3).map(brief));
        const page = await a.feed.read({ tenant: 'ft', limit: 2 });
        expect(page).toEqual({ entries: entries.slice(0, 2), next: entries[1]!.cursor });
        // Nothing after the last: an empty page that does not move the reader.
        expect(await a.feed.read({ tenant: 'ft', after: entries[5]!.cursor, limit: 10 })).toEqual({ entries: [] });
      } finally {
        await a.close();
        await b.close();
      }
    });

    it("keeps each unit's entries together in commit order, and nothing of a commit Redis refused", async () => {
      const stores = [new RedisEntityStore({ url: redis.url, prefix: 'fd2' }), new RedisEntityStore({ url: redis.url, prefix: 'fd2' })];
      try {
        // 40 units of three puts each, from two processes at once.
        await Promise.all(
          Array.from({ length: 40 }, (_, u) =>
            stores[u % 2]!.unit(async (tx) => {
              for (let i = 0; i < 3; i++) tx.put('ft', version(`u${u}-${i}`));
            }),
          ),
        );
        const keys = (await readAll(stores[0]!, 'ft')).map((e) => e.key);
        expect(keys).toHaveLength(120);
        for (let i = 0; i < 120; i += 3) {
          const unit = keys[i]!.split('-')[0];
          expect(keys.slice(i, i + 3)).toEqual([0, 1, 2].map((n) => `${unit}-${n}`));
        }
        // A unit whose first commit is refused (a key it read changed) writes its entries once.
        const key = randomUUID();
        await stores[1]!.unit(async (tx) => tx.put('fr', version(key)));
        let runs = 0;
        await stores[0]!.unit(async (tx) => {
          await tx.get('fr', 'trips', key);
          if (++runs === 1) await stores[1]!.unit(async (tx2) => tx2.put('fr', version(key, 1)));
          tx.put('fr', version(key, 2));
        });
        expect(runs).toBe(2);
        expect((await readAll(stores[0]!, 'fr')).map(brief)).toEqual([`put trips ${key} 0`, `put trips ${key} 1`, `put trips ${key} 2`]);
      } finally {
        await Promise.all(stores.map((s) => s.close()));
      }
    });

    it('records one entry per version a unit put, and a delete in place of the puts of the entity before it', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'fd3' });
      const [k1, k2] = [randomUUID(), randomUUID()];
      try {
        await store.unit(async (tx) => {
          tx.put('ft', version(k1));
          tx.put('ft', version(k2));
          tx.put('ft', version(k1, 4));
          tx.put('ft', version(k1)); // again: its entry moves to here
          tx.delete('ft', 'trips', k2);
          tx.put('ft', version(k2, 3)); // after the delete: kept
        });
        expect((await readAll(store, 'ft')).map(brief)).toEqual([
          `put trips ${k1} 4`,
          `put trips ${k1} 0`,
          `delete trips ${k2}`,
          `put trips ${k2} 3`,
        ]);
      } finally {
        await store.close();
      }
    });

    it('skips other kinds, looking at no more than 20 × limit entries a read, and says where it stopped', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'fd4' });
      const change = (kind: 'trips' | 'events', key: string) => ({ tenant: 'ft', kind, key, lifecycleRank: 0, op: 'put' as const });
      try {
        await store.telemetry.appendFeed([
          change('events', 'e0'),
          ...Array.from({ length: 100 }, (_, i) => change('trips', `t${i}`)),
          change('events', 'e1'),
          change('events', 'e2'),
        ]);
        const all = await readAll(store, 'ft');
        const events = new Set(['events' as const]);
        let page = await store.feed.read({ tenant: 'ft', kinds: events, limit: 2 });
        // e0, then 39 trips looked at (40 = 20 × 2 in all): stopped there.
        expect(page.entries.map((e) => e.key)).toEqual(['e0']);
        expect(page.next).toBe(all[39]!.cursor);
        page = await store.feed.read({ tenant: 'ft', kinds: events, limit: 2, after: page.next! });
        expect(page.entries).toEqual([]);
        expect(page.next).toBe(all[79]!.cursor);
        page = await store.feed.read({ tenant: 'ft', kinds: events, limit: 2, after: page.next! });
        expect(page.entries.map((e) => e.key)).toEqual(['e1', 'e2']);
        expect(page.next).toBe(all[102]!.cursor);
        page = await store.feed.read({ tenant: 'ft', kinds: events, limit: 2, after: page.next! });
        expect(page).toEqual({ entries: [] });
        // A kind filter that matches all reads like none.
        expect((await store.feed.read({ tenant: 'ft', kinds: new Set(['trips', 'events']), limit: 3 })).entries).toEqual(all.slice(0, 3));
        // Large limits read in chunks, and stop at the limit.
        const many = await store.feed.read({ tenant: 'ft', kinds: new Set(['trips']), limit: 60 });
        expect(many.entries.map((e) => e.key)).toEqual(Array.from({ length: 60 }, (_, i) => `t${i}`));
        expect(many.next).toBe(all[60]!.cursor);
      } finally {
        await store.close();
      }
    });

    it('answers 410 to a cursor below what retention removed, and not to one at its edge', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'fd5', feedRetentionMs: 1_000 });
      const raw = new Redis(redis.url);
      const change = (key: string) => ({ tenant: 'ft', kind: 'events' as const, key, lifecycleRank: 0, op: 'put' as const });
      try {
        await store.telemetry.appendFeed(Array.from({ length: 250 }, (_, i) => change(`old${i}`)));
        const old = await readAll(store, 'ft');
        expect(old).toHaveLength(250);
        await new Promise((r) => setTimeout(r, 1_100));
        // A unit's commit trims as the worker's appends do.
        await store.unit(async (tx) => tx.put('ft', version('new')));
        expect(await raw.xlen('fd5:f:{ft}')).toBe(1);
        expect(await raw.get('fd5:ff:{ft}')).toBe(old[249]!.cursor);
        await expect(store.feed.read({ tenant: 'ft', after: old[0]!.cursor, limit: 10 })).rejects.toMatchObject({
          status: 410,
          code: 'cursorExpired',
        });
        await expect(store.feed.read({ tenant: 'ft', after: old[248]!.cursor, limit: 10 })).rejects.toMatchObject({ status: 410 });
        await expect(store.feed.read({ tenant: 'ft', after: '0-0', limit: 10 })).rejects.toMatchObject({ status: 410 });
        // The newest change removed: nothing after it was lost (a reader that had read everything).
        const [latest] = await readAll(store, 'ft', old[249]!.cursor);
        expect(latest).toMatchObject({ op: 'put', kind: 'trips', key: 'new' });
        expect((await readAll(store, 'ft')).map((e) => e.key)).toEqual(['new']);
        // A cursor the feed still holds never expires, however old.
        await store.telemetry.appendFeed([change('newer')]);
        const [newer] = await readAll(store, 'ft', latest!.cursor);
        expect(newer?.key).toBe('newer');
        // The head is the newest change; of a stream with nothing left, the floor (not expired).
        expect(await store.feed.head('ft')).toBe(newer!.cursor);
        await raw.xtrim('fd5:f:{ft}', 'MAXLEN', 0);
        await raw.set('fd5:ff:{ft}', newer!.cursor);
        expect(await store.feed.head('ft')).toBe(newer!.cursor);
        expect(await readAll(store, 'ft', await store.feed.head('ft'))).toEqual([]);
      } finally {
        raw.disconnect();
        await store.close();
      }
    });

    it("appends a tenant's entries in order over several script calls, also after Redis lost its scripts, and trims at the end", async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'fd8', feedRetentionMs: 1_000 });
      const raw = new Redis(redis.url);
      const change = (tenant: string, key: string) => ({ tenant, kind: 'events' as const, key, lifecycleRank: 4, op: 'put' as const });
      try {
        await raw.script('FLUSH');
        const n = 1_234;
        await store.telemetry.appendFeed(Array.from({ length: 2 * n }, (_, i) => change(i % 2 ? 'fb' : 'fa', `k${i >> 1}`)));
        const expected = Array.from({ length: n }, (_, i) => `put events k${i} 4`);
        const before = await readAll(store, 'fa');
        expect(before.map(brief)).toEqual(expected);
        expect((await readAll(store, 'fb')).map(brief)).toEqual(expected);
        await new Promise((r) => setTimeout(r, 1_100));
        await store.telemetry.appendFeed(Array.from({ length: 1_001 }, (_, i) => change('fa', `new${i}`)));
        const after = await readAll(store, 'fa');
        expect(after.map((e) => e.key)).toEqual(Array.from({ length: 1_001 }, (_, i) => `new${i}`));
        expect(await raw.get('fd8:ff:{fa}')).toBe(before[n - 1]!.cursor);
        await expect(store.feed.read({ tenant: 'fa', after: before[0]!.cursor, limit: 10 })).rejects.toMatchObject({ status: 410 });
      } finally {
        raw.disconnect();
        await store.close();
      }
    });

    it('answers 400 naming `cursor` to a cursor that is not one of a feed, and an empty page where nothing changed', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'fd6' });
      try {
        for (const cursor of ['', 'abc', '1-2-3', '12', '-1-0', '1-x', '99999999999999999999-0', `${'9'.repeat(21)}-0`]) {
          const err = await store.feed.read({ tenant: 'ft', after: cursor, limit: 10 }).then(
            () => undefined,
            (e: unknown) => e,
          );
          expect(err, cursor).toMatchObject({ status: 400, code: 'invalidDocument', items: [{ type: 'invalidField', field: 'cursor' }] });
        }
        expect(await store.feed.read({ tenant: 'quiet', limit: 10 })).toEqual({ entries: [] });
        expect(await store.feed.read({ tenant: 'quiet', after: '1700000000000-0', limit: 10 })).toEqual({ entries: [] });
      } finally {
        await store.close();
      }
    });

    it('costs about 80 bytes of Redis memory an entry (MEMORY USAGE of 100,000 puts of events)', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'fd7' });
      const raw = new Redis(redis.url);
      try {
        const n = 100_000;
        for (let i = 0; i < n; i += 10_000) {
          await store.telemetry.appendFeed(
            Array.from({ length: 10_000 }, () => ({
              tenant: 'ft',
              kind: 'events' as const,
              key: randomUUID(),
              lifecycleRank: 4,
              op: 'put' as const,
            })),
          );
        }
        const bytes = Number(await raw.call('MEMORY', 'USAGE', 'fd7:f:{ft}', 'SAMPLES', '0'));
        const perEntry = bytes / n;
        console.log(`feed stream: ${n} entries, ${bytes} bytes, ${perEntry.toFixed(1)} bytes an entry`);
        // feed.ts documents the figure: keep it true.
        expect(perEntry).toBeGreaterThan(60);
        expect(perEntry).toBeLessThan(95);
        // A commit's trimming, with nothing old enough to remove, is one script call that removes
        // nothing; its time is printed, not asserted (a seek, not a walk over the 100,000 entries,
        // which took some 25 ms: feed.ts TRIM_FUNCTION).
        await raw.config('RESETSTAT');
        await store.unit(async (tx) => tx.put('ft', version('trimmed')));
        const evals = /cmdstat_eval:calls=(\d+),usec=(\d+)/.exec(await raw.info('commandstats'));
        expect(Number(evals?.[1])).toBe(1);
        expect(Number(await raw.xlen('fd7:f:{ft}'))).toBe(n + 1);
        console.log(`feed stream: a commit's trimming with nothing to remove took ${evals?.[2]} µs of Redis`);
      } finally {
        await raw.del('fd7:f:{ft}');
        raw.disconnect();
        await store.close();
      }
    });
  });

  describe('latest positions (a hash per tenant)', () => {
    const fix = (tenant: string, vehicle: string, time: number, eventKey: string, lat = 52): LatestPosition & { tenant: string } => ({
      tenant,
      vehicle,
      time,
      lat,
      lon: 4,
      speedKmh: null,
      heading: 90,
      eventKey,
    });
    const where = (ps: LatestPosition[]) => ps.map((p) => `${p.vehicle} ${p.time} ${p.eventKey}`);

    it('keeps the newest fix of each vehicle (event time, then event key), whatever order fixes come in', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'ps1' });
      try {
        await store.telemetry.updatePositions([fix('pt', 'v1', 100, 'b'), fix('pt', 'v2', 100, 'x'), fix('other', 'v1', 5, 'z')]);
        expect(await store.positions.positions('pt')).toEqual([
          { vehicle: 'v1', time: 100, lat: 52, lon: 4, speedKmh: null, heading: 90, eventKey: 'b' },
          { vehicle: 'v2', time: 100, lat: 52, lon: 4, speedKmh: null, heading: 90, eventKey: 'x' },
        ]);
        // Older, or as old with an earlier key: nothing changes. Byte order of keys: 'B' < 'a' whatever the server's locale.
        await store.telemetry.updatePositions([fix('pt', 'v1', 99, 'z'), fix('pt', 'v1', 100, 'a')]);
        await store.telemetry.updatePositions([fix('pt', 'v2', 100, 'B')]);
        expect(where(await store.positions.positions('pt'))).toEqual(['v1 100 b', 'v2 100 x']);
        // Newer in one batch with older ones (the batch's newest wins), the same event again (kept, as sent).
        await store.telemetry.updatePositions([
          fix('pt', 'v1', 300, 'c'),
          fix('pt', 'v1', 200, 'd'),
          fix('pt', 'v2', 100, 'x', 53),
          fix('pt', 'v3', 1, 'a'),
        ]);
        expect(where(await store.positions.positions('pt'))).toEqual(['v1 300 c', 'v2 100 x', 'v3 1 a']);
        expect((await store.positions.positions('pt'))[1]!.lat).toBe(53);
        expect(where(await store.positions.positions('other'))).toEqual(['v1 5 z']);
        expect(await store.positions.positions('nobody')).toEqual([]);
        // Decided in Redis: a store that never saw v1's newest fix cannot move it back.
        const other = new RedisEntityStore({ url: redis.url, prefix: 'ps1' });
        await other.telemetry.updatePositions([fix('pt', 'v1', 250, 'e')]);
        await other.close();
        expect(where(await store.positions.positions('pt'))).toEqual(['v1 300 c', 'v2 100 x', 'v3 1 a']);
      } finally {
        await store.close();
      }
    });

    it('sends the script again when Redis no longer has it (SCRIPT FLUSH, a restart)', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'ps2' });
      const raw = new Redis(redis.url);
      try {
        await store.telemetry.updatePositions([fix('pt', 'v1', 1, 'a')]);
        await raw.script('FLUSH');
        await store.telemetry.updatePositions([fix('pt', 'v1', 2, 'a')]);
        expect(where(await store.positions.positions('pt'))).toEqual(['v1 2 a']);
      } finally {
        raw.disconnect();
        await store.close();
      }
    });

    it('answers the positions of a fleet of 10,000 vehicles with one HGETALL', async () => {
      const store = new RedisEntityStore({ url: redis.url, prefix: 'ps3' });
      try {
        const vehicles = Array.from({ length: 10_000 }, () => randomUUID());
        let t = Date.now();
        await store.telemetry.updatePositions(
          vehicles.map((v, i) => ({ ...fix('fleet', v, 1_700_000_000_000 + i, randomUUID()), speedKmh: 50.5 })),
        );
        const wrote = Date.now() - t;
        t = Date.now();
        const positions = await store.positions.positions('fleet');
        const read = Date.now() - t;
        console.log(`positions: 10,000 vehicles written in ${wrote} ms, read in ${read} ms`);
        expect(positions).toHaveLength(10_000);
        expect(positions.map((p) => p.vehicle)).toEqual([...vehicles].sort());
        expect(positions[0]).toMatchObject({ lat: 52, lon: 4, speedKmh: 50.5, heading: 90 });
      } finally {
        await store.close();
      }
    });
  });
});
