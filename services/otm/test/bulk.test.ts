import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, startService, type TestService } from './helpers.js';

const location = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `5b000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  geoReference: { type: 'latLonPointGeoReference', lat: 52 + i / 1000, lon: 5 },
});

// The same suite with bodies checked on the event loop and on a worker thread (every body, however
// small): both must answer the same. A thread runs the compiled module (`npm test` builds first).
describe.each([
  { where: 'on the event loop', bulkThreads: 0 },
  { where: 'on a worker thread', bulkThreads: 1, bulkThreadMinBytes: 0 },
])('POST /api/v5/bulk/<kind>, bodies checked $where', (mode) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(mode);
  });
  afterAll(async () => svc.close());
  const post = (url: string, payload: string | Buffer, type = 'application/json') =>
    svc.app.inject({ method: 'POST', url, headers: { ...auth(), 'content-type': type }, payload });
  const get = (url: string) => svc.app.inject({ method: 'GET', url, headers: auth() });

  it('takes a JSON array: each valid item stored, each invalid one reported by index', async () => {
    const bad = { ...location(2), geoReference: { type: 'latLonPointGeoReference', lat: 'north', lon: 5 } };
    const res = await post('/api/v5/bulk/events', JSON.stringify([location(1), bad, { ...location(3), id: undefined }]));
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.accepted).toBe(2);
    expect(body.rejected).toBe(1);
    expect(body.items[0]).toEqual({ index: 0, id: location(1).id });
    expect(body.items[1]).toEqual({ index: 1, errors: [expect.objectContaining({ type: 'invalidField', field: 'geoReference.lat' })] });
    expect(body.items[2].id).toMatch(/^[0-9a-f-]{36}$/);
    expect((await get(`/api/v5/events/${location(1).id}`)).json()).toEqual(location(1));
    expect((await get(`/api/v5/events/${location(2).id}`)).statusCode).toBe(404);
    expect((await get(`/api/v5/events/${body.items[2].id}`)).statusCode).toBe(200);
  });

  it('takes NDJSON, reporting a line that is not JSON', async () => {
    const text = `${JSON.stringify(location(10))}\n{"eventType":\n\n${JSON.stringify(location(11))}\n`;
    const res = await post('/api/v5/bulk/events', text, 'application/x-ndjson');
    expect(res.statusCode).toBe(200);
    expect(res.json().items).toEqual([
      { index: 0, id: location(10).id },
      { index: 1, errors: [expect.objectContaining({ type: 'invalidJson' })] },
      { index: 2, id: location(11).id },
    ]);
    expect((await get(`/api/v5/events/${location(11).id}`)).statusCode).toBe(200);
  });

  it('with atomic=true accepts all or nothing', async () => {
    const res = await post('/api/v5/bulk/events?atomic=true', JSON.stringify([location(20), { eventType: 'locationUpdateEvent' }]));
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ accepted: 0, rejected: 2 });
    expect((await get(`/api/v5/events/${location(20).id}`)).statusCode).toBe(404);
  });

  it('applies the model semantics to entity kinds too', async () => {
    const tid = '5c000000-0000-4000-8000-000000000001';
    const vid = '5c000000-0000-4000-8000-000000000002';
    const res = await post(
      '/api/v5/bulk/trips',
      JSON.stringify([{ entityType: 'trip', id: tid, vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id: vid } } }]),
    );
    expect(res.json().accepted).toBe(1);
    expect((await get(`/api/v5/vehicles/${vid}`)).statusCode).toBe(200);
  });

  it('refuses a body that is neither an array nor NDJSON, and too many items', async () => {
    expect((await post('/api/v5/bulk/events', JSON.stringify(location(1)))).statusCode).toBe(400);
    const many = JSON.stringify(Array.from({ length: 10_001 }, () => ({})));
    const res = await post('/api/v5/bulk/events', many);
    expect(res.statusCode).toBe(413);
    expect(res.json()[0].type).toBe('payloadTooLarge');
    expect((await post('/api/v5/bulk/spaceships', '[]')).statusCode).toBe(404);
    const readOnly = await svc.app.inject({
      method: 'POST',
      url: '/api/v5/bulk/events',
      headers: { authorization: 'Bearer reader-token-acme', 'content-type': 'application/json' },
      payload: '[]',
    });
    expect(readOnly.statusCode).toBe(403);
  });

  it('stores each event as the text it was checked as, with a generated id where it had none', async () => {
    const withoutId = ({ id: _, ...rest }: Record<string, unknown>) => rest;
    const docs: Array<Record<string, unknown>> = Array.from({ length: 300 }, (_, i) =>
      i % 2 === 0 ? location(1000 + i) : withoutId(location(1000 + i)),
    );
    const res = await post('/api/v5/bulk/events', JSON.stringify(docs));
    expect(res.json()).toMatchObject({ accepted: 300, rejected: 0 });
    const items = res.json().items as Array<{ index: number; id: string }>;
    expect(new Set(items.map((i) => i.id)).size).toBe(300);
    for (const i of [0, 1, 150, 299]) {
      const got = await get(`/api/v5/events/${items[i]!.id}`);
      expect(got.statusCode).toBe(200);
      // The answer is the stored text: the id first when it was generated, as a single PUT stores it.
      expect(got.body).toBe(JSON.stringify(docs[i]!.id === undefined ? { id: items[i]!.id, ...docs[i] } : docs[i]));
    }
  });

  it('stores a compact event as the bytes it was sent as; one with whitespace or a repeated name encoded again', async () => {
    const id = (i: number) => `5b000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    const compact = `{"eventType":"locationUpdateEvent","id":"${id(2001)}","lifecycle":"actual","geoReference":{"type":"latLonPointGeoReference","lat":52.4000,"lon":5.10},"externalAttributes":{"note":"\\u00e9 \\/"}}`;
    const spaced = `{ "eventType": "locationUpdateEvent", "id": "${id(2002)}", "geoReference": { "type": "latLonPointGeoReference", "lat": 52.4000, "lon": 5 } }`;
    const repeated = `{"eventType":"locationUpdateEvent","id":"${id(2003)}","lifecycle":"planned","lifecycle":"actual","geoReference":{"type":"latLonPointGeoReference","lat":52,"lon":5}}`;
    for (const [type, body] of [
      ['application/json', `[${compact},${spaced},${repeated}]`],
      ['application/x-ndjson', `${compact}\n${spaced}\n${repeated}\n`],
    ] as const) {
      const res = await post('/api/v5/bulk/events', Buffer.from(body), type);
      expect(res.json(), res.body).toMatchObject({ accepted: 3, rejected: 0 });
      expect((await get(`/api/v5/events/${id(2001)}`)).body).toBe(compact);
      expect((await get(`/api/v5/events/${id(2002)}`)).body).toBe(JSON.stringify(JSON.parse(spaced)));
      const last = await get(`/api/v5/events/${id(2003)}`);
      expect(last.body).toBe(JSON.stringify(JSON.parse(repeated)));
      expect(last.json().lifecycle).toBe('actual');
    }
  });

  it('keeps entities held inline by an event, and checks association events against stored state', async () => {
    const vid = '5d000000-0000-4000-8000-000000000001';
    const sid = '5d000000-0000-4000-8000-000000000002';
    const tid = '5d000000-0000-4000-8000-000000000003';
    const withVehicle = {
      ...location(40),
      vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id: vid, licensePlate: 'BULK-1' } },
    };
    expect((await post('/api/v5/bulk/sensors', JSON.stringify([{ entityType: 'sensor', id: sid }]))).json().accepted).toBe(1);
    expect((await post('/api/v5/bulk/trips', JSON.stringify([{ entityType: 'trip', id: tid }]))).json().accepted).toBe(1);
    const ref = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
    const noHolder = {
      eventType: 'associationCreatedEvent',
      id: '5d000000-0000-4000-8000-000000000004',
      lifecycle: 'actual',
      entity1: ref('sensor', sid),
      entity2: ref('trip', tid),
    };
    const res = await post('/api/v5/bulk/events', JSON.stringify([withVehicle, noHolder, location(41)]));
    expect(res.json().items).toEqual([
      { index: 0, id: location(40).id },
      { index: 1, errors: [expect.objectContaining({ type: 'invalidField', field: 'entity2' })] },
      { index: 2, id: location(41).id },
    ]);
    expect((await get(`/api/v5/vehicles/${vid}`)).json()).toEqual({ entityType: 'vehicle', id: vid, licensePlate: 'BULK-1' });
    expect((await get(`/api/v5/events/${location(40).id}`)).json()).toEqual(withVehicle);
    expect((await get(`/api/v5/events/${noHolder.id}`)).statusCode).toBe(404);
  });

  it("lists, tracks and positions a bulk request's location events as single PUTs would be", async () => {
    const vehicle = `7c000000-0000-4000-8000-00000000000${mode.bulkThreads}`;
    const T0 = Date.UTC(2026, 2, 1, 6);
    const fix = (i: number) => ({
      ...location(500 + 10 * mode.bulkThreads + i),
      creationDate: new Date(T0 + i * 60_000).toISOString(),
      vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicle.toUpperCase() },
      geoReference: {
        type: 'latLonPointGeoReference',
        lat: 52 + i / 100,
        lon: 5,
        speed: { value: 10, unit: 'm/s' },
        heading: { value: 90, unit: 'deg' },
      },
    });
    // Out of event time order, and one event of the vehicle that is no track point.
    const engine = {
      eventType: 'startEngineEvent',
      id: `5c000000-0000-4000-8000-00000000000${mode.bulkThreads}`,
      creationDate: new Date(T0 - 1).toISOString(),
      vehicle: fix(0).vehicle,
      geoReference: { type: 'latLonPointGeoReference', lat: 51, lon: 4 },
    };
    const res = await post('/api/v5/bulk/events', JSON.stringify([fix(2), fix(0), engine, fix(1)]));
    expect(res.json()).toMatchObject({ accepted: 4, rejected: 0 });
    const window = `from=${new Date(T0 - 60_000).toISOString()}&to=${new Date(T0 + 3_600_000).toISOString()}`;
    const track = (await get(`/api/v5/vehicles/${vehicle}/track?${window}&format=ndjson`)).body
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(track.map((e) => e.id)).toEqual([fix(0).id, fix(1).id, fix(2).id]);
    const listed = (await get(`/api/v5/events?vehicle=${vehicle}`)).json();
    expect(listed.items.map((e: { id: string }) => e.id)).toEqual([engine.id, fix(0).id, fix(1).id, fix(2).id]);
    const position = (await get('/api/v5/vehicles/positions')).json().items.find((p: { vehicle: string }) => p.vehicle === vehicle);
    expect(position).toMatchObject({ eventId: fix(2).id, lat: 52.02, lon: 5, speedKmh: 36, heading: 90, time: fix(2).creationDate });
  });

  it('answers 415 to a body that is neither JSON nor NDJSON', async () => {
    const res = await post('/api/v5/bulk/events', JSON.stringify([location(60)]), 'text/plain');
    expect(res.statusCode).toBe(415);
    expect(res.json()[0].type).toBe('unsupportedMediaType');
    expect((await get(`/api/v5/events/${location(60).id}`)).statusCode).toBe(404);
  });

  it('refuses an empty body, a body that is not UTF-8, and one nested too deep, storing nothing', async () => {
    const empty = await post('/api/v5/bulk/events', '');
    expect(empty.statusCode).toBe(400);
    expect(empty.json()[0].type).toBe('invalidJson');
    const notUtf8 = Buffer.concat([Buffer.from(`[${JSON.stringify(location(50))},{"id":"`), Buffer.from([0xff, 0xfe]), Buffer.from('"}]')]);
    const bad = await post('/api/v5/bulk/events', notUtf8);
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual([expect.objectContaining({ type: 'invalidJson', message: expect.stringContaining('UTF-8') })]);
    expect((await get(`/api/v5/events/${location(50).id}`)).statusCode).toBe(404);
    let deep: unknown = 1;
    for (let i = 0; i < 70; i++) deep = [deep];
    const tooDeep = await post('/api/v5/bulk/events', JSON.stringify([location(51), deep]));
    expect(tooDeep.statusCode).toBe(400);
    expect((await get(`/api/v5/events/${location(51).id}`)).statusCode).toBe(404);
    // In NDJSON the line that nests too deep is refused on its own.
    const lines = `${JSON.stringify(location(52))}\n${JSON.stringify(deep)}\n`;
    expect((await post('/api/v5/bulk/events', lines, 'application/x-ndjson')).json().items).toEqual([
      { index: 0, id: location(52).id },
      { index: 1, errors: [expect.objectContaining({ type: 'invalidJson', message: expect.stringContaining('deeper') })] },
    ]);
  });
});
