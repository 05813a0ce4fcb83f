/**
 * The telemetry effects, one contract for both ways of recording them: the change-feed entries and
 * the vehicles' latest positions of the telemetry events the worker stores come out the same
 * whether the event store keeps them in its own commit (the embedded event log,
 * packages/embedded/src/event-log/telemetry-effects.ts) or the telemetry worker records them in
 * the entity store after the write (services/worker/src/telemetry-effects.ts: the distributed
 * deployment, here with the same LMDB entity store as the sink), with or without a store that
 * gives the fixes itself.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createLogger,
  TextPut,
  TOPICS,
  positionOfFix,
  trackFix,
  type DocumentWrite,
  type Envelope,
  type EventStore,
  type LatestPosition,
} from '@otm/core';
import { openEmbeddedStores, type EmbeddedStores } from '@otm/embedded';
import { telemetryWorker, type FixingEventStore, type TenantFix } from '@otm/worker';

const V1 = 'b9b7e0f2-8a4c-4a6e-9d35-1f4b1e0c0a01';
const V2 = 'b9b7e0f2-8a4c-4a6e-9d35-1f4b1e0c0a02';
const id = (n: number) => `e0000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

const location = (n: number, vehicle: string, at: string, lat: number, lifecycle = 'actual') => ({
  id: id(n),
  eventType: 'locationUpdateEvent',
  lifecycle,
  creationDate: at,
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicle },
  geoReference: { type: 'latLonPointGeoReference', lat, lon: 4 },
});
const sensor = (n: number) => ({ id: id(n), eventType: 'sensorUpdateEvent', creationDate: '2026-03-01T10:00:00Z' });

const put = (tenant: string, doc: Record<string, unknown>, asText = false): Envelope => {
  const key = doc.id as string;
  const message = asText
    ? new TextPut({ tenant, kind: 'events', key, acceptedAt: 1_000, text: JSON.stringify(doc), lifecycleRank: 4, modified: 0 })
    : ({ v: 1, op: 'put', tenant, kind: 'events', key, doc, acceptedAt: 1_000 } as const);
  return { topic: TOPICS.telemetry, key, message };
};
const del = (tenant: string, n: number): Envelope => ({
  topic: TOPICS.telemetry,
  key: id(n),
  message: { v: 1, op: 'delete', tenant, kind: 'events', key: id(n), acceptedAt: 2_000 },
});

/** Batches as the bus hands them over: two tenants, two vehicles, times out of order, a later version, a delete. */
const BATCHES: Envelope[][] = [
  [
    put('a', location(1, V1, '2026-03-01T10:00:00Z', 52)),
    put('a', location(2, V1, '2026-03-01T09:00:00Z', 51), true),
    put('b', location(3, V1, '2026-03-01T08:00:00Z', 50)),
    put('a', sensor(4)),
    put('a', location(5, V2, '2026-03-01T11:00:00Z', 53), true),
  ],
  [put('a', location(6, V1, '2026-03-01T12:00:00Z', 54)), del('a', 4), put('a', location(2, V1, '2026-03-01T09:30:00Z', 51.5, 'realized'))],
];

/** An event log that answers its write with the fixes of its location events, as the ClickHouse store does. */
function withFixes(store: EventStore): FixingEventStore {
  return {
    write: (writes) => store.write(writes),
    get: (tenant, kind, key, rank) => store.get(tenant, kind, key, rank),
    list: (scan) => store.list(scan),
    track: (scan) => store.track(scan),
    fixes: (scan) => store.fixes(scan),
    ready: () => store.ready(),
    close: () => store.close(),
    async writeWithFixes(writes: readonly DocumentWrite[]): Promise<TenantFix[]> {
      await store.write(writes);
      return writes.flatMap((w) => {
        if (w.op === 'delete') return [];
        const f = trackFix(JSON.parse(w.doc.json) as Record<string, unknown>, w.doc.stamp?.acceptedAt ?? 0);
        return f === undefined ? [] : [positionOfFix(f, w.tenant, w.doc.key)];
      });
    },
  };
}

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

const WAYS: Array<{ name: string; open: (dir: string) => EmbeddedStores; events: (s: EmbeddedStores) => EventStore }> = [
  { name: 'kept by the event log in its index commit', open: (dir) => openEmbeddedStores(dir), events: (s) => s.events },
  {
    name: 'recorded by the worker after the write',
    open: (dir) => openEmbeddedStores(dir, { telemetryEffects: false }),
    events: (s) => s.events,
  },
  {
    name: "recorded by the worker from the store's fixes",
    open: (dir) => openEmbeddedStores(dir, { telemetryEffects: false }),
    events: (s) => withFixes(s.events),
  },
];

async function outcome(way: (typeof WAYS)[number]) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-telemetry-effects-'));
  dirs.push(dir);
  const stores = way.open(dir);
  try {
    const events = way.events(stores);
    expect(events.keepsTelemetryEffects === true).toBe(way === WAYS[0]);
    const worker = telemetryWorker(events, { logger: createLogger('silent') }, {}, stores.entities.telemetry);
    for (const batch of BATCHES) await worker(batch);
    const result: Record<string, { feed: string[]; positions: readonly LatestPosition[] }> = {};
    for (const tenant of ['a', 'b']) {
      const page = await stores.entities.feed.read({ tenant, limit: 100 });
      result[tenant] = {
        feed: page.entries.map((e) => `${e.op} ${e.kind} ${e.key}${e.op === 'put' ? ` ${e.lifecycleRank}` : ''}`),
        positions: await stores.entities.positions.positions(tenant),
      };
    }
    return result;
  } finally {
    await stores.close();
  }
}

describe('telemetry effects: the same feed and positions, whoever records them', () => {
  it('gives every change a feed entry in order and each vehicle its newest position', async () => {
    const [kept, ...recorded] = await Promise.all(WAYS.map(outcome));
    expect(kept!.a!.feed).toEqual([
      `put events ${id(1)} 4`,
      `put events ${id(2)} 4`,
      `put events ${id(4)} 0`,
      `put events ${id(5)} 4`,
      `put events ${id(6)} 4`,
      `delete events ${id(4)}`,
      `put events ${id(2)} 5`,
    ]);
    expect(kept!.a!.positions.map((p) => [p.vehicle, p.eventKey, p.lat])).toEqual([
      [V1, id(6), 54],
      [V2, id(5), 53],
    ]);
    expect(kept!.b!.positions.map((p) => [p.vehicle, p.eventKey])).toEqual([[V1, id(3)]]);
    for (const r of recorded) expect(r).toEqual(kept);
  });
});
