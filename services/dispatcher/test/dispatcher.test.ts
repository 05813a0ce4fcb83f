/**
 * The dispatcher against a feed in memory (memory-source.ts), the embedded subscription store and
 * receivers on 127.0.0.1: many subscriptions of one tenant share the reading of the feed; the body
 * is byte for byte what docs/webhooks.md says; the next page is read while a POST is on its way,
 * the cursor moving only after the 2xx; a failing receiver holds up its own subscription only;
 * `otm_webhook_subscriptions` counts them by state. services/otm/test/webhooks.test.ts covers the
 * rest through the HTTP API.
 */
import { createHmac } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { changeItem, createLogger, registry, type SubscriptionStore } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { MemorySource, eventKey, locationOf, tripKey, vehicleKey } from '../../../test/fixtures/memory-feed.js';
import { Dispatcher, type DispatcherOptions } from '../src/index.js';
import { FAST, sleep, subscription, tempSubscriptionStore, until } from './helpers.js';

interface Received {
  readonly path: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

/** A receiver: every request kept; `answer` decides each one's status (after `hold`, if any). */
async function receiver() {
  const got: Received[] = [];
  const state = {
    answer: (_r: Received): number => 204,
    hold: undefined as undefined | ((r: Received) => Promise<void>),
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r = { path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) };
      got.push(r);
      void (state.hold?.(r) ?? Promise.resolve()).then(() => res.writeHead(state.answer(r)).end());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    got,
    state,
    /** The changes' cursors delivered in 2xx-answered requests to `path` are not known here: all requests' changes. */
    changes: (p: string) =>
      got
        .filter((r) => r.path === p)
        .flatMap((r) => (JSON.parse(r.body.toString('utf8')) as { changes: Array<{ cursor: string }> }).changes.map((c) => c.cursor)),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A tenant's feed of `count` changes: vehicles, trips (some deleted), location events of 7 vehicles. */
function fill(source: MemorySource, tenant: string, count: number): void {
  for (let i = 0; i < count; i++) {
    if (i % 10 === 0) source.append(tenant, 'vehicles', vehicleKey(i % 7), { id: vehicleKey(i % 7), name: `v${i}` });
    else if (i % 10 === 1) source.append(tenant, 'trips', tripKey(i), undefined, i % 20 === 1 ? 'delete' : 'put');
    else source.append(tenant, 'events', eventKey(i), locationOf(i, i % 7));
  }
}

describe('Dispatcher', () => {
  let subs: ReturnType<typeof tempSubscriptionStore>;
  let store: SubscriptionStore;
  let rx: Awaited<ReturnType<typeof receiver>>;
  let dispatcher: Dispatcher | undefined;
  beforeAll(async () => {
    subs = tempSubscriptionStore();
    store = subs.store;
    rx = await receiver();
  });
  afterAll(async () => {
    await rx.close();
    await subs.close();
  });
  afterEach(async () => {
    await dispatcher?.close();
    dispatcher = undefined;
    await subs.clear();
    rx.got.length = 0;
    rx.state.answer = () => 204;
    rx.state.hold = undefined;
  });

  const start = (source: MemorySource, options: Partial<DispatcherOptions> = {}) => {
    dispatcher = new Dispatcher({ store, source, logger: createLogger('silent') }, { ...FAST, ...options });
    dispatcher.start();
    return dispatcher;
  };

  it('20 subscriptions of one tenant read the feed and its documents once, each getting every change of its own in order', async () => {
    const source = new MemorySource();
    fill(source, 't', 600);
    const kindsOf = (i: number): KindSegment[] | undefined => (i % 4 === 1 ? ['events'] : i % 4 === 2 ? ['trips', 'vehicles'] : undefined);
    const subs = Array.from({ length: 20 }, (_, i) => {
      const kinds = kindsOf(i);
      return subscription('t', `${rx.url}/s${i}`, {
        ...(kinds === undefined ? {} : { kinds }),
        ...(i % 4 === 3 ? { filter: { vehicle: vehicleKey(3) } } : {}),
      });
    });
    for (const s of subs) expect(await store.create(s, 100)).toBe(true);
    const expected = (i: number) =>
      source
        .of('t')
        .filter((e) => {
          const kinds = kindsOf(i);
          if (kinds !== undefined && !kinds.includes(e.kind)) return false;
          if (i % 4 !== 3) return true;
          // The vehicle itself, and the events of vehicle 3 (deleted trips name no vehicle).
          return e.kind === 'vehicles' ? e.key === vehicleKey(3) : e.kind === 'events' && Number(e.key.slice(-12)) % 7 === 3;
        })
        .map((e) => e.cursor);
    // The feed is read once all 20 read it (else the first ones read pages the others come to later, alone).
    source.onRead = () => until('all reading', () => dispatcher!.feed.readers('t') === 20);
    start(source, { batch: 25 });
    await until('every subscription has its changes', () => subs.every((_, i) => rx.changes(`/s${i}`).length >= expected(i).length));
    for (let i = 0; i < subs.length; i++) expect(rx.changes(`/s${i}`), `subscription ${i}`).toEqual(expected(i));
    // Alone, each would have read the 600 documents: 12,000. Together, once.
    expect(source.documentEntries).toBeLessThanOrEqual(700);
    const last = source.of('t').at(-1)!.cursor;
    await until('every cursor moved to the end', async () =>
      (await Promise.all(subs.map((s) => store.get('t', s.id)))).every((s) => s?.cursor === last),
    );
    await dispatcher!.close();
    expect(dispatcher!.feed.size).toBe(0);
    expect(dispatcher!.feed.keptBytes).toBe(0);
  });

  it('subscriptions at different cursors read what those ahead read from memory: the backlog read about once', async () => {
    const source = new MemorySource();
    fill(source, 't', 600);
    const subs = Array.from({ length: 10 }, (_, i) => subscription('t', `${rx.url}/c${i}`, { cursor: String(i * 37) }));
    for (const s of subs) await store.create(s, 100);
    start(source, { batch: 20 });
    const expected = (i: number) =>
      source
        .of('t')
        .map((e) => e.cursor)
        .filter((c) => Number(c) > i * 37);
    await until('every subscription has its changes', () => subs.every((_, i) => rx.changes(`/c${i}`).length >= expected(i).length));
    for (let i = 0; i < subs.length; i++) expect(rx.changes(`/c${i}`), `subscription ${i}`).toEqual(expected(i));
    // Alone: 5,100 documents (600 - 37 i each).
    expect(source.documentEntries).toBeLessThanOrEqual(800);
  });

  it('POSTs the body docs/webhooks.md describes, byte for byte: the items of GET /api/v5/changes, signed', async () => {
    const source = new MemorySource();
    fill(source, 't', 12);
    const sub = subscription('t', `${rx.url}/body`);
    await store.create(sub, 100);
    start(source, { batch: 5 });
    await until('three batches', () => rx.got.length >= 3);
    const entries = source.of('t');
    const docs = await source.documents('t', entries);
    rx.got.slice(0, 3).forEach((r, b) => {
      const id = String(r.headers['otm-delivery']);
      const items = entries.slice(b * 5, b * 5 + 5).map((e, i) => changeItem(e, docs[b * 5 + i]));
      const expected = Buffer.concat([
        Buffer.from(`{"deliveryId":"${id}","subscription":"${sub.id}","changes":[`),
        ...items.flatMap((item, i) => (i === 0 ? [item] : [Buffer.from(','), item])),
        Buffer.from(']}'),
      ]);
      expect(r.body.toString('utf8')).toBe(expected.toString('utf8'));
      expect(r.headers['content-type']).toBe('application/json');
      const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(r.headers['otm-signature']))!;
      expect(createHmac('sha256', sub.secret).update(`${m[1]}.`).update(r.body).digest('hex')).toBe(m[2]);
    });
    // A put's document as it is kept, a delete without one.
    const first = JSON.parse(rx.got[0]!.body.toString('utf8')) as { changes: Array<Record<string, unknown>> };
    expect(first.changes[0]).toEqual({
      cursor: '1',
      op: 'put',
      kind: 'vehicles',
      id: vehicleKey(0),
      document: { id: vehicleKey(0), name: 'v0' },
    });
    expect(first.changes[1]).toEqual({ cursor: '2', op: 'delete', kind: 'trips', id: tripKey(1) });
    expect(first.changes[2]).toMatchObject({ cursor: '3', op: 'put', kind: 'events', lifecycle: 'actual', document: locationOf(2, 2) });
  });

  it('reads the next page while a POST is on its way; the cursor moves only once the 2xx came', async () => {
    const source = new MemorySource();
    fill(source, 't', 40);
    const sub = subscription('t', `${rx.url}/ahead`);
    await store.create(sub, 100);
    const seen: Array<{ reads: number; cursor: string | undefined }> = [];
    rx.state.hold = async () => {
      // While the receiver has the batch: what was read, and where the stored cursor is.
      await sleep(50);
      seen.push({ reads: source.reads, cursor: (await store.get('t', sub.id))?.cursor });
    };
    start(source, { batch: 10 });
    await until('four batches', () => rx.got.length >= 4);
    // The first POST: its page (1..10) read, and the next one (11..20) read meanwhile; the cursor still at 0.
    expect(seen[0]).toEqual({ reads: 2, cursor: '0' });
    // The second: the cursor past the first batch only.
    expect(seen[1]!.cursor).toBe('10');
    expect(seen[1]!.reads).toBe(3);
    expect(rx.changes('/ahead')).toEqual(source.of('t').map((e) => e.cursor));
  });

  it('makes and signs the next batch while a POST is on its way; a batch that fails goes again before it, and the one made ahead after', async () => {
    const source = new MemorySource();
    fill(source, 't', 40);
    const sub = subscription('t', `${rx.url}/next`);
    await store.create(sub, 100);
    const ahead: Array<string | undefined> = [];
    let answers = 0;
    rx.state.hold = async () => {
      await sleep(50);
      // What the subscription's loop holds while the receiver has the batch: the next one, made.
      const loops = (dispatcher as unknown as { loops: Map<string, { next?: { firstCursor: string; signed?: unknown } }> }).loops;
      const next = [...loops.values()][0]?.next;
      ahead.push(next === undefined ? undefined : `${next.firstCursor}${next.signed === undefined ? '' : ' signed'}`);
    };
    // The first attempt of the first batch fails.
    rx.state.answer = (r) => (r.path === '/next' && answers++ === 0 ? 503 : 204);
    start(source, { batch: 10 });
    await until('every change', async () => (await store.get('t', sub.id))?.cursor === '40');
    const bodies = rx.got.filter((r) => r.path === '/next');
    const firsts = bodies.map((r) => (JSON.parse(r.body.toString('utf8')) as { changes: Array<{ cursor: string }> }).changes[0]!.cursor);
    // 1..10 twice (failed, then delivered), then 11.., 21.., 31..: in order.
    expect(firsts).toEqual(['1', '1', '11', '21', '31']);
    expect(rx.changes('/next').slice(10)).toEqual(source.of('t').map((e) => e.cursor));
    // The same bytes for both attempts of the first batch; every signature right for its body.
    expect(bodies[1]!.body.equals(bodies[0]!.body)).toBe(true);
    for (const r of bodies) {
      const [t, v1] = String(r.headers['otm-signature'])
        .split(',')
        .map((p) => p.slice(p.indexOf('=') + 1));
      expect(v1).toBe(createHmac('sha256', sub.secret).update(`${t}.`).update(r.body).digest('hex'));
    }
    // While the first POST was out, 11.. was made and signed; while the batch that holds the last
    // changes was out, nothing was left to make.
    expect(ahead[0]).toBe('11 signed');
    expect(ahead.at(-1)).toBeUndefined();
  });

  it('a failing receiver holds up its own subscription only, which then delivers every change in order, at least once', async () => {
    const source = new MemorySource();
    fill(source, 't', 200);
    const good = subscription('t', `${rx.url}/good`);
    const bad = subscription('t', `${rx.url}/bad`);
    await store.create(good, 100);
    await store.create(bad, 100);
    let failing = true;
    rx.state.answer = (r) => (r.path === '/bad' && failing && Math.random() < 0.7 ? 500 : 204);
    start(source, { batch: 10 });
    await until('the good one has everything', () => rx.changes('/good').length >= 200);
    expect(rx.changes('/good')).toEqual(source.of('t').map((e) => e.cursor));
    failing = false;
    // What the bad one got in 2xx answers, or again: every change, in order, each batch maybe twice.
    await until('the bad one has everything', async () => (await store.get('t', bad.id))?.cursor === '200');
    const delivered = [...new Set(rx.changes('/bad'))];
    expect(delivered).toEqual(source.of('t').map((e) => e.cursor));
    const attempts = await store.deliveries('t', bad.id, 100);
    expect(attempts.some((a) => a.outcome === 'failed')).toBe(true);
  });

  it('counts the subscriptions by state in otm_webhook_subscriptions', async () => {
    const source = new MemorySource();
    fill(source, 't', 3);
    const value = async (state: string) =>
      (await registry.getSingleMetric('otm_webhook_subscriptions')!.get()).values.find((v) => v.labels.state === state)?.value;
    const a = subscription('t', `${rx.url}/a`);
    const b = subscription('u', `${rx.url}/b`);
    const c = subscription('u', `${rx.url}/c`);
    for (const s of [a, b, c]) await store.create(s, 100);
    start(source);
    await until('three active', async () => (await value('active')) === 3 && (await value('paused')) === 0);
    expect(await store.pause('u', b.id, 0, 'for the test')).toBe(true);
    await until('two active, one paused', async () => (await value('active')) === 2 && (await value('paused')) === 1);
    await store.delete('t', a.id);
    await until('one active, one paused', async () => (await value('active')) === 1 && (await value('paused')) === 1);
  });
});
