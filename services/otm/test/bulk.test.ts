import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, startService, type TestService } from './helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc.close());

const location = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `5b000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  geoReference: { type: 'latLonPointGeoReference', lat: 52 + i / 1000, lon: 5 },
});
const post = (url: string, payload: string, type = 'application/json') =>
  svc.app.inject({ method: 'POST', url, headers: { ...auth(), 'content-type': type }, payload });
const get = (url: string) => svc.app.inject({ method: 'GET', url, headers: auth() });

describe('POST /api/v5/bulk/<kind>', () => {
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
    const res = await post('/api/v5/bulk/trips', JSON.stringify([{ entityType: 'trip', id: tid, vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id: vid } } }]));
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
    const readOnly = await svc.app.inject({ method: 'POST', url: '/api/v5/bulk/events', headers: { authorization: 'Bearer reader-token-acme', 'content-type': 'application/json' }, payload: '[]' });
    expect(readOnly.statusCode).toBe(403);
  });
});
