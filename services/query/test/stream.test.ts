/**
 * The stream's hub (stream.ts) without I/O (stream-fixture.ts). Streams that resume while changes
 * keep coming get every change after their cursor exactly once, in order, however their catching
 * up and the shared reading interleave; a stream following one vehicle costs the changes of that
 * vehicle only; slow clients are cut off; the per-token limit, counted by the stream slots (in the
 * process, or shared by several hubs as Redis shares them between processes); closing.
 */
import { describe, expect, it } from 'vitest';
import { ErrorCode, OtmServiceError, registry, type FeedEntry, type LatestPosition, type StreamSlots } from '@otm/core';
import { MemoryStreamSlots } from '@otm/embedded';
import type { StreamFilter, StreamOptions } from '../src/stream.js';
import { MemoryFeed, Sink, eventKey, hubOf, locationOf, matches, sleep, sourceOf, vehicleKey } from './stream-fixture.js';

describe('stream hub', () => {
  it('resuming streams meet the shared reading without a gap or a change twice, while changes keep coming', async () => {
    const feed = new MemoryFeed();
    const hub = hubOf(sourceOf(feed), { perToken: 1_000, pollMs: 1, pageSize: 7, remembered: 40, heartbeatMs: 60_000 });
    const write = (i: number) => {
      const r = Math.random();
      if (r < 0.1) feed.append('other', 'vehicles', vehicleKey(i % 5));
      else if (r < 0.4) feed.append('t', 'vehicles', vehicleKey(i % 5));
      else if (r < 0.5) feed.append('t', 'trips', `t-${i}`, undefined, Math.random() < 0.3 ? 'delete' : 'put');
      else feed.append('t', 'events', eventKey(i), locationOf(i, i % 5));
    };
    for (let i = 0; i < 50; i++) write(i);
    interface Session {
      sink: Sink;
      from?: string;
      filter: StreamFilter;
      close(): void;
    }
    const sessions: Session[] = [];
    let writing = true;
    const writer = (async () => {
      for (let i = 50; i < 1_500; i++) {
        write(i);
        if (i % 10 === 0) await sleep(Math.random() * 4);
      }
      writing = false;
    })();
    const filters: StreamFilter[] = [
      {},
      { kinds: new Set(['vehicles'] as const) },
      { vehicle: vehicleKey(2) },
      { kinds: new Set(['events', 'trips'] as const) },
    ];
    let n = 0;
    while (writing) {
      await sleep(Math.random() * 15);
      const mine = feed.of('t');
      const r = Math.random();
      // From an old change, a recent one, or none (live).
      const from =
        r < 0.3
          ? undefined
          : r < 0.6
            ? mine[Math.floor(Math.random() * mine.length)]!.cursor
            : mine[Math.max(0, mine.length - 1 - Math.floor(Math.random() * 5))]!.cursor;
      const filter = filters[n++ % filters.length]!;
      const sink = new Sink();
      const s = await hub.open({ tenant: 't', owner: `o${n}`, filter, ...(from === undefined ? {} : { from }), sink });
      s.start();
      sessions.push({ sink, ...(from === undefined ? {} : { from }), filter, close: () => s.close() });
    }
    await writer;
    const end = feed.append('t', 'vehicles', vehicleKey(9)); // every stream takes it (vehicle 9: not of a vehicle filter...)
    const last = feed.append('t', 'events', eventKey(9_999), locationOf(9_999, 2));
    // A bound, not a timing check: on a loaded machine the catching up takes longer.
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && !sessions.every((s) => s.sink.ids().includes(matches(s.filter, last) ? last.cursor : end.cursor)))
      await sleep(10);
    expect(sessions.length).toBeGreaterThan(10);
    const mine = feed.of('t');
    for (const s of sessions) {
      const got = s.sink.ids();
      if (s.from !== undefined) {
        const expected = mine.filter((e) => Number(e.cursor) > Number(s.from) && matches(s.filter, e)).map((e) => e.cursor);
        expect(got).toEqual(expected);
      } else {
        // Live: from wherever it started, every change that followed.
        expect(got.length).toBeGreaterThan(0);
        const expected = mine.filter((e) => Number(e.cursor) >= Number(got[0]) && matches(s.filter, e)).map((e) => e.cursor);
        expect(got).toEqual(expected);
      }
      // The items are those of /changes.
      for (const e of s.sink.events().slice(0, 3)) expect(JSON.parse(e.data)).toMatchObject({ cursor: e.id, op: e.event });
    }
    // Nothing of another tenant.
    const others = new Set(feed.of('other').map((e) => e.cursor));
    for (const s of sessions) expect(s.sink.ids().filter((id) => others.has(id))).toEqual([]);
    hub.close();
  }, 120_000);

  it('hands a change of one vehicle to the streams of that vehicle only (indexed, not a scan of all streams)', async () => {
    const feed = new MemoryFeed();
    const hub = hubOf(sourceOf(feed), { perToken: 10_000, pollMs: 1, heartbeatMs: 60_000 });
    let looks = 0;
    const sinks: Sink[] = [];
    for (let v = 0; v < 1_000; v++) {
      const key = vehicleKey(v);
      // Counts every look at the filter's vehicle: the index looks once when attaching.
      const filter = {
        get vehicle() {
          looks++;
          return key;
        },
      };
      const sink = new Sink();
      const s = await hub.open({ tenant: 't', owner: `o${v}`, filter, sink });
      s.start();
      sinks.push(sink);
    }
    looks = 0;
    for (let v = 0; v < 1_000; v++) feed.append('t', 'events', eventKey(v), locationOf(v, v));
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !sinks.every((s) => s.events().length === 1)) await sleep(10);
    sinks.forEach((s, v) => expect(s.ids()).toEqual([String(v + 1)]));
    // One look (the filter check) for each change, not one per stream per change (1,000,000).
    expect(looks).toBeLessThanOrEqual(2_000);
    hub.close();
  }, 30_000);

  it('cuts off a client that does not read, and goes on with the others', async () => {
    const feed = new MemoryFeed();
    const hub = hubOf(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 60_000, maxPendingBytes: 2_048 });
    const slow = new Sink(true);
    const fine = new Sink();
    (await hub.open({ tenant: 't', owner: 'a', filter: {}, sink: slow })).start();
    (await hub.open({ tenant: 't', owner: 'b', filter: {}, sink: fine })).start();
    for (let i = 0; i < 50; i++) feed.append('t', 'vehicles', vehicleKey(i), { id: vehicleKey(i), name: 'x'.repeat(100) });
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline && fine.events().length < 50) await sleep(5);
    expect(fine.events()).toHaveLength(50);
    expect(slow.destroyed).toBe(true);
    expect(slow.writableLength).toBeLessThan(2_048 + 400);
    expect(hub.size).toBe(1);
    hub.close();
  });

  it('answers 429 beyond the streams of a token, until one closes; 400 and 410 for bad cursors, before anything is written', async () => {
    const feed = new MemoryFeed();
    const hub = hubOf(sourceOf(feed), { perToken: 2, pollMs: 1, heartbeatMs: 60_000, retryAfterSeconds: 7 });
    const open = (owner: string, from?: string) =>
      hub.open({ tenant: 't', owner, filter: {}, sink: new Sink(), ...(from === undefined ? {} : { from }) });
    const a = await open('token-1');
    await open('token-1');
    const refused = await open('token-1').catch((e: unknown) => e as OtmServiceError);
    expect(refused).toMatchObject({ status: 429, code: ErrorCode.tooManyStreams, headers: { 'retry-after': '7' } });
    await open('token-2');
    a.close();
    await open('token-1');
    for (let i = 0; i < 5; i++) feed.append('t', 'vehicles', vehicleKey(i));
    feed.floor = 3;
    const sink = new Sink();
    const expired = await hub.open({ tenant: 't', owner: 'x', filter: {}, from: '2', sink }).catch((e: unknown) => e as OtmServiceError);
    expect(expired).toMatchObject({ status: 410, code: ErrorCode.cursorExpired });
    const bad = await hub.open({ tenant: 't', owner: 'x', filter: {}, from: 'abc', sink }).catch((e: unknown) => e as OtmServiceError);
    expect(bad).toMatchObject({ status: 400 });
    expect(sink.text).toBe('');
    // Neither counts.
    await open('x');
    await open('x');
    hub.close();
  });

  it('a snapshot of positions first; changes made meanwhile follow it, none lost', async () => {
    const feed = new MemoryFeed();
    feed.append('t', 'vehicles', vehicleKey(1));
    const position = (v: number): LatestPosition => ({
      vehicle: vehicleKey(v),
      time: 1_700_000_000_000,
      lat: 52,
      lon: 5,
      speedKmh: null,
      heading: null,
      eventKey: eventKey(v),
    });
    let during: FeedEntry | undefined;
    const hub = hubOf(
      sourceOf(feed, async () => {
        during ??= feed.append('t', 'vehicles', vehicleKey(2)); // while the (first) snapshot is read
        await sleep(30);
        return [position(1), position(2)];
      }),
      { perToken: 10, pollMs: 1, heartbeatMs: 60_000 },
    );
    const sink = new Sink();
    (await hub.open({ tenant: 't', owner: 'a', filter: {}, snapshot: true, sink })).start();
    const one = new Sink();
    (await hub.open({ tenant: 't', owner: 'a', filter: { vehicle: vehicleKey(2) }, snapshot: true, sink: one })).start();
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline && sink.events().length < 3) await sleep(5);
    expect(sink.events().map((e) => [e.event, e.id])).toEqual([
      ['position', undefined],
      ['position', undefined],
      ['put', during!.cursor],
    ]);
    expect(JSON.parse(sink.events()[0]!.data)).toEqual({
      vehicle: vehicleKey(1),
      time: '2023-11-14T22:13:20.000Z',
      lat: 52,
      lon: 5,
      eventId: eventKey(1),
    });
    while (Date.now() < deadline && one.events().length < 2) await sleep(5);
    expect(one.events().map((e) => e.event)).toEqual(['position', 'put']);
    expect(JSON.parse(one.events()[0]!.data)).toMatchObject({ vehicle: vehicleKey(2) });
    hub.close();
  });

  it('sends heartbeats; close() ends every stream, stops the readings and refuses new streams', async () => {
    const feed = new MemoryFeed();
    const hub = hubOf(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 20 });
    const sinks = [new Sink(), new Sink(), new Sink()];
    feed.append('t', 'vehicles', vehicleKey(1));
    (await hub.open({ tenant: 't', owner: 'a', filter: {}, sink: sinks[0]! })).start();
    (await hub.open({ tenant: 'u', owner: 'a', filter: {}, sink: sinks[1]! })).start();
    (await hub.open({ tenant: 't', owner: 'a', filter: {}, from: '0', sink: sinks[2]! })).start();
    await sleep(100);
    for (const s of sinks) expect(s.text).toMatch(/^retry: \d+\n\n/);
    expect(sinks[0]!.text).toContain(': keep-alive\n\n');
    hub.close();
    for (const s of sinks) expect(s.ended).toBe(true);
    expect(hub.size).toBe(0);
    const reads = feed.reads;
    await sleep(50);
    expect(feed.reads).toBe(reads);
    await expect(hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() })).rejects.toMatchObject({ status: 503 });
  });
});

describe('otm_streams_open', () => {
  /** The gauge's value as /metrics answers it. */
  const open = async () => (await registry.getSingleMetric('otm_streams_open')!.get()).values[0]?.value ?? 0;

  it('counts the streams open in the process, over tenants: up as each opens, down as each closes, a refused one never counted', async () => {
    const feed = new MemoryFeed();
    const hub = hubOf(sourceOf(feed), { perToken: 2, pollMs: 1, heartbeatMs: 60_000 });
    const other = hubOf(sourceOf(feed), { perToken: 2, pollMs: 1, heartbeatMs: 60_000 });
    const before = await open();
    const a = await hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() });
    a.start();
    const b = await hub.open({ tenant: 'u', owner: 'a', filter: {}, sink: new Sink() });
    b.start();
    const c = await other.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() });
    c.start();
    expect(await open()).toBe(before + 3);
    // Beyond the token's limit (429), and a bad cursor (400): not counted.
    await expect(hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() })).rejects.toMatchObject({ status: 429 });
    await expect(other.open({ tenant: 't', owner: 'b', filter: {}, from: 'x', sink: new Sink() })).rejects.toBeInstanceOf(OtmServiceError);
    expect(await open()).toBe(before + 3);
    a.close();
    a.close();
    expect(await open()).toBe(before + 2);
    // The hub closes: its streams are no longer open.
    hub.close();
    expect(await open()).toBe(before + 1);
    other.close();
    expect(await open()).toBe(before);
  });
});

describe('stream hubs sharing their slots', () => {
  it('count the streams of a token together, as query processes on one Redis do: one more on either is a 429, a close frees one for both', async () => {
    const feed = new MemoryFeed();
    const slots = new MemoryStreamSlots();
    const hubs = [0, 1].map(() => hubOf(sourceOf(feed), { perToken: 3, slots, pollMs: 1, heartbeatMs: 60_000 }));
    const open = (i: number, owner = 'token-1') => hubs[i]!.open({ tenant: 't', owner, filter: {}, sink: new Sink() });
    const a = await open(0);
    await open(1);
    await open(0);
    for (const i of [0, 1]) await expect(open(i)).rejects.toMatchObject({ status: 429, code: ErrorCode.tooManyStreams });
    await open(1, 'token-2');
    a.close();
    await open(1);
    await expect(open(0)).rejects.toMatchObject({ status: 429 });
    expect(slots.size).toBe(4);
    // A hub that closes (its process stops) frees its slots.
    hubs[1]!.close();
    expect(slots.size).toBe(1);
    await open(0);
    await open(0);
    hubs[0]!.close();
    expect(slots.size).toBe(0);
  });

  it('renews the slots of its open streams on the heartbeat, so that they outlive their expiry', async () => {
    const feed = new MemoryFeed();
    const slots = new MemoryStreamSlots();
    const hub = hubOf(sourceOf(feed), { perToken: 2, slots, pollMs: 1, heartbeatMs: 10, slotTtlMs: 40 });
    (await hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() })).start();
    (await hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() })).start();
    await sleep(200);
    // Another process asks: both are still held.
    expect(await slots.acquire({ owner: 'a', id: 'elsewhere' }, 2, 40)).toBe(false);
    hub.close();
    expect(await slots.acquire({ owner: 'a', id: 'elsewhere' }, 2, 40)).toBe(true);
  });

  it('opens the stream when the slots fail (fail open), and counts it from the first renewal that gets through', async () => {
    const feed = new MemoryFeed();
    const memory = new MemoryStreamSlots();
    let failing = true;
    const calls: string[] = [];
    const flaky: StreamSlots = {
      acquire: (s, limit, ttl) => {
        calls.push('acquire');
        return failing ? Promise.reject(new Error('Redis is away')) : memory.acquire(s, limit, ttl);
      },
      renew: (s, ttl) => {
        calls.push('renew');
        return failing ? Promise.reject(new Error('Redis is away')) : memory.renew(s, ttl);
      },
      release: (s) => {
        calls.push('release');
        return failing ? Promise.reject(new Error('Redis is away')) : memory.release(s);
      },
    };
    const warnings: string[] = [];
    const logger = { warn: (_o: unknown, m: string) => warnings.push(m) } as unknown as NonNullable<StreamOptions['logger']>;
    const hub = hubOf(sourceOf(feed), { perToken: 1, slots: flaky, pollMs: 1, heartbeatMs: 10, logger });
    const first = await hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() });
    first.start();
    (await hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() })).start();
    expect(hub.size).toBe(2);
    await sleep(50);
    // Logged once, however many calls failed.
    expect(warnings).toHaveLength(1);
    failing = false;
    await sleep(50);
    // Both are counted now (more than the limit, until they close): a third is refused.
    expect(memory.size).toBe(2);
    await expect(hub.open({ tenant: 't', owner: 'a', filter: {}, sink: new Sink() })).rejects.toMatchObject({ status: 429 });
    first.close();
    expect(memory.size).toBe(1);
    hub.close();
    expect(memory.size).toBe(0);
    expect(calls).toContain('renew');
  });
});
