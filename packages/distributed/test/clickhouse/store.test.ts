/**
 * ClickHouseEventStore beyond the EventStore contract: the analyst columns as stored (SELECT on
 * the table), moves and deletes seen through FINAL, GETs gathered into one query, refusals, on the
 * tests' ClickHouse (a current engine: test/infra/README.md). Lists and tracks: tracks.test.ts;
 * the SQL of docs/analytics.md: analytics.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AdapterError, storageKey, type DocumentWrite } from '@otm/core';
import { integrationEnabled } from '../../../../test/infra/services.js';
import { ClickHouseEventStore } from '../../src/index.js';
import { T1, V1, V2, put, ref, suiteClickHouse } from './fixtures.js';

const enabled = integrationEnabled('ClickHouseEventStore');
describe.skipIf(!enabled)('ClickHouseEventStore', () => {
  const ch = suiteClickHouse();

  it('stores typed analyst columns: ids from inline and referenced entities, position, units normalised', async () => {
    const store = new ClickHouseEventStore({ url: ch.url(), database: `otm_cols_${randomUUID().slice(0, 8)}` });
    await store.migrate();
    await store.migrate(); // idempotent
    try {
      const loc = randomUUID();
      const sensor = randomUUID();
      const fuel = randomUUID();
      const weigh = randomUUID();
      await store.write([
        put('acme', {
          id: loc,
          eventType: 'locationUpdateEvent',
          creationDate: '2024-03-01T10:00:00.250Z',
          vehicle: { associationType: 'inline', entity: { id: V1, entityType: 'vehicle' } },
          references: [ref('trip', T1)],
          geoReference: {
            type: 'latLonPointGeoReference',
            lat: 52.1,
            lon: 4.3,
            speed: { value: 10, unit: 'm/s' },
            heading: { value: 90, unit: 'deg' },
          },
        }),
        put('acme', {
          id: sensor,
          eventType: 'sensorUpdateEvent',
          creationDate: '2024-03-01T10:00:01Z',
          sensor: ref('sensor', 'd0d0d0d0-0000-4000-8000-000000000001'),
          value: { value: -18.5, unit: 'Cel' },
        }),
        put(
          'acme',
          {
            id: fuel,
            eventType: 'fuelConsumedEvent',
            lifecycle: 'actual',
            creationDate: '2024-03-01T11:00:00Z',
            vehicle: ref('vehicle', V1),
            trip: { associationType: 'inline', entity: { id: T1 } },
            fuel: 'diesel',
            amount: { value: 2, unit: 'gal' },
          },
          4,
        ),
        put('acme', {
          id: weigh,
          eventType: 'weighEvent',
          creationDate: '2024-03-01T12:00:00Z',
          vehicle: ref('vehicle', V1),
          weighingResult: { weighingType: 'tare', weight: { value: 7.5, unit: 't' } },
        }),
      ]);
      const rows = await store.query<Record<string, unknown>>(
        `SELECT * FROM ${store.database}.otm_events FINAL WHERE tenant = 'acme' AND deleted = 0 ORDER BY event_time`,
      );
      expect(rows).toHaveLength(4);
      const [l, s, f, w] = rows as [Record<string, unknown>, Record<string, unknown>, Record<string, unknown>, Record<string, unknown>];
      expect(l).toMatchObject({
        event_id: loc,
        event_type: 'locationUpdateEvent',
        event_time: '2024-03-01 10:00:00.250',
        vehicle_id: V1,
        trip_id: T1,
        sensor_id: '',
        lat: 52.1,
        lon: 4.3,
        speed: 10,
        speed_unit: 'm/s',
        speed_kmh: 36,
        heading: 90,
        amount: null,
        lifecycle_rank: 0,
        lifecycle: '',
      });
      expect(s).toMatchObject({
        event_id: sensor,
        sensor_id: 'd0d0d0d0-0000-4000-8000-000000000001',
        vehicle_id: '',
        sensor_value: -18.5,
        sensor_unit: 'Cel',
        lat: null,
      });
      expect(f).toMatchObject({
        event_id: fuel,
        vehicle_id: V1,
        trip_id: T1,
        lifecycle: 'actual',
        lifecycle_rank: 4,
        fuel_type: 'diesel',
        amount: 2,
        amount_unit: 'gal',
        amount_normalised: 7.570823568,
        amount_normalised_unit: 'l',
      });
      expect(w).toMatchObject({ event_id: weigh, weight: 7.5, weight_unit: 't', weight_kg: 7500, weighing_type: 'tare' });

      // moving an event to another vehicle and time leaves one live row; a delete leaves none
      const moved = {
        id: loc,
        eventType: 'locationUpdateEvent',
        creationDate: '2024-03-05T10:00:00Z',
        vehicle: ref('vehicle', V2),
        geoReference: { type: 'latLonPointGeoReference', lat: 1, lon: 2 },
      };
      await store.write([put('acme', moved)]);
      const live = await store.query<{ vehicle_id: string; lat: number }>(
        `SELECT vehicle_id, lat FROM ${store.database}.otm_events FINAL WHERE tenant = 'acme' AND deleted = 0 AND event_id = '${loc}'`,
      );
      expect(live).toEqual([{ vehicle_id: V2, lat: 1 }]);
      await store.write([{ op: 'delete', tenant: 'acme', kind: 'events', key: fuel }]);
      const left = await store.query<{ n: string }>(
        `SELECT count() AS n FROM ${store.database}.otm_events FINAL WHERE tenant = 'acme' AND deleted = 0`,
      );
      expect(Number(left[0]!.n)).toBe(3);
      expect(await store.get('acme', 'events', fuel)).toBeUndefined();
    } finally {
      await store.dropDatabase();
      await store.close();
    }
  });

  it('finds every stored event of a batch that spans several lookups: moved ones leave one live row each', async () => {
    // 2,500 ids, looked up 1,000 at a time (lookupChunk): stored ones moved to another vehicle and
    // day, new ones among them. A stored id the lookup missed would keep its old row live.
    const store = new ClickHouseEventStore({ url: ch.url(), database: `otm_test_${randomUUID().replace(/-/g, '')}` });
    await store.migrate();
    try {
      const loc = (id: string, vehicle: string, at: string) => ({
        id,
        eventType: 'locationUpdateEvent',
        creationDate: at,
        vehicle: ref('vehicle', vehicle),
        geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
      });
      const stored = Array.from({ length: 2000 }, () => randomUUID());
      const fresh = Array.from({ length: 500 }, () => randomUUID());
      await store.write(stored.map((id) => put('acme', loc(id, V1, '2024-03-01T10:00:00Z'))));
      const batch = [...stored, ...fresh].sort();
      await store.write(batch.map((id) => put('acme', loc(id, V2, '2024-04-02T10:00:00Z'))));
      const live = await store.query<{ vehicle_id: string; n: string }>(
        `SELECT vehicle_id, count() AS n FROM ${store.database}.otm_events FINAL WHERE tenant = 'acme' AND deleted = 0 GROUP BY vehicle_id`,
      );
      expect(live.map((r) => ({ vehicle_id: r.vehicle_id, n: Number(r.n) }))).toEqual([{ vehicle_id: V2, n: 2500 }]);
      expect(JSON.parse((await store.get('acme', 'events', stored[1999]!))!.json).vehicle.uuid).toBe(V2);
    } finally {
      await store.dropDatabase();
      await store.close();
    }
  });

  it('keeps any characters and numbers as sent: separators, backslashes, NUL, tiny and huge values', async () => {
    const store = new ClickHouseEventStore({ url: ch.url(), database: `otm_chars_${randomUUID().slice(0, 8)}` });
    await store.migrate();
    try {
      const id = randomUUID();
      const odd = 'a\tb\nc\\d\re\u0000f \\N é 🚚 \'"';
      const doc = {
        id,
        eventType: 'locationUpdateEvent',
        creationDate: '2024-03-01T10:00:00Z',
        name: odd,
        vehicle: { associationType: 'inline', entity: { id: odd, entityType: 'vehicle' } },
        geoReference: {
          type: 'latLonPointGeoReference',
          lat: 1e-7,
          lon: -179.999999,
          speed: { value: 1e21, unit: odd },
          heading: { value: 0, unit: '\\' },
        },
      };
      await store.write([put('acme', doc)]);
      const [row] = await store.query<Record<string, unknown>>(`SELECT * FROM ${store.database}.otm_events WHERE event_id = '${id}'`);
      // Ids are the storage keys their entities are found under (a name-based UUID for this one).
      expect(row).toMatchObject({
        vehicle_id: storageKey(odd),
        speed_unit: odd,
        heading_unit: '\\',
        lat: 1e-7,
        lon: -179.999999,
        speed: 1e21,
        heading: 0,
        doc: JSON.stringify(doc),
      });
      expect((await store.get('acme', 'events', id))?.json).toBe(JSON.stringify(doc));
      const [ids] = await store.query<Record<string, unknown>>(
        `SELECT vehicle_id FROM ${store.database}.otm_event_ids WHERE event_id = '${id}'`,
      );
      expect(ids).toEqual({ vehicle_id: storageKey(odd) });
    } finally {
      await store.dropDatabase();
      await store.close();
    }
  });

  it('answers GETs that arrive together with one query per tenant and lifecycle asked for, each as a lone GET would', async () => {
    const store = new ClickHouseEventStore({ url: ch.url(), database: `otm_gets_${randomUUID().slice(0, 8)}` });
    await store.migrate();
    try {
      const loc = (id: string, vehicle: string, at: string) => ({
        id,
        eventType: 'locationUpdateEvent',
        lifecycle: 'actual',
        creationDate: at,
        vehicle: ref('vehicle', vehicle),
        geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 4 },
      });
      const [a, b, moved, gone, ranked, other, missing] = Array.from({ length: 7 }, () => randomUUID());
      await store.write([
        put('acme', loc(a!, V1, '2024-03-01T10:00:00Z'), 4),
        put('acme', loc(b!, V1, '2024-03-01T10:00:00Z'), 4),
        put('acme', loc(moved!, V1, '2024-03-01T10:01:00Z'), 4),
        put('acme', loc(gone!, V2, '2024-03-01T10:02:00Z'), 4),
        put('acme', { ...loc(ranked!, V2, '2024-03-01T10:03:00Z'), lifecycle: 'planned' }, 2),
        put('beta', loc(other!, V1, '2024-03-01T10:00:00Z'), 4),
      ]);
      // Moved to another vehicle and time (its old place holds a tombstone), a second lifecycle
      // of `ranked`, a deletion; `other` belongs to another tenant.
      await store.write([put('acme', { ...loc(moved!, V2, '2024-03-02T08:00:00Z'), speedNote: 'moved' }, 4)]);
      await store.write([put('acme', loc(ranked!, V2, '2024-03-01T10:04:00Z'), 4)]);
      await store.write([{ op: 'delete', tenant: 'acme', kind: 'events', key: gone! }]);

      const asks: Array<[string, string, number | undefined]> = [
        ['acme', a!, undefined],
        ['acme', b!, undefined],
        ['acme', moved!, undefined],
        ['acme', gone!, undefined],
        ['acme', ranked!, undefined],
        ['acme', ranked!, 2],
        ['acme', ranked!, 3],
        ['acme', a!, undefined], // the same id twice in one batch
        ['acme', other!, undefined], // another tenant's event
        ['beta', other!, undefined],
        ['acme', missing!, undefined],
      ];
      const alone: unknown[] = [];
      for (const [tenant, key, rank] of asks) alone.push(await store.get(tenant, 'events', key, rank));
      const selects: string[] = [];
      const spied = store as unknown as { select: (sql: string) => Promise<unknown[]> };
      const select = spied.select.bind(store);
      spied.select = (sql) => {
        selects.push(sql);
        return select(sql);
      };
      const together = await Promise.all(asks.map(([tenant, key, rank]) => store.get(tenant, 'events', key, rank)));
      expect(together).toEqual(alone);
      // acme (any lifecycle), acme rank 2, acme rank 3, beta: four queries for eleven GETs.
      expect(selects).toHaveLength(4);
      expect(together.map((d) => d && { key: d.key, rank: d.lifecycleRank, moved: JSON.parse(d.json).speedNote })).toEqual([
        { key: a, rank: 4, moved: undefined },
        { key: b, rank: 4, moved: undefined },
        { key: moved, rank: 4, moved: 'moved' },
        undefined,
        { key: ranked, rank: 4, moved: undefined },
        { key: ranked, rank: 2, moved: undefined },
        undefined,
        { key: a, rank: 4, moved: undefined },
        undefined,
        { key: other, rank: 4, moved: undefined },
        undefined,
      ]);
    } finally {
      await store.dropDatabase();
      await store.close();
    }
  });

  it('a request ClickHouse refuses as malformed is a non-retryable AdapterError, and stores nothing', async () => {
    const store = new ClickHouseEventStore({ url: ch.url(), database: `otm_bad_${randomUUID().slice(0, 8)}` });
    await store.migrate();
    try {
      await expect(store.query('SELEC 1')).rejects.toMatchObject({ name: 'AdapterError', adapter: 'clickhouse', retryable: false });
      // An acceptedAt that is not a number (the event's time is its own): ClickHouse cannot parse the Int64 column.
      const id = randomUUID();
      const bad: DocumentWrite = {
        op: 'put',
        tenant: 'acme',
        doc: {
          kind: 'events',
          key: id,
          lifecycleRank: 0,
          json: JSON.stringify({ id, eventType: 'locationUpdateEvent', creationDate: '2024-03-01T10:00:00Z' }),
          stamp: { modified: 0, acceptedAt: Number.NaN },
        },
      };
      const err = await store.write([bad]).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(AdapterError);
      expect(err).toMatchObject({ adapter: 'clickhouse', retryable: false });
      expect((err as Error).message).toMatch(/^refused as malformed: /);
      expect(await store.get('acme', 'events', id)).toBeUndefined();
    } finally {
      await store.dropDatabase();
      await store.close();
    }
  });

  it('reports an unreachable server as a retryable 503 and not ready', async () => {
    const store = new ClickHouseEventStore({ url: 'http://127.0.0.1:1', requestTimeoutMs: 1_000 });
    expect(await store.ready()).toBe(false);
    await expect(store.get('t', 'events', randomUUID())).rejects.toMatchObject({ status: 503, retryable: true });
    await store.close();
  });
});
