/**
 * The dispatcher's loops recover from any failure of the stores and say so meanwhile (issue 36):
 * a subscription's loop whose feed reads fail, a subscription store that fails every call (the
 * scan and the loops), a lease that could not be renewed and is taken again; a receiver that fails
 * is not the dispatcher's failure; failures of many loops are logged a line a while. The feed is
 * in memory (memory-source.ts), the subscriptions in the embedded store, wrapped to fail on demand.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Health, createLogger, registry, type Logger, type SubscriptionStore } from '@otm/core';
import { MemorySource, vehicleKey } from '../../../test/fixtures/memory-feed.js';
import { Dispatcher, type DispatcherOptions } from '../src/index.js';
import { FAST, subscription, tempSubscriptionStore, until } from './helpers.js';

const metric = async (name: string, loop: string) =>
  (await registry.getSingleMetric(name)!.get()).values.find((v) => v.labels.loop === loop)?.value ?? 0;

/** A receiver keeping the cursors of every change POSTed to each path; `status` answers. */
async function receiver() {
  const got = new Map<string, string[]>();
  const state = { status: (_path: string): number => 204, requests: 0 };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      state.requests++;
      const p = req.url ?? '';
      const status = state.status(p);
      if (status < 300) {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { changes: Array<{ cursor: string }> };
        got.set(p, [...(got.get(p) ?? []), ...body.changes.map((c) => c.cursor)]);
      }
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    state,
    /** What was delivered to `p` (2xx), each change once, in the order first delivered. */
    delivered: (p: string) => [...new Set(got.get(p) ?? [])],
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The store, failing every call of a method in `failing` (and counting those calls). */
function flaky(inner: SubscriptionStore): { store: SubscriptionStore; failing: Set<string>; failed: { n: number } } {
  const failing = new Set<string>();
  const failed = { n: 0 };
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (failing.has(String(prop))) {
          failed.n++;
          return Promise.reject(new Error(`the subscription store is unavailable (${String(prop)})`));
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store, failing, failed };
}

const EVERY_CALL = ['get', 'all', 'dispatchers', 'lease', 'release', 'advance', 'recordDelivery', 'pause'];

/** Every read of the feed fails until `heal()`; `failed` counts them. */
function failingReads(source: MemorySource): { failed: number; heal(): void } {
  let failing = true;
  const state = {
    failed: 0,
    heal: () => {
      failing = false;
    },
  };
  source.onRead = () => {
    if (!failing) return;
    state.failed++;
    throw new Error('the change feed is unavailable');
  };
  return state;
}

const changes = (source: MemorySource, tenant: string, count: number) => {
  for (let i = 0; i < count; i++) source.append(tenant, 'vehicles', vehicleKey(i), { id: vehicleKey(i), name: `v${i}` });
};

describe('the dispatcher recovers', () => {
  let subs: ReturnType<typeof tempSubscriptionStore>;
  let rx: Awaited<ReturnType<typeof receiver>>;
  let dispatcher: Dispatcher | undefined;
  beforeAll(async () => {
    subs = tempSubscriptionStore();
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
    rx.state.status = () => 204;
  });

  const start = (store: SubscriptionStore, source: MemorySource, options: Partial<DispatcherOptions> = {}, logger?: Logger) => {
    dispatcher = new Dispatcher({ store, source, logger: logger ?? createLogger('silent') }, { ...FAST, ...options });
    const health = new Health();
    health.watch(() => dispatcher!.parts());
    dispatcher.start();
    return { d: dispatcher, health };
  };

  it('a subscription whose feed reads fail is down, named, meanwhile; then it delivers every change in order', async () => {
    const source = new MemorySource();
    changes(source, 't', 30);
    const sub = subscription('t', `${rx.url}/feed`);
    await subs.store.create(sub, 100);
    const reads = failingReads(source);
    const restarts = await metric('otm_loop_restarts_total', 'dispatcher-subscription');
    const { health } = start(subs.store, source);
    const name = `dispatcher subscription t/${sub.id}`;
    await until('the loop is down', () => health.down().some((p) => p.name === name));
    expect(health.down().find((p) => p.name === name)).toMatchObject({ kind: 'loop', reason: 'the change feed is unavailable' });
    expect(await metric('otm_loop_up', 'dispatcher-subscription')).toBe(0);
    // The scan works: only the subscription's loop is down.
    expect(health.down().map((p) => p.name)).toEqual([name]);
    await until('tried again, and again', () => reads.failed >= 3);
    expect(rx.delivered('/feed')).toEqual([]);
    reads.heal();
    await until('every change delivered', async () => (await subs.store.get('t', sub.id))?.cursor === '30');
    expect(rx.delivered('/feed')).toEqual(source.of('t').map((e) => e.cursor));
    expect(health.down()).toEqual([]);
    expect(await metric('otm_loop_up', 'dispatcher-subscription')).toBe(1);
    // Each failure was followed by one more try.
    expect((await metric('otm_loop_restarts_total', 'dispatcher-subscription')) - restarts).toBe(reads.failed);
  });

  it('a subscription store that fails every call: the scan and the loop are down, then deliver what came meanwhile', async () => {
    const source = new MemorySource();
    changes(source, 't', 20);
    const { store, failing, failed } = flaky(subs.store);
    const sub = subscription('t', `${rx.url}/store`);
    await store.create(sub, 100);
    const scanRestarts = await metric('otm_loop_restarts_total', 'dispatcher-scan');
    const { d, health } = start(store, source, { leaseMs: 60_000 });
    await until('the first changes delivered', async () => (await subs.store.get('t', sub.id))?.cursor === '20');
    expect(health.down()).toEqual([]);
    expect(await metric('otm_loop_up', 'dispatcher-scan')).toBe(1);

    for (const m of EVERY_CALL) failing.add(m);
    changes(source, 't', 20);
    const name = `dispatcher subscription t/${sub.id}`;
    await until('scan and loop down', () => {
      const down = health.down().map((p) => p.name);
      return down.includes('dispatcher scan') && down.includes(name);
    });
    expect(health.down().find((p) => p.name === 'dispatcher scan')!.reason).toMatch(/^the subscription store is unavailable/);
    expect(
      health
        .stalled(0)
        .map((p) => p.name)
        .sort(),
    ).toEqual(['dispatcher scan', name]);
    expect(await metric('otm_loop_up', 'dispatcher-scan')).toBe(0);
    expect(await metric('otm_loop_up', 'dispatcher-subscription')).toBe(0);
    const during = failed.n;
    await until('tried again', () => failed.n >= during + 5);
    expect(d.held).toBe(1);

    failing.clear();
    await until('the rest delivered', async () => (await subs.store.get('t', sub.id))?.cursor === '40');
    expect(rx.delivered('/store')).toEqual(source.of('t').map((e) => e.cursor));
    await until('all up', () => health.down().length === 0);
    expect(await metric('otm_loop_up', 'dispatcher-scan')).toBe(1);
    expect(await metric('otm_loop_up', 'dispatcher-subscription')).toBe(1);
    expect(await metric('otm_loop_restarts_total', 'dispatcher-scan')).toBeGreaterThan(scanRestarts);
  });

  it('a lease that could not be renewed stops the loop; the scan takes it again once the store answers', async () => {
    const source = new MemorySource();
    changes(source, 't', 10);
    const { store, failing } = flaky(subs.store);
    const sub = subscription('t', `${rx.url}/lease`);
    await store.create(sub, 100);
    const { d, health } = start(store, source, { leaseMs: 300 });
    await until('the first changes delivered', async () => (await subs.store.get('t', sub.id))?.cursor === '10');
    failing.add('lease');
    // Not renewed for leaseMs: the loop stops; the scan cannot take the lease, and says so.
    await until('the loop stopped, the scan down', () => d.held === 0 && health.down().some((p) => p.name === 'dispatcher scan'));
    expect(health.down().map((p) => [p.name, p.reason])).toEqual([['dispatcher scan', 'the subscription store is unavailable (lease)']]);
    changes(source, 't', 10);
    failing.clear();
    await until('taken again, the rest delivered', async () => (await subs.store.get('t', sub.id))?.cursor === '20');
    expect(d.held).toBe(1);
    expect(rx.delivered('/lease')).toEqual(source.of('t').map((e) => e.cursor));
    await until('all up', () => health.down().length === 0);
  });

  it('a receiver that fails is not the dispatcher failing: its loop stays up while the attempts fail', async () => {
    const source = new MemorySource();
    changes(source, 't', 10);
    const sub = subscription('t', `${rx.url}/refusing`);
    await subs.store.create(sub, 100);
    rx.state.status = (p) => (p === '/refusing' ? 500 : 204);
    const { health } = start(subs.store, source);
    await until('three failed attempts', async () => (await subs.store.deliveries('t', sub.id, 10)).length >= 3);
    expect((await subs.store.deliveries('t', sub.id, 10)).every((a) => a.outcome === 'failed')).toBe(true);
    expect(health.down()).toEqual([]);
    expect(await metric('otm_loop_up', 'dispatcher-subscription')).toBe(1);
  });

  it('many loops failing for one cause log a line a while with the count held back, not a line each per retry', async () => {
    const source = new MemorySource();
    changes(source, 'm', 5);
    const many = Array.from({ length: 20 }, (_, i) => subscription('m', `${rx.url}/many${i}`));
    for (const s of many) await subs.store.create(s, 100);
    const reads = failingReads(source);
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger('info', { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
    const began = Date.now();
    const { health } = start(subs.store, source, {}, logger);
    await until('every loop down, and each tried again', () => health.down().length === 11 && reads.failed >= 60);
    // Ten named, the others as one part.
    expect(health.down().at(-1)!.name).toBe('dispatcher subscription: 10 more down');
    reads.heal();
    await until('every subscription delivered', () => many.every((_, i) => rx.delivered(`/many${i}`).length === 5));
    const logged = lines.filter((l) => l.err === 'the change feed is unavailable');
    // One line per 10 s at most for the cause, whatever the loops and retries.
    expect(logged.length).toBeGreaterThanOrEqual(1);
    expect(logged.length).toBeLessThanOrEqual(1 + Math.floor((Date.now() - began) / 10_000));
    expect(reads.failed).toBeGreaterThan(logged.length * 10);
  });
});
