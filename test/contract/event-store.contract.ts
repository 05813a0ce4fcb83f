/**
 * The contract of the EventStore port (packages/core/src/ports.ts), run against every adapter:
 * documents by (tenant, kind, key, lifecycle rank), the latest lifecycle by default, deletes of
 * every version, idempotent replays.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { DocumentWrite, EventStore, TrackFixPoint } from '@otm/core';
import { openedPerTest } from './fixture.js';

export interface EventStoreFixture {
  readonly store: EventStore;
  close(): Promise<void>;
}

const location = (id: string, over: Record<string, unknown> = {}) => ({
  id,
  eventType: 'locationUpdateEvent',
  creationDate: '2024-03-01T10:00:00.250Z',
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: 'b9b7e0f2-8a4c-4a6e-9d35-1f4b1e0c0a01' },
  geoReference: { type: 'latLonPointGeoReference', lat: 52.1, lon: 4.3 },
  ...over,
});

export const putEvent = (tenant: string, doc: Record<string, unknown>, rank = 0): DocumentWrite => ({
  op: 'put',
  tenant,
  doc: { kind: 'events', key: doc.id as string, lifecycleRank: rank, json: JSON.stringify(doc), value: doc },
});
const del = (tenant: string, key: string): DocumentWrite => ({ op: 'delete', tenant, kind: 'events', key });

/**
 * `appliesInCallOrder`: what the adapter must say of itself (EventStore.appliesInCallOrder); when
 * true, the contract also checks it with calls that do not wait for each other.
 */
export function eventStoreContract(name: string, factory: () => Promise<EventStoreFixture>, opts: { appliesInCallOrder: boolean }): void {
  describe(`EventStore contract: ${name}`, () => {
    const open = openedPerTest(factory);

    it('returns what was written, byte for byte, and nothing for an unknown id', async () => {
      const { store } = await open();
      const id = randomUUID();
      const doc = location(id, { name: 'O\'Brien \\ "quoted" \u00e9\n' });
      await store.write([putEvent('t1', doc)]);
      const got = await store.get('t1', 'events', id);
      expect(got).toMatchObject({ kind: 'events', key: id, lifecycleRank: 0, json: JSON.stringify(doc) });
      expect(await store.get('t1', 'events', randomUUID())).toBeUndefined();
    });

    it('keeps every lifecycle version and answers the latest unless asked for one', async () => {
      const { store } = await open();
      const id = randomUUID();
      await store.write([
        putEvent('t1', location(id, { lifecycle: 'planned' }), 2),
        putEvent('t1', location(id, { lifecycle: 'realized' }), 5),
      ]);
      await store.write([putEvent('t1', location(id), 0)]);
      expect((await store.get('t1', 'events', id))?.lifecycleRank).toBe(5);
      expect(JSON.parse((await store.get('t1', 'events', id))!.json).lifecycle).toBe('realized');
      expect(JSON.parse((await store.get('t1', 'events', id, 2))!.json).lifecycle).toBe('planned');
      expect((await store.get('t1', 'events', id, 0))?.lifecycleRank).toBe(0);
      expect(await store.get('t1', 'events', id, 3)).toBeUndefined();
    });

    it('a replayed batch reads back once, and a newer version replaces an older one', async () => {
      const { store } = await open();
      const id = randomUUID();
      const batch = [putEvent('t1', location(id)), putEvent('t1', location(randomUUID()))];
      await store.write(batch);
      await store.write(batch);
      expect((await store.get('t1', 'events', id))?.json).toBe(JSON.stringify(location(id)));
      const moved = location(id, { geoReference: { type: 'latLonPointGeoReference', lat: 1, lon: 2 } });
      await store.write([putEvent('t1', moved)]);
      expect((await store.get('t1', 'events', id))?.json).toBe(JSON.stringify(moved));
    });

    it('a new version that moves the event to another vehicle and day replaces it, also when it moves back', async () => {
      const { store } = await open();
      const id = randomUUID();
      const there = location(id, {
        creationDate: '2024-04-02T08:00:00Z',
        vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: 'c0c0c0c0-0000-4000-8000-000000000002' },
      });
      await store.write([putEvent('t1', location(id))]);
      await store.write([putEvent('t1', there)]);
      expect((await store.get('t1', 'events', id))?.json).toBe(JSON.stringify(there));
      const back = location(id, { name: 'back' });
      await store.write([putEvent('t1', back)]);
      expect((await store.get('t1', 'events', id))?.json).toBe(JSON.stringify(back));
    });

    it('delete removes every lifecycle version at once; a later put brings it back', async () => {
      const { store } = await open();
      const id = randomUUID();
      const other = randomUUID();
      await store.write([putEvent('t1', location(id), 1), putEvent('t1', location(id), 4), putEvent('t1', location(other))]);
      await store.write([del('t1', id)]);
      expect(await store.get('t1', 'events', id)).toBeUndefined();
      expect(await store.get('t1', 'events', id, 1)).toBeUndefined();
      expect(await store.get('t1', 'events', other)).toBeDefined();
      await store.write([del('t1', randomUUID())]); // unknown: nothing happens
      await store.write([putEvent('t1', location(id, { name: 'again' }))]);
      expect(JSON.parse((await store.get('t1', 'events', id))!.json).name).toBe('again');
      expect(await store.get('t1', 'events', id, 4)).toBeUndefined();
    });

    it('applies the writes of one call in order (put then delete, delete then put)', async () => {
      const { store } = await open();
      const a = randomUUID();
      const b = randomUUID();
      await store.write([putEvent('t1', location(b))]);
      await store.write([putEvent('t1', location(a)), del('t1', a), del('t1', b), putEvent('t1', location(b, { name: 'b2' }))]);
      expect(await store.get('t1', 'events', a)).toBeUndefined();
      expect(JSON.parse((await store.get('t1', 'events', b))!.json).name).toBe('b2');
    });

    it(`says whether it applies writes in call order (${opts.appliesInCallOrder})`, async () => {
      const { store } = await open();
      expect(store.appliesInCallOrder ?? false).toBe(opts.appliesInCallOrder);
    });

    // Only for such stores (the telemetry worker hands the others one batch at a time).
    if (opts.appliesInCallOrder)
      it('applies writes in call order, also of calls made before earlier ones resolved', async () => {
        const { store } = await open();
        const ids = Array.from({ length: 20 }, () => randomUUID());
        // Many calls at once, each without waiting: puts, deletes and new versions of the same ids.
        const calls: Promise<void>[] = [];
        for (let round = 0; round < 5; round++) {
          for (const id of ids) {
            calls.push(store.write([putEvent('t1', location(id, { name: `r${round}` }))]));
            if (round === 3) calls.push(store.write([del('t1', id)]));
          }
        }
        calls.push(store.write([del('t1', ids[0]!)]));
        await Promise.all(calls);
        expect(await store.get('t1', 'events', ids[0]!)).toBeUndefined();
        for (const id of ids.slice(1)) expect(JSON.parse((await store.get('t1', 'events', id))!.json).name).toBe('r4');
      });

    it("gives a vehicle's track points without documents, oldest or newest first, as track gives them", async () => {
      const { store } = await open();
      const vehicle = randomUUID();
      const t0 = Date.parse('2024-03-01T10:00:00Z');
      const ids = Array.from({ length: 7 }, () => randomUUID());
      const fix = (id: string, i: number, over: Record<string, unknown> = {}) =>
        location(id, {
          creationDate: new Date(t0 + i * 60_000).toISOString(),
          vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicle },
          geoReference: { type: 'latLonPointGeoReference', lat: 52 + i / 1000, lon: 5 + i / 1000, speed: { value: 10 * i, unit: 'km/h' } },
          ...over,
        });
      // Another vehicle's point and a sensor event in the window: not in the track.
      await store.write([
        ...ids.map((id, i) => putEvent('t1', fix(id, i))),
        putEvent('t1', fix(randomUUID(), 3, { vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: randomUUID() } })),
        putEvent('t1', fix(randomUUID(), 3, { eventType: 'sensorUpdateEvent' })),
      ]);
      // A later lifecycle of one point moves it; a deleted point is gone.
      await store.write([
        putEvent('t1', fix(ids[2]!, 2, { geoReference: { type: 'latLonPointGeoReference', lat: 1, lon: 2 } }), 5),
        del('t1', ids[4]!),
      ]);
      const all = async <T>(it: AsyncIterable<T>) => {
        const out: T[] = [];
        for await (const p of it) out.push(p);
        return out;
      };
      // Fixes come in chunks; each point's minute tells which event it is.
      const points = async (it: AsyncIterable<readonly TrackFixPoint[]>) => (await all(it)).flat();
      const minute = (f: { time: number }) => (f.time - t0) / 60_000;
      const scan = { tenant: 't1', vehicle, from: t0, to: t0 + 7 * 60_000 };
      const track = await all(store.track(scan));
      const fixes = await points(store.fixes(scan));
      expect(fixes).toEqual(track.map(({ time, lat, lon, speedKmh, heading }) => ({ time, lat, lon, speedKmh, heading })));
      expect(track.map((f) => f.key)).toEqual([ids[0], ids[1], ids[2], ids[3], ids[5], ids[6]]);
      expect(fixes[2]).toMatchObject({ lat: 1, lon: 2 });
      expect(fixes[1]).toMatchObject({ time: t0 + 60_000, lat: 52.001, lon: 5.001, speedKmh: 10 });
      const newest = await points(store.fixes({ ...scan, descending: true }));
      expect(newest.map(minute)).toEqual([6, 5, 3, 2, 1, 0]);
      // The last point at or before a time: newest first, one.
      const before = await points(store.fixes({ ...scan, to: t0 + 3 * 60_000 + 1, descending: true, limit: 1 }));
      expect(before.map(minute)).toEqual([3]);
      expect((await points(store.fixes({ ...scan, from: t0 + 4 * 60_000, limit: 1 }))).map(minute)).toEqual([5]);
      expect(await points(store.fixes({ ...scan, tenant: 't2' }))).toEqual([]);
      // More points than one read of the store takes: the same points either way.
      const many = randomUUID();
      await store.write(
        Array.from({ length: 1_100 }, (_, i) =>
          putEvent('t1', fix(randomUUID(), i, { vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: many } })),
        ),
      );
      const manyScan = { tenant: 't1', vehicle: many, from: t0, to: t0 + 2_000 * 60_000 };
      const up = await points(store.fixes(manyScan));
      expect(up.map(minute)).toEqual(Array.from({ length: 1_100 }, (_, i) => i));
      expect(await points(store.fixes({ ...manyScan, descending: true }))).toEqual(up.reverse());
    });

    it('keeps tenants apart', async () => {
      const { store } = await open();
      const id = randomUUID();
      await store.write([putEvent('t1', location(id, { name: 'one' })), putEvent('t2', location(id, { name: 'two' }))]);
      expect(JSON.parse((await store.get('t1', 'events', id))!.json).name).toBe('one');
      expect(JSON.parse((await store.get('t2', 'events', id))!.json).name).toBe('two');
      expect(await store.get('t3', 'events', id)).toBeUndefined();
      await store.write([del('t1', id)]);
      expect(await store.get('t1', 'events', id)).toBeUndefined();
      expect(await store.get('t2', 'events', id)).toBeDefined();
    });

    it('takes a batch of thousands of events in one call', async () => {
      const { store } = await open();
      const ids = Array.from({ length: 3000 }, () => randomUUID());
      await store.write(ids.map((id) => putEvent('t1', location(id))));
      for (const id of [ids[0]!, ids[1499]!, ids[2999]!]) expect((await store.get('t1', 'events', id))?.key).toBe(id);
    });

    it('is ready', async () => {
      const { store } = await open();
      expect(await store.ready()).toBe(true);
    });
  });
}
