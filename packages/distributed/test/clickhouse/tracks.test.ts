/**
 * The ClickHouse store's lists of events and vehicles' tracks (`list`, `track`: sql.ts), on the
 * tests' ClickHouse (a current engine: test/infra/README.md): keyset order, facets, bounds and
 * cursors, the highest live lifecycle, and a day of fixes streamed without gathering it.
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, afterAll, describe, expect, it } from 'vitest';
import type { ListPosition, ListScan, TrackPoint, TrackScan } from '@otm/core';
import { integrationEnabled } from '../../../../test/infra/services.js';
import { ClickHouseEventStore, eventListSql } from '../../src/index.js';
import { V1, V2, put, ref, suiteClickHouse } from './fixtures.js';

const enabled = integrationEnabled('ClickHouseEventStore lists and tracks');
describe.skipIf(!enabled)('ClickHouseEventStore', () => {
  const ch = suiteClickHouse();

  describe('lists of events and tracks of vehicles', () => {
    let store: ClickHouseEventStore;
    const T0 = Date.parse('2024-03-01T00:00:00Z');
    const iso = (ms: number) => new Date(ms).toISOString();
    const loc = (id: string, ms: number, vehicle = V1, over: Record<string, unknown> = {}) => ({
      id,
      eventType: 'locationUpdateEvent',
      creationDate: iso(ms),
      vehicle: ref('vehicle', vehicle),
      geoReference: {
        type: 'latLonPointGeoReference',
        lat: 52,
        lon: 4,
        speed: { value: 10, unit: 'm/s' },
        heading: { value: 90, unit: 'deg' },
      },
      ...over,
    });
    const drain = async <T>(it: AsyncIterable<T>): Promise<T[]> => {
      const out: T[] = [];
      for await (const x of it) out.push(x);
      return out;
    };

    beforeAll(async () => {
      store = new ClickHouseEventStore({ url: ch.url(), database: `otm_lt_${randomUUID().slice(0, 8)}` });
      await store.migrate();
    });
    afterAll(async () => {
      await store?.dropDatabase();
      await store?.close();
    });

    it('lists events at the event time of their highest live lifecycle, in keyset order, by facet, after a cursor, within since and before', async () => {
      const tenant = 'list';
      const [located, sensed, ranked, split, deleted, moved, tieA, tieB, other] = ['l1', 's1', 'r1', 'x1', 'd1', 'm1', 'ta', 'tb', 'o1'];
      const t = (s: number) => T0 + s * 1000;
      await store.write([
        put(tenant, loc(located, t(1))),
        put(tenant, { id: sensed, eventType: 'sensorUpdateEvent', creationDate: iso(t(2)), value: { value: 1, unit: 'Cel' } }),
        // A lower lifecycle later than the highest, and of another type: neither counts.
        put(tenant, loc(ranked, t(5), V2, { lifecycle: 'planned', eventType: 'sensorUpdateEvent' }), 2),
        // A lower lifecycle on another vehicle, later than the highest.
        put(tenant, loc(split, t(7), V1, { lifecycle: 'planned' }), 2),
        put(tenant, loc(deleted, t(2.5))),
        put(tenant, loc(moved, t(0.5))),
        put(tenant, loc(tieB, t(6))),
        put(tenant, loc(tieA, t(6))),
        put('another', loc(other, t(1))),
      ]);
      // The highest lifecycles, a deletion, and a move to another time (its old place gets a
      // tombstone with a higher version than the moved row: the move is alone in its write).
      await store.write([
        put(tenant, loc(ranked, t(3), V2, { lifecycle: 'actual' }), 4),
        put(tenant, loc(split, t(3.5), V2, { lifecycle: 'actual' }), 4),
      ]);
      await store.write([{ op: 'delete', tenant, kind: 'events', key: deleted }]);
      await store.write([put(tenant, loc(moved, t(4)))]);
      const list = (over: Partial<ListScan> = {}) => store.list({ tenant, kind: 'events', facet: '', limit: 100, ...over });
      const all = [
        { at: t(1), key: located },
        { at: t(2), key: sensed },
        { at: t(3), key: ranked },
        { at: t(3.5), key: split },
        { at: t(4), key: moved },
        { at: t(6), key: tieA },
        { at: t(6), key: tieB },
      ];
      const without = (...keys: string[]) => all.filter((e) => !keys.includes(e.key));
      expect(await list()).toEqual(all);
      // No column: every event is a candidate (the query checks the document).
      expect(await list({ facet: 'externalId=X-1' })).toEqual(all);
      expect(await list({ facet: 'lifecycle=planned' })).toEqual(all);
      // The type of the version listed, not of any version.
      expect(await list({ facet: 'eventType=locationUpdateEvent' })).toEqual(without(sensed));
      expect(await list({ facet: 'eventType=sensorUpdateEvent' })).toEqual([{ at: t(2), key: sensed }]);
      // Under a vehicle: the highest lifecycle on that vehicle.
      expect(await list({ facet: `vehicle=${V2}` })).toEqual([
        { at: t(3), key: ranked },
        { at: t(3.5), key: split },
      ]);
      expect(await list({ facet: `vehicle=${V1}` })).toEqual([...without(sensed, ranked, split), { at: t(7), key: split }]);
      // Bounds: a lower lifecycle within them does not list an event whose highest lies outside.
      expect(await list({ since: t(2), before: t(5) })).toEqual(all.slice(1, 5));
      expect(await list({ since: t(4) })).toEqual(all.slice(4));
      expect(await list({ since: t(4) + 1 })).toEqual(all.slice(5));
      expect(await list({ before: t(3) })).toEqual(all.slice(0, 2));
      expect(await list({ before: t(3) + 1 })).toEqual(all.slice(0, 3));
      expect(await list({ since: t(6.5) })).toEqual([]);
      expect(await list({ facet: `vehicle=${V1}`, since: t(6.5) })).toEqual([{ at: t(7), key: split }]);
      expect(await list({ facet: `vehicle=${V2}`, since: t(3.2), before: t(10) })).toEqual([{ at: t(3.5), key: split }]);
      expect(await list({ after: { at: t(6), key: tieA } })).toEqual([{ at: t(6), key: tieB }]);
      expect(await list({ after: { at: t(2), key: sensed }, since: t(1), limit: 2 })).toEqual(all.slice(2, 4));
      expect(await list({ after: { at: t(1), key: located }, since: t(4) })).toEqual(all.slice(4));
      // A page whose candidates were dropped is filled up from after them.
      expect(await list({ since: t(4), limit: 2 })).toEqual(all.slice(4, 6));
      expect(await list({ since: t(4), limit: 2, after: all[5]! })).toEqual(all.slice(6));
      for (const over of [{}, { since: t(2) }, { before: t(6) }, { facet: `vehicle=${V1}` }]) {
        const pages: ListPosition[] = [];
        for (let after: ListPosition | undefined; ;) {
          const page = await list({ ...over, limit: 2, ...(after ? { after } : {}) });
          pages.push(...page);
          if (page.length < 2) break;
          after = page[page.length - 1];
        }
        expect(pages, JSON.stringify(over)).toEqual(await list(over));
      }
      expect(await list({ limit: 0 })).toEqual([]);
      expect(await store.list({ tenant, kind: 'trips', facet: '', limit: 10 })).toEqual([]);
      expect(await list({ tenant: 'another' })).toEqual([{ at: t(1), key: other }]);
    });

    it("streams a vehicle's location events in [from, to), each once in its highest live lifecycle, after a cursor, up to a limit", async () => {
      const tenant = 'track';
      const at = (s: number) => T0 + s * 1000;
      const odd = 'tab\there, newline\nthere, backslash \\ and "quotes"';
      await store.write([
        put(tenant, loc('p-from', at(0))), // exactly at `from`: in
        put(tenant, loc('p-before', at(0) - 1)), // 1 ms before `from`, in the same second: out
        put(tenant, loc('p-b', at(10))),
        put(tenant, loc('p-a', at(10))), // the same time as p-b: ordered by key
        put(
          tenant,
          loc('p-ranked', at(20), V1, { lifecycle: 'planned', geoReference: { type: 'latLonPointGeoReference', lat: 1, lon: 1 } }),
          2,
        ),
        put(tenant, loc('p-gone', at(30))),
        put(tenant, loc('p-moved', at(40))),
        put(tenant, loc('p-away', at(50))),
        put(tenant, loc('p-other', at(55))),
        put(tenant, loc('p-odd', at(60), V1, { name: odd })),
        put(tenant, loc('p-noposition', at(65), V1, { geoReference: undefined })),
        put(tenant, { id: 'p-sensor', eventType: 'sensorUpdateEvent', creationDate: iso(at(70)), vehicle: ref('vehicle', V1) }),
        put(tenant, loc('p-to', at(100))), // exactly at `to`: out
        put('another', loc('p-tenant', at(10))),
      ]);
      await store.write([
        put(
          tenant,
          loc('p-ranked', at(20), V1, { lifecycle: 'actual', geoReference: { type: 'latLonPointGeoReference', lat: 2, lon: 2 } }),
          4,
        ),
      ]);
      await store.write([{ op: 'delete', tenant, kind: 'events', key: 'p-gone' }]);
      await store.write([put(tenant, loc('p-moved', at(80)))]); // moved within the window (tombstone above the moved row)
      await store.write([put(tenant, loc('p-away', at(500)))]); // moved out of the window
      await store.write([put(tenant, loc('p-other', at(55), V2))]); // moved to another vehicle
      await store.write([put(tenant, loc('p-to', at(100)))]); // replayed: still once (and still out)
      const scan: TrackScan = { tenant, vehicle: V1, from: at(0), to: at(100) };
      const points = await drain(store.track(scan));
      expect(points.map((p) => `${(p.time - T0) / 1000} ${p.key} ${p.lifecycleRank}`)).toEqual([
        '0 p-from 0',
        '10 p-a 0',
        '10 p-b 0',
        '20 p-ranked 4',
        '60 p-odd 0',
        '80 p-moved 0',
      ]);
      expect(points[0]).toEqual({
        time: at(0),
        key: 'p-from',
        lifecycleRank: 0,
        lat: 52,
        lon: 4,
        speedKmh: 36,
        heading: 90,
        doc: JSON.stringify(loc('p-from', at(0))),
      });
      expect(points[3]).toMatchObject({ lat: 2, lon: 2, speedKmh: null, heading: null });
      expect(points[4]!.doc).toBe(JSON.stringify(loc('p-odd', at(60), V1, { name: odd })));
      // Pages of two, each after the last point of the one before.
      const pages: TrackPoint[] = [];
      for (let after: { time: number; key: string } | undefined; ;) {
        const page = await drain(store.track({ ...scan, limit: 2, ...(after ? { after } : {}) }));
        pages.push(...page);
        if (page.length < 2) break;
        after = { time: page[1]!.time, key: page[1]!.key };
      }
      expect(pages).toEqual(points);
      expect(await drain(store.track({ ...scan, after: { time: at(10), key: 'p-a' } }))).toEqual(points.slice(2));
      expect((await drain(store.track({ ...scan, to: at(100) + 1 }))).map((p) => p.key)).toContain('p-to');
      expect((await drain(store.track({ ...scan, from: at(0) - 1 }))).map((p) => p.key)).toContain('p-before');
      expect(await drain(store.track({ ...scan, vehicle: V2 }))).toMatchObject([{ key: 'p-other' }]);
      expect(await drain(store.track({ ...scan, limit: 0 }))).toEqual([]);
      expect(await drain(store.track({ ...scan, to: scan.from }))).toEqual([]);
    });

    it(
      'streams a day of fixes at one a second (86,400 points) without gathering them, and stops reading when the consumer stops',
      { timeout: 120_000 },
      async () => {
        const tenant = 'day';
        const vehicle = randomUUID();
        const started = Date.now();
        for (let s = 0; s < 86_400; s += 14_400) {
          await store.write(
            Array.from({ length: 14_400 }, (_, i) => put(tenant, loc(`d-${String(s + i).padStart(5, '0')}`, T0 + (s + i) * 1000, vehicle))),
          );
        }
        const wrote = Date.now() - started;
        const scan: TrackScan = { tenant, vehicle, from: T0, to: T0 + 86_400_000 };
        /** A consumer that keeps nothing but a count, the last point's place and the heap's peak. */
        const count = async (it: AsyncIterable<TrackPoint>, stopAt = Infinity) => {
          let n = 0;
          let last = -1;
          let inOrder = true;
          const heap0 = process.memoryUsage().heapUsed;
          let peak = 0;
          for await (const p of it) {
            if (p.time <= last) inOrder = false;
            last = p.time;
            if (++n % 5_000 === 0) peak = Math.max(peak, process.memoryUsage().heapUsed - heap0);
            if (n >= stopAt) break;
          }
          return { n, inOrder, peakMiB: peak / 2 ** 20 };
        };
        const t = Date.now();
        const whole = await count(store.track(scan));
        console.log(
          `track: 86,400 points written in ${wrote} ms, streamed in ${Date.now() - t} ms, heap grew at most ${whole.peakMiB.toFixed(1)} MiB`,
        );
        expect(whole).toMatchObject({ n: 86_400, inOrder: true });
        // The store yields as it reads: a consumer that stops after ten points ends the response, and
        // the store answers the next request.
        const t1 = Date.now();
        expect(await count(store.track(scan), 10)).toMatchObject({ n: 10, inOrder: true });
        const stopped = Date.now() - t1;
        expect((await count(store.track({ ...scan, from: T0 + 3_600_000, limit: 3_600 }))).n).toBe(3_600);
        console.log(`track: the first 10 points of 86,400 in ${stopped} ms`);
        // The vehicle's list within bounds is a range read of the primary index: an hour of its
        // 86,400 rows (and the granules at the edges), not all of them.
        const hour: ListScan = {
          tenant,
          kind: 'events',
          facet: `vehicle=${vehicle}`,
          since: T0 + 3_600_000,
          before: T0 + 7_200_000,
          limit: 5,
        };
        const listed = eventListSql(store.database, hour);
        const ranged = await store.query<{ event_id: string; at: string }>(
          `${listed.query}\nSETTINGS max_rows_to_read = 10000`,
          listed.params,
        );
        expect(ranged.map((r) => Number(r.at))).toEqual([0, 1, 2, 3, 4].map((i) => T0 + 3_600_000 + i * 1000));
        const t2 = Date.now();
        const page = await store.list({ ...hour, after: { at: T0 + 3_600_000 + 1_000 * 1_000, key: 'd-04600' }, limit: 100 });
        expect(page.map((p) => p.key)).toEqual(Array.from({ length: 100 }, (_, i) => `d-${String(4_601 + i).padStart(5, '0')}`));
        console.log(`list: a page of 100 of a vehicle's hour of 3,600 events in ${Date.now() - t2} ms`);
      },
    );
  });
});
