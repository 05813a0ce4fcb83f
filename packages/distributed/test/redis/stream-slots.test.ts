/**
 * RedisStreamSlots (stream-slots.ts) on a real Redis: the slots of open streams per token
 * (OTM_STREAMS_PER_TOKEN) counted once for every query process. Two instances on connections of
 * their own stand for two processes: the limit holds across them, even when they race for the last
 * slot; a release frees a slot at once; the slots of a holder that died (no release, no renewal)
 * free themselves once they expire, while a holder that renews keeps them; a renewal takes back a
 * slot that went missing; a Redis that does not answer is a rejection within the bound, counted.
 */
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registry, type StreamSlot } from '@otm/core';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../../../../test/infra/services.js';
import { RedisEntityStore, RedisStreamSlots } from '../../src/index.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const enabled = integrationEnabled('RedisStreamSlots (own redis-server)');
describe.skipIf(!enabled)('RedisStreamSlots', () => {
  let redis: RedisService;
  const clients: Redis[] = [];
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis({ own: true });
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await redis?.stop();
  });

  /** A process's slots: a connection of its own, the key prefix of the test. */
  const instance = (prefix: string): { slots: RedisStreamSlots; client: Redis } => {
    const client = new Redis(redis.url);
    clients.push(client);
    return { slots: new RedisStreamSlots(client, prefix), client };
  };
  const slot = (owner: string, id = randomUUID()): StreamSlot => ({ owner, id });

  it('holds the limit across processes, also when they race for the last slots; other tokens are not affected', async () => {
    const prefix = `ss-${randomUUID()}`;
    const [a, b] = [instance(prefix), instance(prefix)];
    expect(await a.slots.acquire(slot('token-1'), 3, 30_000)).toBe(true);
    expect(await b.slots.acquire(slot('token-1'), 3, 30_000)).toBe(true);
    // Ten streams ask at once, five on each: one is let through.
    const raced = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? a : b).slots.acquire(slot('token-1'), 3, 30_000)));
    expect(raced.filter(Boolean)).toHaveLength(1);
    expect(await a.slots.acquire(slot('token-2'), 3, 30_000)).toBe(true);
    // One sorted set a token, its own hash tag, members the stream ids, scores their expiry on
    // Redis's clock; the key expires with its longest-lived member.
    const raw = a.client;
    expect(await raw.zcard(`${prefix}:ss:{token-1}`)).toBe(3);
    const [, score] = await raw.zrange(`${prefix}:ss:{token-1}`, '0', '0', 'WITHSCORES');
    const [seconds, micros] = await raw.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    expect(Number(score) - now).toBeGreaterThan(25_000);
    expect(Number(score) - now).toBeLessThanOrEqual(30_000);
    expect(await raw.pttl(`${prefix}:ss:{token-1}`)).toBeGreaterThan(25_000);
    // Whatever a reference holds, it stays inside the hash tag.
    expect(new RedisStreamSlots(raw, prefix).key('a:b{c}%')).toBe(`${prefix}:ss:{a%3Ab%7Bc%7D%25}`);
  });

  it('a release frees a slot at once, for every process; a slot already held is taken again, not counted twice', async () => {
    const prefix = `ss-${randomUUID()}`;
    const [a, b] = [instance(prefix), instance(prefix)];
    const held = [slot('t'), slot('t')];
    for (const s of held) expect(await a.slots.acquire(s, 2, 30_000)).toBe(true);
    expect(await a.slots.acquire(held[1]!, 2, 30_000)).toBe(true);
    expect(await b.slots.acquire(slot('t'), 2, 30_000)).toBe(false);
    await a.slots.release(held[0]!);
    await a.slots.release(held[0]!);
    expect(await b.slots.acquire(slot('t'), 2, 30_000)).toBe(true);
    expect(await b.slots.acquire(slot('t'), 2, 30_000)).toBe(false);
  });

  it('frees the slots of a process that died once they expire; those of one that renews stay held; a renewal takes back a slot that went missing', async () => {
    const prefix = `ss-${randomUUID()}`;
    const [dead, alive, other] = [instance(prefix), instance(prefix), instance(prefix)];
    const ttl = 400;
    const mine = [slot('t'), slot('t')];
    for (const s of mine) expect(await alive.slots.acquire(s, 4, ttl)).toBe(true);
    for (let i = 0; i < 2; i++) expect(await dead.slots.acquire(slot('t'), 4, ttl)).toBe(true);
    dead.client.disconnect(); // no release, no renewal
    expect(await other.slots.acquire(slot('t'), 4, ttl)).toBe(false);
    // The living one renews every ttl/4, for more than twice the expiry.
    const until = Date.now() + 2.5 * ttl;
    while (Date.now() < until) {
      await alive.slots.renew(mine, ttl);
      await sleep(ttl / 4);
    }
    // The dead one's two are free; the living one's two still count.
    const again = [slot('t'), slot('t')];
    for (const s of again) expect(await other.slots.acquire(s, 4, 30_000)).toBe(true);
    expect(await other.slots.acquire(slot('t'), 4, 30_000)).toBe(false);
    // A member that went missing (say it expired while Redis was away) is added back by the renewal.
    await alive.client.zrem(`${prefix}:ss:{t}`, mine[0]!.id);
    expect(await alive.client.zscore(`${prefix}:ss:{t}`, mine[0]!.id)).toBeNull();
    await alive.slots.renew(mine, ttl);
    expect(await alive.client.zscore(`${prefix}:ss:{t}`, mine[0]!.id)).not.toBeNull();
    expect(await alive.client.zcard(`${prefix}:ss:{t}`)).toBe(4);
  });

  it("is the Redis entity store's, on its key prefix", async () => {
    const prefix = `ss-${randomUUID()}`;
    const store = new RedisEntityStore({ url: redis.url, prefix, cacheLatest: false });
    try {
      const other = instance(prefix);
      expect(await store.streamSlots.acquire(slot('t'), 1, 30_000)).toBe(true);
      expect(await other.slots.acquire(slot('t'), 1, 30_000)).toBe(false);
    } finally {
      await store.close();
    }
  });

  it('rejects within its bound when Redis does not answer, counted in otm_stream_slot_failures_total', async () => {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((s) => void sockets.add(s));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const client = new Redis(`redis://127.0.0.1:${(silent.address() as net.AddressInfo).port}`, { maxRetriesPerRequest: null });
    client.on('error', () => {});
    const failures = async (op: string) =>
      (await registry.getSingleMetric('otm_stream_slot_failures_total')!.get()).values.find((v) => v.labels.op === op)?.value ?? 0;
    try {
      const slots = new RedisStreamSlots(client, 'ss-silent', 200);
      const before = await failures('acquire');
      const t0 = Date.now();
      await expect(slots.acquire(slot('t'), 1, 1_000)).rejects.toThrow(/did not answer/);
      await expect(slots.renew([slot('t')], 1_000)).rejects.toThrow(/did not answer/);
      await expect(slots.release(slot('t'))).rejects.toThrow(/did not answer/);
      expect(Date.now() - t0).toBeLessThan(2_000);
      expect(await failures('acquire')).toBe(before + 1);
      expect(await failures('renew')).toBeGreaterThanOrEqual(1);
      expect(await failures('release')).toBeGreaterThanOrEqual(1);
    } finally {
      client.disconnect();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});
