/**
 * The telemetry worker's side effects (no I/O: stores and effects are stand-ins): feed entries and
 * latest positions recorded after the write, from the store's fixes when it gives them, else read
 * from the events (a value as it is, a text parsed only when it names a location event).
 */
import { describe, expect, it } from 'vitest';
import {
  createLogger,
  TextPut,
  TOPICS,
  type DocumentWrite,
  type Envelope,
  type EventStore,
  type LatestPosition,
  type TelemetrySideEffects,
} from '@otm/core';
import { telemetryEffects, type FixingEventStore } from '../src/telemetry-effects.js';
import { telemetryWorker, toWrite } from '../src/worker.js';

const V = 'b9b7e0f2-8a4c-4a6e-9d35-1f4b1e0c0a01';
const E1 = 'e0000000-0000-4000-8000-000000000001';
const E2 = 'e0000000-0000-4000-8000-000000000002';
const E3 = 'e0000000-0000-4000-8000-000000000003';
const location = (id: string, at: string) => ({
  id,
  eventType: 'locationUpdateEvent',
  creationDate: at,
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: V },
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 4 },
});
const sensor = (id: string) => ({ id, eventType: 'sensorUpdateEvent', creationDate: '2024-03-01T10:00:00Z' });
const envelope = (doc: Record<string, unknown>): Envelope => ({
  topic: TOPICS.telemetry,
  key: doc.id as string,
  message: { v: 1, op: 'put', tenant: 't', kind: 'events', key: doc.id as string, doc, acceptedAt: 1 },
});
/** A put as the in-process bus hands it over: the document as text only. */
const textEnvelope = (doc: Record<string, unknown>): Envelope => ({
  topic: TOPICS.telemetry,
  key: doc.id as string,
  message: new TextPut({
    tenant: 't',
    kind: 'events',
    key: doc.id as string,
    acceptedAt: 1,
    text: JSON.stringify(doc),
    lifecycleRank: 0,
    modified: 0,
  }),
});

type Fix = LatestPosition & { tenant: string };

function recorder() {
  const calls: string[] = [];
  const feed: string[] = [];
  const fixes: Fix[] = [];
  const effects: TelemetrySideEffects = {
    appendFeed: async (entries) => {
      calls.push('feed');
      for (const e of entries) feed.push(`${e.op} ${e.key}`);
    },
    updatePositions: async (f) => {
      calls.push('positions');
      fixes.push(...f);
    },
  };
  return { calls, feed, fixes, effects };
}

const fixOf = (key: string, time: string): Fix => ({
  tenant: 't',
  vehicle: V,
  time: Date.parse(time),
  lat: 52,
  lon: 4,
  speedKmh: null,
  heading: null,
  eventKey: key,
});

class PlainStore implements EventStore {
  readonly written: DocumentWrite[] = [];
  async write(writes: readonly DocumentWrite[]) {
    this.written.push(...writes);
  }
  async get() {
    return undefined;
  }
  async list() {
    return [];
  }
  async *track() {}
  async *fixes() {}
  async ready() {
    return true;
  }
  async close() {}
}

class StoreWithFixes extends PlainStore implements FixingEventStore {
  async writeWithFixes(writes: readonly DocumentWrite[]): Promise<Fix[]> {
    await this.write(writes);
    return [{ ...fixOf('from-the-store', '2024-03-01T10:00:00Z') }];
  }
}

const deps = { logger: createLogger('silent') };

describe('telemetry worker side effects', () => {
  const batch = [
    envelope(location(E1, '2024-03-01T10:00:00Z')),
    envelope(sensor(E2)),
    textEnvelope(location(E3, '2024-03-01T11:00:00Z')),
    textEnvelope(sensor('e0000000-0000-4000-8000-000000000004')),
  ];

  it('reads the fixes from the events when the store does not give them: values as they are, texts that name a location event', async () => {
    const store = new PlainStore();
    const r = recorder();
    await telemetryWorker(store, deps, {}, r.effects)(batch);
    expect(store.written).toHaveLength(4);
    expect(r.feed).toEqual(batch.map((b) => `put ${b.key}`));
    expect(r.fixes).toEqual([fixOf(E1, '2024-03-01T10:00:00Z'), fixOf(E3, '2024-03-01T11:00:00Z')]);
    expect([...r.calls].sort()).toEqual(['feed', 'positions']);
  });

  it("takes the store's fixes when it gives them, and reads no event for them", async () => {
    const store = new StoreWithFixes();
    const r = recorder();
    await telemetryWorker(store, deps, {}, r.effects)(batch);
    expect(r.feed).toEqual(batch.map((b) => `put ${b.key}`));
    expect(r.fixes).toEqual([fixOf('from-the-store', '2024-03-01T10:00:00Z')]);
    expect(telemetryEffects(batch.map(toWrite), false)).toEqual({ feed: expect.any(Array), fixes: [] });
  });

  it('records nothing itself for a store that keeps the effects, and nothing of a write that failed', async () => {
    const r = recorder();
    const keeping = Object.assign(new StoreWithFixes(), { keepsTelemetryEffects: true });
    await telemetryWorker(keeping, deps, {}, r.effects)(batch);
    expect(r.calls).toEqual([]);
    const failing = new StoreWithFixes();
    failing.writeWithFixes = () => Promise.reject(new Error('down'));
    await expect(telemetryWorker(failing, deps, {}, r.effects)(batch)).rejects.toThrow('down');
    expect(r.calls).toEqual([]);
  });
});
