/**
 * The find extensions over HTTP: lists with cursors, the change feed, vehicle tracks in every
 * format and latest positions, each scoped to the token's tenant. Run against the embedded service
 * here and against the distributed deployment by test/distributed/find.dist.test.ts. In the
 * distributed deployment a write is visible to GET when its PUT's barrier returns; the feed and
 * positions of telemetry events follow right after, so those checks wait for them (`eventually`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { check as checkGeoJson } from '@placemarkio/check-geojson';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { parse as parseCsv } from 'csv-parse/sync';
import { storageKey } from '@otm/core';
import { auth, startService, type TestService } from './helpers.js';

const uuid = (prefix: string, i: number) => `${prefix}-0000-4000-8000-${String(i).padStart(12, '0')}`;
const tripId = (i: number) => uuid('7a000000', i);
const vehicleId = (i: number) => uuid('7b000000', i);
const actorId = (i: number) => uuid('7c000000', i);
const eventId = (i: number) => uuid('7d000000', i);

const T0 = Date.parse('2026-11-20T08:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString();

const trip = (i: number, extra: Record<string, unknown> = {}) => ({
  id: tripId(i),
  name: `trip ${i}`,
  status: i % 2 === 0 ? 'inTransit' : 'confirmed',
  vehicle: { associationType: 'reference', uuid: vehicleId(i % 3), entityType: 'vehicle' },
  actors: [{ associationType: 'reference', uuid: actorId(i % 2), entityType: 'actor', roles: ['carrier'] }],
  externalIdentifiers: [{ id: `ORDER-${i}`, scheme: 'erp' }],
  ...extra,
});

const location = (i: number, vehicle: string, t: number, lat: number, lon: number) => ({
  id: eventId(i),
  eventType: 'locationUpdateEvent',
  lifecycle: 'actual',
  creationDate: iso(t),
  vehicle: { associationType: 'reference', uuid: vehicle, entityType: 'vehicle' },
  geoReference: { type: 'latLonPointGeoReference', lat, lon, speed: { value: 50, unit: 'km/h' }, heading: { value: 90, unit: 'deg' } },
});

async function eventually<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v) || Date.now() > until) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('find: lists, change feed, tracks, latest positions', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => svc.close());

  const put = async (kind: string, doc: unknown, token?: string) => {
    const res = await svc.app.inject({
      method: 'PUT',
      url: `/api/v5/${kind}`,
      headers: { ...auth(token), 'content-type': 'application/json' },
      payload: JSON.stringify(doc),
    });
    expect(res.statusCode, res.body).toBe(200);
  };
  const del = async (kind: string, id: string) => {
    const res = await svc.app.inject({ method: 'DELETE', url: `/api/v5/${kind}/${id}`, headers: auth() });
    expect(res.statusCode, res.body).toBe(204);
  };
  const get = (url: string, token?: string) => svc.app.inject({ method: 'GET', url, headers: auth(token) });
  const getJson = async (url: string, token?: string) => {
    const res = await get(url, token);
    expect(res.statusCode, res.body).toBe(200);
    return res.json<{ items: any[]; next: string | null }>();
  };
  /** Every item of a list, walking `next` with `limit` a page. */
  const walk = async (url: string) => {
    const seen: any[] = [];
    let next: string | null = url;
    for (let pages = 0; next !== null && pages < 100; pages++) {
      const page = await getJson(next);
      seen.push(...page.items);
      next = page.next;
    }
    return seen;
  };

  describe('lists', () => {
    beforeAll(async () => {
      for (let i = 1; i <= 7; i++) await put('trips', trip(i));
    });

    it('pages every trip exactly once in keyset order, then next is null', async () => {
      const items = await walk('/api/v5/trips?limit=3');
      expect(items.map((t) => t.id).sort()).toEqual([1, 2, 3, 4, 5, 6, 7].map(tripId));
      const last = await getJson('/api/v5/trips?limit=1000');
      expect(last.next).toBeNull();
      // Items are the documents as GET answers them.
      expect(last.items.find((t) => t.id === tripId(4))).toEqual((await get(`/api/v5/trips/${tripId(4)}`)).json());
    });

    it('says there is more when a page is full', async () => {
      const page = await getJson('/api/v5/trips?limit=2');
      expect(page.items).toHaveLength(2);
      expect(page.next).toMatch(/^\/api\/v5\/trips\?limit=2&cursor=/);
    });

    it('filters by status, vehicle, actor and external id, combined', async () => {
      const ids = async (q: string) => (await walk(`/api/v5/trips?${q}`)).map((t) => t.id).sort();
      expect(await ids('status=inTransit')).toEqual([2, 4, 6].map(tripId));
      expect(await ids(`vehicle=${vehicleId(1)}`)).toEqual([1, 4, 7].map(tripId));
      expect(await ids(`actor=${actorId(0)}`)).toEqual([2, 4, 6].map(tripId));
      expect(await ids('externalId=ORDER-5')).toEqual([tripId(5)]);
      expect(await ids(`status=inTransit&vehicle=${vehicleId(1)}&limit=1`)).toEqual([tripId(4)]);
      expect(await ids('externalId=nothing')).toEqual([]);
    });

    it('follows a change: a trip whose status changed leaves the old status list', async () => {
      await put('trips', trip(3, { status: 'completed' }));
      expect((await walk('/api/v5/trips?status=confirmed')).map((t) => t.id)).not.toContain(tripId(3));
      expect((await walk('/api/v5/trips?status=completed')).map((t) => t.id)).toEqual([tripId(3)]);
    });

    it('filters by updatedSince and updatedBefore', async () => {
      const before = Date.now();
      await new Promise((r) => setTimeout(r, 20));
      await put('trips', trip(6, { name: 'changed' }));
      expect((await walk(`/api/v5/trips?updatedSince=${iso(before)}`)).map((t) => t.id)).toEqual([tripId(6)]);
      expect((await walk(`/api/v5/trips?updatedBefore=${iso(before)}`)).map((t) => t.id)).not.toContain(tripId(6));
    });

    it('answers a bad filter, limit or cursor with a 400 naming it', async () => {
      for (const [q, field] of [
        ['status=bogus', 'status'],
        ['colour=red', 'colour'],
        ['eventType=locationUpdateEvent', 'eventType'],
        ['limit=0', 'limit'],
        ['limit=1001', 'limit'],
        ['cursor=%%%', 'cursor'],
        ['cursor=eyJ4IjoxfQ', 'cursor'],
        ['updatedSince=yesterday', 'updatedSince'],
      ] as const) {
        const res = await get(`/api/v5/trips?${q}`);
        expect(res.statusCode, q).toBe(400);
        expect(res.json(), q).toEqual([expect.objectContaining({ type: 'invalidField', field })]);
      }
      expect((await get('/api/v5/nonsense')).statusCode).toBe(404);
    });

    it('shows another tenant nothing, and needs a token', async () => {
      expect((await getJson('/api/v5/trips', 'writer-token-globex')).items).toEqual([]);
      expect((await svc.app.inject({ method: 'GET', url: '/api/v5/trips' })).statusCode).toBe(401);
    });

    it('lists every kind', async () => {
      await put('vehicles', { id: vehicleId(9), licensePlate: 'AB-12-CD' });
      expect((await walk('/api/v5/vehicles?licensePlate=AB-12-CD')).map((v) => v.id)).toEqual([vehicleId(9)]);
      for (const kind of [
        'routes',
        'sensors',
        'locations',
        'actors',
        'consignments',
        'events',
        'actions',
        'goods',
        'documents',
        'transportOrders',
        'constraints',
      ]) {
        const res = await get(`/api/v5/${kind}?limit=5`);
        expect(res.statusCode, kind).toBe(200);
      }
    });

    it('sees each trip unchanged during a walk exactly once while others write', async () => {
      const base = 100;
      for (let i = 0; i < 20; i++) await put('trips', trip(base + i, { status: 'draft' }));
      const seen = new Map<string, number>();
      let next: string | null = '/api/v5/trips?status=draft&limit=4';
      let step = 0;
      while (next !== null) {
        const page = await getJson(next);
        for (const t of page.items) seen.set(t.id, (seen.get(t.id) ?? 0) + 1);
        next = page.next;
        // Between pages: change a trip already seen and one not yet seen, and add a new one.
        await put('trips', trip(base + step, { status: 'draft', name: `changed ${step}` }));
        await put('trips', trip(base + 19 - step, { status: 'draft', name: `changed again ${step}` }));
        await put('trips', trip(base + 50 + step, { status: 'draft' }));
        step++;
      }
      const changed = new Set<string>();
      for (let s = 0; s < step; s++) changed.add(tripId(base + s)).add(tripId(base + 19 - s));
      for (let i = 0; i < 20; i++) {
        const id = tripId(base + i);
        if (!changed.has(id)) expect(seen.get(id), id).toBe(1);
        else expect(seen.get(id) ?? 0, id).toBeGreaterThanOrEqual(1);
      }
    });
  });

  describe('events, tracks and positions', () => {
    const V = vehicleId(21);
    const W = vehicleId(22);
    beforeAll(async () => {
      await put('vehicles', { id: V, licensePlate: 'TRACK-1' });
      // Out of order on purpose: the track is in event time order.
      for (const i of [3, 1, 4, 0, 2, 5]) await put('events', location(200 + i, V, T0 + i * 60_000, 52 + i / 100, 5 + i / 100));
      await put('events', location(300, W, T0 + 30_000, 48.85, 2.35));
    });

    it('lists events by type, vehicle and event time', async () => {
      const ids = async (q: string) =>
        (
          await eventually(
            () => walk(`/api/v5/events?${q}`),
            (items) => items.length > 0,
          )
        )
          .map((e) => e.id)
          .sort();
      expect(await ids(`eventType=locationUpdateEvent&vehicle=${V}`)).toEqual([0, 1, 2, 3, 4, 5].map((i) => eventId(200 + i)));
      expect(await ids(`vehicle=${V}&from=${iso(T0 + 60_000)}&to=${iso(T0 + 180_000)}`)).toEqual([eventId(201), eventId(202)]);
      expect(await ids(`vehicle=${W}&lifecycle=actual`)).toEqual([eventId(300)]);
    });

    it('finds the events of a vehicle whose id is not a UUID under its storage key, as GET finds the vehicle', async () => {
      const U = vehicleId(23);
      const inline = (i: number, id: string, t: number) => ({
        ...location(i, U, t, 50 + i / 1000, 4),
        vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id } },
      });
      // A URI that ends in the vehicle's UUID, and the UUID itself; a name (found under its name-based UUID).
      await put('events', inline(400, `https://fleet.example/vehicles/${U.toUpperCase()}`, T0 + 10_000));
      await put('events', location(401, U, T0 + 20_000, 50.2, 4.2));
      await put('events', inline(402, 'Truck 7', T0 + 30_000));
      const listed = async (vehicle: string, n: number) =>
        (
          await eventually(
            () => walk(`/api/v5/events?vehicle=${encodeURIComponent(vehicle)}`),
            (items) => items.length >= n,
          )
        ).map((e) => e.id);
      expect(await listed(U, 2)).toEqual([eventId(400), eventId(401)]);
      expect(await listed('Truck 7', 1)).toEqual([eventId(402)]);
      expect(await listed('truck 7', 0)).toEqual([]); // another name, another vehicle
      // The vehicle held inline is stored under the same key: its events are found where it is.
      const truck = await eventually(
        () => get(`/api/v5/vehicles/${storageKey('Truck 7')}`),
        (r) => r.statusCode === 200,
      );
      expect(truck.json()).toMatchObject({ id: 'Truck 7' });
      const track = await eventually(
        () => getJson(`/api/v5/vehicles/${U}/track?from=${iso(T0)}&to=${iso(T0 + 60_000)}`),
        (t) => t.items.length >= 2,
      );
      expect(track.items.map((e) => e.id)).toEqual([eventId(400), eventId(401)]);
      expect(
        (await getJson(`/api/v5/vehicles/${storageKey('Truck 7')}/track?from=${iso(T0)}&to=${iso(T0 + 60_000)}`)).items.map((e) => e.id),
      ).toEqual([eventId(402)]);
    });

    it('gives the track as JSON pages in event time order', async () => {
      const url = `/api/v5/vehicles/${V}/track?from=${iso(T0)}&to=${iso(T0 + 3_600_000)}`;
      const all = await getJson(url);
      expect(all.items.map((e) => e.id)).toEqual([0, 1, 2, 3, 4, 5].map((i) => eventId(200 + i)));
      expect(all.next).toBeNull();
      const first = await getJson(`${url}&limit=4`);
      expect(first.items.map((e) => e.id)).toEqual([0, 1, 2, 3].map((i) => eventId(200 + i)));
      const second = await getJson(first.next!);
      expect(second.items.map((e) => e.id)).toEqual([eventId(204), eventId(205)]);
    });

    it('gives the track as GeoJSON, GPX, CSV and NDJSON that independent parsers read', async () => {
      const base = `/api/v5/vehicles/${V}/track?from=${iso(T0)}&to=${iso(T0 + 3_600_000)}&format=`;
      const geo = await get(`${base}geojson`);
      expect(geo.statusCode).toBe(200);
      expect(geo.headers['content-type']).toMatch(/^application\/geo\+json/);
      const fc = checkGeoJson(geo.body) as any;
      const line = fc.features.find((f: any) => f.geometry.type === 'LineString');
      expect(line.geometry.coordinates[0]).toEqual([5, 52]);
      expect(fc.features.filter((f: any) => f.geometry.type === 'Point')).toHaveLength(6);

      const gpx = await get(`${base}gpx`);
      expect(XMLValidator.validate(gpx.body)).toBe(true);
      const doc = new XMLParser({ ignoreAttributes: false }).parse(gpx.body);
      const points = doc.gpx.trk.trkseg.trkpt;
      expect(points).toHaveLength(6);
      expect(Number(points[5]['@_lat'])).toBeCloseTo(52.05);
      expect(points[0].time).toBe(iso(T0));

      const csv = await get(`${base}csv`);
      const rows = parseCsv<Record<string, string>>(csv.body, { columns: true });
      expect(rows.map((r) => r.event_id)).toEqual([0, 1, 2, 3, 4, 5].map((i) => eventId(200 + i)));
      expect(Number(rows[2]!.lon)).toBeCloseTo(5.02);

      const nd = await get(`${base}ndjson`);
      const lines = nd.body
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(lines.map((e) => e.id)).toEqual([0, 1, 2, 3, 4, 5].map((i) => eventId(200 + i)));
    });

    it('caps the track window and checks its parameters', async () => {
      const long = await get(`/api/v5/vehicles/${V}/track?from=${iso(T0 - 40 * 86_400_000)}&to=${iso(T0)}`);
      expect(long.statusCode).toBe(400);
      expect(long.json()).toEqual([expect.objectContaining({ field: 'to' })]);
      expect((await get(`/api/v5/vehicles/${V}/track?format=kml`)).json()).toEqual([expect.objectContaining({ field: 'format' })]);
      expect((await get(`/api/v5/vehicles/not-a-uuid/track`)).statusCode).toBe(400);
      const other = await getJson(`/api/v5/vehicles/${V}/track?from=${iso(T0)}&to=${iso(T0 + 3_600_000)}`, 'writer-token-globex');
      expect(other.items).toEqual([]);
    });

    it('keeps the latest position of each vehicle, filtered by bbox and staleAfter', async () => {
      const page = await eventually(
        () => getJson('/api/v5/vehicles/positions'),
        (p) => p.items.length >= 2,
      );
      const byVehicle = new Map(page.items.map((p) => [p.vehicle, p]));
      expect(byVehicle.get(V)).toMatchObject({ eventId: eventId(205), lat: 52.05, lon: 5.05, time: iso(T0 + 5 * 60_000), speedKmh: 50 });
      expect(byVehicle.get(W)).toMatchObject({ eventId: eventId(300) });
      // An older fix does not move it back.
      await put('events', location(206, V, T0 - 60_000, 10, 10));
      const paris = await getJson('/api/v5/vehicles/positions?bbox=2,48,3,49');
      expect(paris.items.map((p) => p.vehicle)).toEqual([W]);
      expect((await getJson('/api/v5/vehicles/positions?staleAfter=1h')).items).toEqual([]);
      expect((await get('/api/v5/vehicles/positions?bbox=1,2,3')).statusCode).toBe(400);
      expect((await getJson('/api/v5/vehicles/positions', 'writer-token-globex')).items).toEqual([]);
      expect((await getJson('/api/v5/vehicles/positions')).items.find((p) => p.vehicle === V)).toMatchObject({ eventId: eventId(205) });
    });
  });

  describe('change feed', () => {
    it('gives every put and delete in order, resumable from its cursor', async () => {
      const start = await getJson('/api/v5/changes?limit=1000&kinds=locations');
      await put('locations', {
        id: uuid('7e000000', 1),
        name: 'depot',
        geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
      });
      await put('locations', {
        id: uuid('7e000000', 1),
        name: 'depot 2',
        geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
      });
      await del('locations', uuid('7e000000', 1));
      const page = await eventually(
        () => getJson(start.next!),
        (p) => p.items.length >= 3,
      );
      expect(page.items.map((c) => [c.op, c.kind, c.id])).toEqual([
        ['put', 'locations', uuid('7e000000', 1)],
        ['put', 'locations', uuid('7e000000', 1)],
        ['delete', 'locations', uuid('7e000000', 1)],
      ]);
      expect(page.items[0].cursor).toEqual(expect.any(String));
      // Resuming after the first change gives the rest.
      const resumed = await getJson(`/api/v5/changes?kinds=locations&cursor=${encodeURIComponent(page.items[0].cursor)}`);
      expect(resumed.items.map((c) => c.op)).toEqual(['put', 'delete']);
      // At the end, next is where to ask again.
      const tail = await getJson(page.next!);
      expect(tail.items).toEqual([]);
      expect(tail.next).toEqual(expect.any(String));
    });

    it('carries documents and lifecycles, and covers telemetry events', async () => {
      const all = await walk('/api/v5/changes?limit=500');
      const trip = all.find((c) => c.kind === 'trips' && c.op === 'put');
      expect(trip.document.id).toEqual(trip.id);
      const loc = await eventually(
        () => walk('/api/v5/changes?kinds=events&limit=500'),
        (items) => items.some((c) => c.id === eventId(300)),
      );
      const ev = loc.find((c) => c.id === eventId(300));
      expect(ev).toMatchObject({ op: 'put', kind: 'events', lifecycle: 'actual' });
      expect(ev.document.eventType).toBe('locationUpdateEvent');
    });

    it('is the tenant own, and checks its parameters', async () => {
      expect((await getJson('/api/v5/changes', 'writer-token-globex')).items).toEqual([]);
      expect((await get('/api/v5/changes?kinds=trips,ships')).json()).toEqual([expect.objectContaining({ field: 'kinds' })]);
      expect((await get('/api/v5/changes?cursor=nonsense')).json()).toEqual([expect.objectContaining({ field: 'cursor' })]);
      expect((await get('/api/v5/changes?limit=5000')).json()).toEqual([expect.objectContaining({ field: 'limit' })]);
    });
  });
});
