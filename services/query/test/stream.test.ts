/**
 * The stream's hub (stream.ts) without I/O: an in-memory feed whose reads take their snapshot and
 * answer after random delays, stand-ins for sockets. Streams that resume while changes keep coming
 * get every change after their cursor exactly once, in order, however their catching up and the
 * shared reading interleave; a stream following one vehicle costs the changes of that vehicle only;
 * slow clients are cut off; the per-token limit, counted by the stream slots (in the process, or
 * shared by several hubs as Redis shares them between processes); closing; tickets.
 */
import { describe, expect, it } from 'vitest';
import {
  ErrorCode,
  Health,
  OtmServiceError,
  cursorExpired,
  invalidDocument,
  parseTokens,
  registry,
  type ChangeFeed,
  type FeedEntry,
  type FeedRead,
  type LatestPosition,
  type StreamSlot,
  type StreamSlots,
} from '@otm/core';
import type { KindSegment } from '@otm/model';
import {
  MemoryStreamSlots,
  StreamHub,
  StreamTickets,
  streamTicketKey,
  type StreamFilter,
  type StreamOptions,
  type StreamSink,
  type StreamSource,
} from '../src/stream.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const jitter = () => sleep(Math.random() < 0.5 ? 0 : Math.random() * 3);

/** A feed in memory: numbered changes of every tenant, a floor below which reads are expired. */
class MemoryFeed implements ChangeFeed {
  readonly all: Array<FeedEntry & { tenant: string }> = [];
  floor = 0;
  reads = 0;
  /** While set, every read fails with it (the store unavailable); `failed` counts those reads. */
  failure: Error | undefined;
  failed = 0;

  append(tenant: string, kind: KindSegment, key: string, doc?: Record<string, unknown>, op: 'put' | 'delete' = 'put'): FeedEntry {
    const e = {
      tenant,
      cursor: String(this.all.length + 1),
      at: Date.now(),
      op,
      kind,
      key,
      ...(op === 'put' ? { lifecycleRank: 0, doc: JSON.stringify(doc ?? { id: key }) } : {}),
    };
    this.all.push(e);
    return e;
  }

  of(tenant: string): FeedEntry[] {
    return this.all.filter((e) => e.tenant === tenant);
  }

  async head(tenant: string): Promise<string> {
    await jitter();
    const mine = this.of(tenant);
    return mine.length === 0 ? String(this.floor) : mine[mine.length - 1]!.cursor;
  }

  async read(q: FeedRead): Promise<{ entries: FeedEntry[]; next?: string }> {
    this.reads++;
    if (this.failure !== undefined) {
      this.failed++;
      throw this.failure;
    }
    if (q.after !== undefined && !/^\d{1,16}$/.test(q.after)) {
      throw invalidDocument([{ type: 'invalidField', field: 'cursor', message: 'not a cursor' }]);
    }
    const after = Number(q.after ?? 0);
    if (after < this.floor) throw cursorExpired('expired');
    await jitter();
    // The snapshot, somewhere in the middle of the read.
    const entries = this.all
      .filter((e) => e.tenant === q.tenant && Number(e.cursor) > after && (q.kinds === undefined || q.kinds.has(e.kind)))
      .slice(0, q.limit)
      .map(({ tenant: _t, ...e }) => e);
    await jitter();
    const last = entries[entries.length - 1];
    return last === undefined ? { entries } : { entries, next: last.cursor };
  }
}

function sourceOf(feed: MemoryFeed, positions: () => Promise<LatestPosition[]> = async () => []): StreamSource {
  return {
    feed,
    documents: async (_t, entries) => {
      await jitter();
      return entries.map((e) => e.doc);
    },
    version: async () => undefined,
    positions: async () => positions(),
  };
}

/** A socket stand-in: keeps what is written; `stuck` ones never take their bytes. */
class Sink implements StreamSink {
  text = '';
  writes = 0;
  writableLength = 0;
  ended = false;
  destroyed = false;
  constructor(private readonly stuck = false) {}
  write(chunk: Buffer): boolean {
    if (this.ended || this.destroyed) return false;
    this.writes++;
    this.text += chunk.toString('utf8');
    if (this.stuck) this.writableLength += chunk.length;
    return !this.stuck;
  }
  end(): void {
    this.ended = true;
  }
  destroy(): void {
    this.destroyed = true;
  }
  once(): this {
    return this;
  }
  /** The events written: [id, event, data]. */
  events(): Array<{ id?: string; event: string; data: string }> {
    return this.text
      .split('\n\n')
      .filter((block) => block.includes('data: '))
      .map((block) => {
        const lines = block.split('\n');
        const field = (name: string) => lines.find((l) => l.startsWith(`${name}: `))?.slice(name.length + 2);
        const id = field('id');
        return { ...(id === undefined ? {} : { id }), event: field('event') ?? 'message', data: field('data') ?? '' };
      });
  }
  ids(): string[] {
    return this.events().flatMap((e) => (e.id === undefined ? [] : [e.id]));
  }
}

const vehicleKey = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const eventKey = (i: number) => `e0000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const locationOf = (i: number, v: number) => ({
  id: eventKey(i),
  eventType: 'locationUpdateEvent',
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicleKey(v) },
});

const matches = (f: StreamFilter, e: FeedEntry): boolean => {
  if (f.kinds !== undefined && !f.kinds.has(e.kind)) return false;
  if (f.vehicle !== undefined) {
    if (e.kind === 'vehicles') return e.key === f.vehicle;
    if (e.kind !== 'events' || e.doc === undefined) return false;
    return (JSON.parse(String(e.doc)) as { vehicle?: { uuid: string } }).vehicle?.uuid === f.vehicle;
  }
  return true;
};

describe('stream hub', () => {
  it('resuming streams meet the shared reading without a gap or a change twice, while changes keep coming', async () => {
    const feed = new MemoryFeed();
    const hub = new StreamHub(sourceOf(feed), { perToken: 1_000, pollMs: 1, pageSize: 7, remembered: 40, heartbeatMs: 60_000 });
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
    const deadline = Date.now() + 10_000;
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
  }, 30_000);

  it('hands a change of one vehicle to the streams of that vehicle only (indexed, not a scan of all streams)', async () => {
    const feed = new MemoryFeed();
    const hub = new StreamHub(sourceOf(feed), { perToken: 10_000, pollMs: 1, heartbeatMs: 60_000 });
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
    const hub = new StreamHub(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 60_000, maxPendingBytes: 2_048 });
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
    const hub = new StreamHub(sourceOf(feed), { perToken: 2, pollMs: 1, heartbeatMs: 60_000, retryAfterSeconds: 7 });
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
    const hub = new StreamHub(
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
    const hub = new StreamHub(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 20 });
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

describe("a tenant's reading recovers", () => {
  const metric = async (name: string) =>
    (await registry.getSingleMetric(name)!.get()).values.find((v) => v.labels.loop === 'stream-reader')?.value ?? 0;
  const until = async (what: string, check: () => boolean) => {
    const deadline = Date.now() + 15_000;
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
      await sleep(5);
    }
  };

  it('reads that fail: the reading is down, named, its streams stay open; then they get every change, once, in order', async () => {
    const feed = new MemoryFeed();
    for (let i = 0; i < 5; i++) feed.append('t', 'vehicles', vehicleKey(i));
    const hub = new StreamHub(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 60_000 });
    const health = new Health();
    health.watch(() => hub.parts());
    const sinks = [new Sink(), new Sink()];
    for (const [i, sink] of sinks.entries()) (await hub.open({ tenant: 't', owner: `o${i}`, filter: {}, sink })).start();
    const restarts = await metric('otm_loop_restarts_total');
    feed.failure = new Error('redis unavailable');
    // Changes written once the reading failed (a read under way when the store went still reads).
    await until('a read failed', () => feed.failed > 0);
    const during = Array.from({ length: 20 }, (_, i) => feed.append('t', 'events', eventKey(i), locationOf(i, i % 3)).cursor);
    await until('the reading is down', () => health.down().length > 0);
    expect(health.down()).toMatchObject([{ name: 'stream reader t', kind: 'loop', reason: 'redis unavailable' }]);
    expect(await metric('otm_loop_up')).toBe(0);
    await until('tried again', () => feed.failed >= 3);
    expect(sinks.map((s) => s.ids())).toEqual([[], []]);
    expect(sinks.every((s) => !s.ended && !s.destroyed)).toBe(true);
    feed.failure = undefined;
    const after = feed.append('t', 'vehicles', vehicleKey(9)).cursor;
    await until('every change', () => sinks.every((s) => s.ids().includes(after)));
    for (const s of sinks) expect(s.ids()).toEqual([...during, after]);
    expect(health.down()).toEqual([]);
    expect(await metric('otm_loop_up')).toBe(1);
    expect((await metric('otm_loop_restarts_total')) - restarts).toBe(feed.failed);
    hub.close();
  });

  it('a document read that fails is the same: nothing is handed out until the whole round works', async () => {
    const feed = new MemoryFeed();
    let failing = true;
    const source: StreamSource = {
      ...sourceOf(feed),
      documents: async (_t, entries) => {
        if (failing) throw new Error('clickhouse unavailable');
        return entries.map((e) => e.doc);
      },
    };
    const hub = new StreamHub(source, { perToken: 10, pollMs: 1, heartbeatMs: 60_000 });
    const sink = new Sink();
    (await hub.open({ tenant: 't', owner: 'o', filter: {}, sink })).start();
    const cursors = Array.from({ length: 5 }, (_, i) => feed.append('t', 'vehicles', vehicleKey(i)).cursor);
    await until('the reading is down', () => hub.parts().length === 1);
    expect(hub.parts()[0]!.status()).toMatchObject({ up: false, reason: 'clickhouse unavailable' });
    expect(sink.ids()).toEqual([]);
    failing = false;
    await until('every change', () => sink.ids().length === 5);
    expect(sink.ids()).toEqual(cursors);
    expect(hub.parts()).toEqual([]);
    hub.close();
  });

  it('a socket that fails ends its own stream; the reading and the other streams go on', async () => {
    const feed = new MemoryFeed();
    const hub = new StreamHub(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 60_000 });
    const good = new Sink();
    const broken = new Sink();
    // Its first write (the stream's `retry:`) goes; the next ones fail, as on a socket gone.
    broken.write = (chunk) => {
      if (broken.writes > 0) throw new Error('write EPIPE');
      return Sink.prototype.write.call(broken, chunk);
    };
    for (const [i, sink] of [good, broken].entries()) (await hub.open({ tenant: 't', owner: `o${i}`, filter: {}, sink })).start();
    expect(broken.writes).toBe(1);
    const cursors = Array.from({ length: 3 }, (_, i) => feed.append('t', 'vehicles', vehicleKey(i)).cursor);
    await until('the good one has them', () => good.ids().length === 3);
    expect(good.ids()).toEqual(cursors);
    expect(broken.destroyed).toBe(true);
    expect(hub.size).toBe(1);
    expect(hub.parts()).toEqual([]);
    hub.close();
  });
});

describe('otm_streams_open', () => {
  /** The gauge's value as /metrics answers it. */
  const open = async () => (await registry.getSingleMetric('otm_streams_open')!.get()).values[0]?.value ?? 0;

  it('counts the streams open in the process, over tenants: up as each opens, down as each closes, a refused one never counted', async () => {
    const feed = new MemoryFeed();
    const hub = new StreamHub(sourceOf(feed), { perToken: 2, pollMs: 1, heartbeatMs: 60_000 });
    const other = new StreamHub(sourceOf(feed), { perToken: 2, pollMs: 1, heartbeatMs: 60_000 });
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

describe('stream slots in the process (MemoryStreamSlots)', () => {
  const slot = (owner: string, id: string): StreamSlot => ({ owner, id });

  it("holds at most the limit of a token's slots; other tokens are not affected; a release frees one at once", async () => {
    const slots = new MemoryStreamSlots(() => 1_000);
    expect(await slots.acquire(slot('a', '1'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '2'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '3'), 2, 100)).toBe(false);
    // A slot already held is taken again (renewed), not counted twice.
    expect(await slots.acquire(slot('a', '2'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('b', '1'), 2, 100)).toBe(true);
    await slots.release(slot('a', '1'));
    await slots.release(slot('a', '1'));
    await slots.release(slot('c', 'never held'));
    expect(await slots.acquire(slot('a', '3'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '4'), 2, 100)).toBe(false);
    expect(slots.size).toBe(3);
  });

  it('frees a slot once it expires; a renewal holds it longer, and takes back one that expired or went missing', async () => {
    let now = 1_000;
    const slots = new MemoryStreamSlots(() => now);
    expect(await slots.acquire(slot('a', '1'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '2'), 2, 100)).toBe(true);
    now = 1_090;
    await slots.renew([slot('a', '1')], 100);
    now = 1_100; // '2' expires now, '1' at 1_190
    expect(await slots.acquire(slot('a', '3'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '4'), 2, 100)).toBe(false);
    // A stream let through uncounted (the store failed) is counted from its first renewal on.
    await slots.renew([slot('a', '5'), slot('b', '1')], 100);
    expect(slots.size).toBe(4);
    now = 1_200;
    await slots.release(slot('a', '5'));
    expect(await slots.acquire(slot('a', '6'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '7'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '8'), 2, 100)).toBe(false);
  });
});

describe('stream hubs sharing their slots', () => {
  it('count the streams of a token together, as query processes on one Redis do: one more on either is a 429, a close frees one for both', async () => {
    const feed = new MemoryFeed();
    const slots = new MemoryStreamSlots();
    const hubs = [0, 1].map(() => new StreamHub(sourceOf(feed), { perToken: 3, slots, pollMs: 1, heartbeatMs: 60_000 }));
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
    const hub = new StreamHub(sourceOf(feed), { perToken: 2, slots, pollMs: 1, heartbeatMs: 10, slotTtlMs: 40 });
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
    const hub = new StreamHub(sourceOf(feed), { perToken: 1, slots: flaky, pollMs: 1, heartbeatMs: 10, logger });
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

describe('stream tickets', () => {
  const key = streamTicketKey(parseTokens('aaaaaaaaaa:acme:read,bbbbbbbbbb:globex:read+write'));
  const principal = { tenant: 'acme', scopes: new Set(['read'] as const), id: 'digest' };

  it('are taken by any holder of the same key until they expire; carry the tenant, scopes and token reference', () => {
    const tickets = new StreamTickets(key);
    const ref = tickets.ref(principal, 'fallback');
    const { ticket, expiresAt } = tickets.issue(principal, ref, 1_000_000);
    expect(expiresAt).toBe(new Date(1_060_000).toISOString());
    // Another process: the same tokens, in another order, give the same key.
    const elsewhere = new StreamTickets(streamTicketKey(parseTokens('bbbbbbbbbb:globex:read+write,aaaaaaaaaa:acme:read')));
    const p = elsewhere.verify(ticket, 1_059_999)!;
    expect(p.tenant).toBe('acme');
    expect([...p.scopes]).toEqual(['read']);
    expect(elsewhere.ref(p, 'other')).toBe(ref);
    expect(elsewhere.verify(ticket, 1_060_000)).toBeUndefined();
    expect(ref).not.toContain('digest');
  });

  it('refuse what another key signed, and any change', () => {
    const tickets = new StreamTickets(key);
    const { ticket } = tickets.issue(principal, 'r', Date.now());
    const [payload, sig] = ticket.split('.') as [string, string];
    const other = new StreamTickets(streamTicketKey(parseTokens('cccccccccc:acme:read')));
    expect(other.verify(ticket)).toBeUndefined();
    expect(new StreamTickets(streamTicketKey([], 'a secret of thirty-two characters or more')).verify(ticket)).toBeUndefined();
    const flipped = `${payload.slice(0, 5)}${payload[5] === 'A' ? 'B' : 'A'}${payload.slice(6)}.${sig}`;
    for (const t of [flipped, `${payload}.${sig.slice(1)}`, `${payload}`, '', '.', 'x'.repeat(5_000)])
      expect(tickets.verify(t)).toBeUndefined();
    // With no tokens and no secret, the key is random: nothing derivable.
    expect(streamTicketKey([]).equals(streamTicketKey([]))).toBe(false);
    expect(
      streamTicketKey([], 'a secret of thirty-two characters or more').equals(
        streamTicketKey([], 'a secret of thirty-two characters or more'),
      ),
    ).toBe(true);
  });
});
