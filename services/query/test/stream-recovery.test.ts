/**
 * A tenant's reading of the feed in the stream's hub recovers (core health.ts, loops.ts): reads
 * that fail leave it down and named while its streams stay open, and its streams then get every
 * change once, in order; a socket that fails ends its own stream only.
 */
import { describe, expect, it } from 'vitest';
import { Health, registry } from '@otm/core';
import type { StreamSource } from '../src/stream.js';
import { MemoryFeed, Sink, eventKey, hubOf, locationOf, sleep, sourceOf, vehicleKey } from './stream-fixture.js';

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
    const hub = hubOf(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 60_000 });
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
    const hub = hubOf(source, { perToken: 10, pollMs: 1, heartbeatMs: 60_000 });
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
    const hub = hubOf(sourceOf(feed), { perToken: 10, pollMs: 1, heartbeatMs: 60_000 });
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
