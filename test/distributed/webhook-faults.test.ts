/**
 * Webhook delivery under faults, on the distributed deployment (Kafka, Redis, ClickHouse, `otm
 * dispatcher` processes), counted against the change feed:
 *
 * - 20,000 changes (vehicles updated ten times each, and location events) to a receiver that
 *   fails one request in ten (500) and is slow on another one in ten, with the dispatcher killed
 *   (SIGKILL) in the middle and a new one started: every change arrives at least once, each
 *   entity's changes first arrive in feed order, and the duplicates are counted and reported;
 * - the receiver gone for a minute (its port closed): the changes made meanwhile arrive after it
 *   is back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled } from '../infra/services.js';
import {
  checkArrivals,
  sleep,
  startFlakyReceiver as flakyReceiver,
  until,
  type FeedItem as Item,
} from '../../services/otm/test/receiver.js';
import { startCluster, type Cluster } from './cluster.js';

const uuid = (prefix: string, i: number) => `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
const auth = { authorization: 'Bearer writer-token-acme' };

const suite = 'webhook delivery under faults, distributed';
describe.skipIf(!integrationEnabled(suite))(suite, () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster({ env: { OTM_WEBHOOK_ALLOW: '127.0.0.1', OTM_WEBHOOK_BATCH: '250' } });
  }, 180_000);
  afterAll(async () => {
    await cluster?.close();
  });

  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${cluster.url}${path}`, {
      method,
      headers: { ...auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
    const text = await res.text();
    expect(res.status, `${method} ${path}: ${text.slice(0, 300)}`).toBeLessThan(300);
    return JSON.parse(text || 'null');
  };
  /** Every change of the feed after `cursor` of these kinds, read up to its current end (with a vehicle's name). */
  const feedAfter = async (cursor: string, kinds: string): Promise<Array<Item & { name?: string }>> => {
    const out: Array<Item & { name?: string }> = [];
    let next = `/api/v5/changes?kinds=${kinds}&limit=1000&cursor=${encodeURIComponent(cursor)}`;
    for (;;) {
      const page = await call('GET', next);
      if (page.items.length === 0) return out;
      for (const { cursor: c, op, kind, id, document } of page.items as Array<Item & { document?: { name?: string } }>) {
        out.push({ cursor: c, op, kind, id, ...(kind === 'vehicles' ? { name: document?.name } : {}) });
      }
      next = page.next;
    }
  };

  it('20,000 changes, a receiver failing 1 in 10 and slow 1 in 10, the dispatcher killed: every change arrives, in order per entity', async () => {
    const rx = await flakyReceiver((n) => (n % 10 === 3 ? 'fail' : n % 10 === 7 ? 'slow' : 'ok'));
    try {
      const sub = await call('POST', '/api/v5/subscriptions', { url: `http://127.0.0.1:${rx.port}/hook`, kinds: ['vehicles', 'events'] });
      const VEHICLES = 200;
      const ROUNDS = 10;
      const EVENTS = 18_000;
      // Vehicles updated ten times (one bulk a round, so each vehicle's versions are in order),
      // with bulks of location events in between.
      let e = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const vehicles = Array.from({ length: VEHICLES }, (_, i) => ({ id: uuid('6f000000', i), name: `truck ${i} round ${round}` }));
        await call('POST', '/api/v5/bulk/vehicles', vehicles);
        const events = Array.from({ length: EVENTS / ROUNDS }, () => {
          const n = e++;
          return {
            id: uuid('6f100000', n),
            eventType: 'locationUpdateEvent',
            lifecycle: 'actual',
            creationDate: new Date(Date.UTC(2026, 2, 2) + n * 1000).toISOString(),
            geoReference: { type: 'latLonPointGeoReference', lat: 52 + (n % 100) / 1000, lon: 5 },
            vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: uuid('6f000000', n % VEHICLES) },
          };
        });
        await call('POST', '/api/v5/bulk/events', events);
        if (round === 3) {
          // In the middle of the deliveries: the dispatcher dies; a new one takes over once its leases expire.
          await until(
            () => rx.received.length,
            (n) => n >= 2_000,
            60_000,
            'the first deliveries',
          );
          await cluster.stopRole('dispatcher', 'SIGKILL');
          await cluster.startRole('dispatcher-b', ['dispatcher']);
        }
      }
      // Every event once, and each vehicle's last round: the entity worker applies the puts of one
      // vehicle that arrive in one batch as one unit, which records the version it ends with, so
      // the feed may hold fewer than ten versions of a vehicle (the embedded service's holds all).
      const complete = (items: Array<Item & { name?: string }>) => {
        const last = new Map<string, string | undefined>();
        for (const c of items) if (c.kind === 'vehicles') last.set(c.id, c.name);
        const final = [...last.values()].filter((n) => n?.endsWith(`round ${ROUNDS - 1}`)).length;
        return new Set(items.filter((c) => c.kind === 'events').map((c) => c.id)).size === EVENTS && final === VEHICLES;
      };
      const expected = await until(
        () => feedAfter(sub.cursor, 'vehicles,events'),
        complete,
        120_000,
        'the feed holding every change',
        (items) =>
          `${items.length} changes: ${items.filter((c) => c.kind === 'vehicles').length} of vehicles, ${new Set(items.map((c) => c.id)).size} ids`,
      );
      // The feed may hold a change twice (a telemetry batch stored again after a worker restart);
      // each of its entries arrives. In order per entity: the first arrivals of each entity's changes follow the feed.
      const { duplicates, byEntity, outOfOrder } = await until(
        () => checkArrivals(expected, rx.received),
        (a) => a.missing === 0,
        240_000,
        'every change at the receiver',
        (a) => String(a.missing),
      );
      expect(outOfOrder.slice(0, 5)).toEqual([]);
      expect(byEntity.get(`vehicles/${uuid('6f000000', 0)}`)?.length).toBeGreaterThanOrEqual(1);
      const { requests, failed, slow } = rx.stats();
      console.log(
        `webhook faults: ${expected.length} changes in the feed, ${rx.received.length} received in 2xx answers ` +
          `(${duplicates} twice or more), ${requests} requests (${failed} answered 500, ${slow} slow), dispatcher killed once`,
      );
      expect(failed).toBeGreaterThan(0);
    } finally {
      await rx.close();
    }
  }, 600_000);

  it('a receiver gone for a minute gets the changes made meanwhile once it is back', async () => {
    let rx = await flakyReceiver(() => 'ok');
    const port = rx.port;
    try {
      const sub = await call('POST', '/api/v5/subscriptions', { url: `http://127.0.0.1:${port}/hook`, kinds: ['vehicles'] });
      await call('PUT', '/api/v5/vehicles', { id: uuid('6f200000', 0), name: 'before' });
      await until(
        () => rx.received.length,
        (n) => n >= 1,
        30_000,
        'the first delivery',
      );
      await rx.close(); // the port is closed: connections are refused
      const t0 = Date.now();
      for (let i = 1; i <= 50; i++) await call('PUT', '/api/v5/vehicles', { id: uuid('6f200000', i), name: `while gone ${i}` });
      await sleep(60_000 - (Date.now() - t0));
      const attempts = (await call('GET', `/api/v5/subscriptions/${sub.id}/deliveries`)).items as Array<{ outcome: string }>;
      expect(attempts.some((a) => a.outcome !== 'delivered')).toBe(true);
      rx = await flakyReceiver(() => 'ok', port);
      const back = Date.now();
      await until(
        () => new Set(rx.received.map((c) => c.id)).size,
        (n) => n >= 50,
        180_000,
        'the changes made while it was gone',
      );
      console.log(`receiver gone 60 s: its 50 changes arrived ${((Date.now() - back) / 1000).toFixed(1)} s after it was back`);
      expect((await call('GET', `/api/v5/subscriptions/${sub.id}`)).state).toBe('active');
    } finally {
      await rx.close();
    }
  }, 400_000);
});
