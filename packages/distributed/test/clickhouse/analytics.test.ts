/**
 * Every SQL block of docs/analytics.md run as written against the tests' ClickHouse (a current
 * engine: test/infra/README.md), on rows the store wrote: the `CREATE` statements are the store's
 * own, and the named queries answer what the page says they answer.
 */
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EntityChange } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { integrationEnabled } from '../../../../test/infra/services.js';
import { ClickHouseEventStore, eventStoreDdl } from '../../src/index.js';
import { A1, A3, C1, T1, T2, T3, T4, V1, V2, put, ref, suiteClickHouse } from './fixtures.js';

const enabled = integrationEnabled('docs/analytics.md on ClickHouse');
describe.skipIf(!enabled)('docs/analytics.md on ClickHouse', () => {
  const ch = suiteClickHouse();

  describe('docs/analytics.md', () => {
    const md = fs.readFileSync(fileURLToPath(new URL('../../../../docs/analytics.md', import.meta.url)), 'utf8');
    const blocks = [...md.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1]!.trim());
    const named = new Map(blocks.filter((b) => b.startsWith('-- name: ')).map((b) => [/^-- name: (\S+)/.exec(b)![1]!, b]));
    let store: ClickHouseEventStore;

    beforeAll(async () => {
      // the doc's queries name database `otm`: a fresh server is ours alone
      store = new ClickHouseEventStore({ url: ch.url(), database: 'otm' });
      await store.migrate();
      const ev = (id: string, over: Record<string, unknown>) => ({ id, creationDate: '2024-03-01T08:00:00Z', ...over });
      const fuel = (id: string, day: string, vehicle: unknown, amount: number, unit: string, over: Record<string, unknown> = {}) =>
        ev(id, { eventType: 'fuelConsumedEvent', creationDate: `${day}T09:00:00Z`, vehicle, amount: { value: amount, unit }, ...over });
      const co2 = (id: string, day: string, vehicle: unknown, amount: number, unit: string, over: Record<string, unknown> = {}) =>
        ev(id, { eventType: 'emissionEvent', creationDate: `${day}T10:00:00Z`, vehicle, amount: { value: amount, unit }, ...over });
      const loc = (id: string, ms: number, lat: number, lon: number) =>
        ev(id, {
          eventType: 'locationUpdateEvent',
          creationDate: new Date(ms).toISOString(),
          vehicle: ref('vehicle', V1),
          geoReference: { type: 'latLonPointGeoReference', lat, lon },
        });
      const u = () => randomUUID();
      const f3 = u();
      const e3 = u();
      const farAway = u();
      const t0 = Date.parse('2024-03-01T06:00:00Z');
      const replayed = [put('acme', co2(u(), '2024-03-01', ref('vehicle', V1), 0.002, 't'))];
      await store.write([
        put(
          'acme',
          fuel(u(), '2024-03-01', ref('vehicle', V1), 10, 'l', {
            lifecycle: 'actual',
            trip: { associationType: 'inline', entity: { id: T1 } },
          }),
          4,
        ),
        put('acme', fuel(u(), '2024-03-01', ref('vehicle', V1), 500, 'ml', { references: [ref('trip', T1)] })),
        put('acme', fuel(f3, '2024-03-01', ref('vehicle', V1), 2, 'gal', { lifecycle: 'projected' }), 3),
        put('acme', fuel(f3, '2024-03-01', ref('vehicle', V1), 3, 'l', { lifecycle: 'actual' }), 4),
        put('acme', co2(u(), '2024-03-01', ref('vehicle', V1), 1500, 'g', { trip: ref('trip', T1) })),
        ...replayed,
        put('acme', co2(e3, '2024-03-01', ref('vehicle', V1), 100, 'kg')),
        put('acme', fuel(u(), '2024-03-02', { associationType: 'inline', entity: { id: V1, entityType: 'vehicle' } }, 20, 'litre')),
        put('acme', fuel(u(), '2024-03-02', ref('vehicle', V2), 5000, 'Wh', { fuel: 'electricity' })),
        put('acme', co2(u(), '2024-03-02', ref('vehicle', V2), 3, 'kg')),
        put('other', fuel(u(), '2024-03-01', ref('vehicle', V1), 999, 'l')),
        // locations of V1 on March 1st, out of order, one replayed, one deleted
        put('acme', loc(u(), t0 + 120_000, 52.1, 4.1)),
        put('acme', loc(u(), t0, 52.0, 4.0)),
        put('acme', loc(u(), t0 + 60_000, 52.0, 4.1)),
        put('acme', loc(farAway, t0 + 90_000, 10, 10)),
      ]);
      await store.write(replayed);
      await store.write([
        { op: 'delete', tenant: 'acme', kind: 'events', key: e3 },
        { op: 'delete', tenant: 'acme', kind: 'events', key: farAway },
      ]);
      // The second trip's start (no fuel, no position: the queries above stay as they are).
      await store.write([
        put('acme', ev(u(), { eventType: 'startEngineEvent', vehicle: ref('vehicle', V2), references: [ref('trip', T3)] })),
      ]);

      // Entities, as the entity export copies them (otm_entities).
      const change = (
        version: bigint,
        kind: KindSegment,
        key: string,
        doc?: Record<string, unknown>,
        rank = 0,
        tenant = 'acme',
      ): EntityChange => {
        const head = { tenant, kind, key, at: Date.parse('2024-03-01T05:00:00Z') + Number(version), version };
        return doc === undefined
          ? { ...head, op: 'delete', lifecycleRank: 0 }
          : { ...head, op: 'put', lifecycleRank: rank, json: JSON.stringify(doc) };
      };
      const trip1 = (status: string) => ({
        entityType: 'trip',
        id: T1,
        name: 'Daily supply',
        status,
        vehicle: ref('vehicle', V1),
        actions: [
          { associationType: 'inline', entity: { actionType: 'load', id: A1, lifecycle: 'planned', consignment: ref('consignment', C1) } },
        ],
      });
      const unload = (lifecycle: string) => ({ actionType: 'unload', id: A3, lifecycle, consignment: ref('consignment', C1) });
      const first = change(1n, 'trips', T1, trip1('planned'));
      await store.writeEntityChanges([
        first,
        change(2n, 'trips', T2, { entityType: 'trip', id: T2, name: 'Cancelled', status: 'cancelled' }),
        change(3n, 'trips', T1, trip1('completed')),
        change(4n, 'trips', T3, { entityType: 'trip', id: T3, name: 'Second leg', status: 'inTransit', actions: [ref('action', A3)] }),
        change(5n, 'actions', A3, unload('planned'), 2),
        change(6n, 'actions', A3, unload('actual'), 4),
        change(7n, 'trips', T2),
        change(8n, 'trips', T4, { entityType: 'trip', id: T4, name: 'Empty run', status: 'planned', vehicle: ref('vehicle', V2) }),
        change(9n, 'trips', T1, trip1('other tenant'), 0, 'other'),
      ]);
      await store.writeEntityChanges([first]); // copied again: the later change still wins
    });
    afterAll(async () => {
      await store?.dropDatabase();
      await store?.close();
    });

    it('shows the DDL the store runs, verbatim', () => {
      const ddl = blocks.filter((b) => b.startsWith('CREATE'));
      expect(ddl).toEqual(eventStoreDdl('otm'));
    });

    it('runs every SQL block as written', async () => {
      expect(blocks.length).toBeGreaterThanOrEqual(11);
      for (const sql of blocks)
        await store.query(sql).catch((e: unknown) => {
          throw new Error(`docs/analytics.md query failed: ${String(e)}\n${sql}`);
        });
    });

    it('fuel and CO2 per vehicle per day', async () => {
      const rows = await store.query(named.get('fuel_co2_per_vehicle_day')!);
      expect(rows).toEqual([
        { vehicle_id: V1, day: '2024-03-01', fuel_l: 13.5, fuel_kg: 0, energy_kwh: 0, co2_kg: 3.5 },
        { vehicle_id: V1, day: '2024-03-02', fuel_l: 20, fuel_kg: 0, energy_kwh: 0, co2_kg: 0 },
        { vehicle_id: V2, day: '2024-03-02', fuel_l: 0, fuel_kg: 0, energy_kwh: 5, co2_kg: 3 },
      ]);
    });

    it('fuel and CO2 per trip', async () => {
      const rows = await store.query<Record<string, unknown>>(named.get('fuel_co2_per_trip')!);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ trip_id: T1, vehicles: [V1], fuel_l: 10.5, energy_kwh: 0, co2_kg: 1.5 });
    });

    it('distance per vehicle per day', async () => {
      const rows = await store.query<{ vehicle_id: string; day: string; positions: number; km: number }>(
        named.get('distance_per_vehicle_day')!,
      );
      const hav = (lat1: number, lon1: number, lat2: number, lon2: number) => {
        const r = (d: number) => (d * Math.PI) / 180;
        const a = Math.sin(r(lat2 - lat1) / 2) ** 2 + Math.cos(r(lat1)) * Math.cos(r(lat2)) * Math.sin(r(lon2 - lon1) / 2) ** 2;
        return 2 * 6371.0088 * Math.asin(Math.sqrt(a));
      };
      const expected = hav(52.0, 4.0, 52.0, 4.1) + hav(52.0, 4.1, 52.1, 4.1);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ vehicle_id: V1, day: '2024-03-01', positions: 3 });
      expect(Math.abs(rows[0]!.km - expected) / expected).toBeLessThan(0.005);
    });

    it("one vehicle's track with documents", async () => {
      const rows = await store.query<{ lat: number; doc: string }>(named.get('vehicle_track_with_documents')!);
      expect(rows.map((r) => r.lat)).toEqual([52.0, 52.0, 52.1]);
      expect(JSON.parse(rows[0]!.doc).eventType).toBe('locationUpdateEvent');
    });

    it('fuel and CO2 per trip with its name and status: the latest live version of each trip, joined to its events', async () => {
      const rows = await store.query(named.get('fuel_co2_per_trip_with_status')!);
      expect(rows).toEqual([
        { trip_id: T1, name: 'Daily supply', status: 'completed', fuel_l: 10.5, co2_kg: 1.5 },
        { trip_id: T3, name: 'Second leg', status: 'inTransit', fuel_l: 0, co2_kg: 0 },
        { trip_id: T4, name: 'Empty run', status: 'planned', fuel_l: 0, co2_kg: 0 },
      ]);
    });

    it("events of a consignment's trips: trips that name it, directly or through an action", async () => {
      const rows = await store.query<{ trip_id: string; event_type: string; lifecycle: string }>(named.get('events_of_consignment_trips')!);
      expect(rows.map((r) => `${r.trip_id} ${r.event_type} ${r.lifecycle}`).sort()).toEqual(
        [`${T1} emissionEvent `, `${T1} fuelConsumedEvent `, `${T1} fuelConsumedEvent actual`, `${T3} startEngineEvent `].sort(),
      );
    });

    it('what each trip names, from the parallel arrays', async () => {
      const rows = await store.query(named.get('trip_links')!);
      expect(rows).toEqual([
        { trip_id: T1, linked_kind: 'actions', ids: [A1] },
        { trip_id: T1, linked_kind: 'consignments', ids: [C1] },
        { trip_id: T1, linked_kind: 'vehicles', ids: [V1] },
        { trip_id: T3, linked_kind: 'actions', ids: [A3] },
        { trip_id: T4, linked_kind: 'vehicles', ids: [V2] },
      ]);
    });
  });
});
