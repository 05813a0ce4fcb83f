import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KINDS } from '@otm/model';
import { auth, json, startService, type TestService } from './helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService({ bodyLimit: 64 * 1024, maxDepth: 64 });
});
afterAll(async () => svc.close());

const put = (kind: string, body: unknown, headers: Record<string, string> = auth()) =>
  svc.app.inject({
    method: 'PUT',
    url: `/api/v5/${kind}`,
    headers: { ...json, ...headers },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
const get = (url: string, headers: Record<string, string> = auth()) => svc.app.inject({ method: 'GET', url, headers });
const del = (url: string, headers: Record<string, string> = auth()) => svc.app.inject({ method: 'DELETE', url, headers });

const vehicle = { entityType: 'vehicle', name: 'Bob', licensePlate: 'AB-12-CD' };

describe('PUT, GET and DELETE', () => {
  it('generates an id, answers the stored entity, and finds it again', async () => {
    const res = await put('vehicles', vehicle);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.id).toMatch(/^[0-9a-f-]{36}$/);
    expect({ ...body, id: undefined }).toEqual({ ...vehicle, id: undefined });
    expect(res.headers.location).toBe(`/api/v5/vehicles/${body.id}`);
    const got = await get(`/api/v5/vehicles/${body.id}`);
    expect(got.statusCode).toBe(200);
    expect(got.headers['content-type']).toMatch(/^application\/json/);
    expect(got.json()).toEqual(body);
  });

  it('answers a GET with the bytes of the PUT answer, any characters included', async () => {
    const name = 'Zoë Ōsaka 運送 🚚 "quoted" back\\slash\ttab\nline \u2028 \u0000 ¬';
    const res = await put('vehicles', { ...vehicle, name, externalAttributes: { note: 'ÿ\u00ff\ud83d\ude9a' } });
    expect(res.statusCode).toBe(200);
    const got = await get(`/api/v5/vehicles/${res.json().id}`);
    expect(got.statusCode).toBe(200);
    expect(got.rawPayload.equals(res.rawPayload)).toBe(true);
    expect(Number(got.headers['content-length'])).toBe(res.rawPayload.length);
    expect(got.json().name).toBe(name);
    // The same for a version asked for by its lifecycle.
    const location = { associationType: 'reference', uuid: '11c11d75-e114-4b5f-9751-b3a4afa23ecf', entityType: 'location' };
    const planned = await put('actions', { actionType: 'stop', lifecycle: 'planned', remark: name, location });
    expect(planned.statusCode).toBe(200);
    const byLifecycle = await get(`/api/v5/actions/${planned.json().id}?lifecycle=planned`);
    expect(byLifecycle.rawPayload.equals(planned.rawPayload)).toBe(true);
  });

  it('stores and answers a plain telemetry event as the bytes it was sent as, anything else as re-encoded', async () => {
    const id = (i: number) => `5d000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    const loc = (i: number, more = '') =>
      `{"eventType":"locationUpdateEvent","id":"${id(i)}","lifecycle":"actual","geoReference":{"type":"latLonPointGeoReference","lat":52.4000,"lon":5.10}${more}}`;
    const same = async (sent: string, want: string, path: string) => {
      const res = await put(path.split('/')[3]!, sent);
      expect(res.statusCode, res.body).toBe(200);
      expect(res.body).toBe(want);
      expect((await get(path)).body).toBe(want);
    };
    // Plain: kept, escapes and trailing zeros included; whitespace around the document dropped.
    const plain = loc(1, ',"externalAttributes":{"note":"\\u00e9 \\/"}');
    await same(plain, plain, `/api/v5/events/${id(1)}`);
    await same(`\n  ${loc(2)}\r\n`, loc(2), `/api/v5/events/${id(2)}`);
    // Not plain: whitespace inside, a repeated name, no id: as JSON.stringify makes it.
    const spaced = loc(3).replace('"lifecycle":', '"lifecycle": ');
    await same(spaced, JSON.stringify(JSON.parse(spaced)), `/api/v5/events/${id(3)}`);
    const repeated = loc(4).replace('"lifecycle":"actual"', '"lifecycle":"planned","lifecycle":"actual"');
    await same(repeated, JSON.stringify(JSON.parse(repeated)), `/api/v5/events/${id(4)}`);
    const noId = await put('events', loc(5).replace(`"id":"${id(5)}",`, ''));
    expect(noId.json().id).toMatch(/^[0-9a-f-]{36}$/);
    expect(noId.body).toBe(JSON.stringify({ id: noId.json().id, ...JSON.parse(loc(5).replace(`"id":"${id(5)}",`, '')) }));
    // Not telemetry: re-encoded, however plain.
    const v = `{"entityType":"vehicle","id":"${id(6)}","externalAttributes":{"n":1.50}}`;
    await same(v, JSON.stringify(JSON.parse(v)), `/api/v5/vehicles/${id(6)}`);
  });

  it('keeps a client id as sent and finds it case-insensitively', async () => {
    const id = 'B9BB914D-845E-46F2-91FF-31FA4BAC2FBE';
    expect((await put('vehicles', { ...vehicle, id })).json().id).toBe(id);
    expect((await get(`/api/v5/vehicles/${id.toLowerCase()}`)).json().id).toBe(id);
  });

  it('finds an entity with a URI id under the UUID it ends with, or its name-based UUID', async () => {
    const res = await put('vehicles', { ...vehicle, id: 'https://fleet.example/vehicles/0f9e6a4c-3b1d-4a43-9f7e-2c1d5b6a7e80' });
    expect(res.headers.location).toBe('/api/v5/vehicles/0f9e6a4c-3b1d-4a43-9f7e-2c1d5b6a7e80');
    const named = await put('vehicles', { ...vehicle, id: 'truck-17' });
    const location = named.headers.location as string;
    expect((await get(location)).json().id).toBe('truck-17');
  });

  it('replaces an entity put again with the same id', async () => {
    const id = '0b0c8e8a-1a5e-4c59-9a57-0a7a3e1f2d11';
    await put('vehicles', { ...vehicle, id });
    await put('vehicles', { ...vehicle, id, name: 'Renamed' });
    expect((await get(`/api/v5/vehicles/${id}`)).json().name).toBe('Renamed');
  });

  it('deletes with 204, then answers 404', async () => {
    const { id } = (await put('vehicles', vehicle)).json();
    const d = await del(`/api/v5/vehicles/${id}`);
    expect(d.statusCode).toBe(204);
    expect(d.body).toBe('');
    const g = await get(`/api/v5/vehicles/${id}`);
    expect(g.statusCode).toBe(404);
    expect(g.json()).toEqual([{ type: 'notFound', message: expect.stringContaining(id) }]);
    expect((await del(`/api/v5/vehicles/${id}`)).statusCode).toBe(404);
  });

  it('takes a DELETE or GET sent with a JSON content type and no body', async () => {
    const { id } = (await put('vehicles', vehicle)).json();
    expect((await get(`/api/v5/vehicles/${id}`, { ...auth(), ...json })).statusCode).toBe(200);
    expect((await del(`/api/v5/vehicles/${id}`, { ...auth(), ...json })).statusCode).toBe(204);
  });

  it('keeps kinds apart: a vehicle is not a trip', async () => {
    const { id } = (await put('vehicles', vehicle)).json();
    expect((await get(`/api/v5/trips/${id}`)).statusCode).toBe(404);
  });

  it.each(KINDS.map((k) => k.segment))('answers 404 for an unknown %s and 400 for a malformed UUID', async (kind) => {
    expect((await get(`/api/v5/${kind}/6f1c1a52-8f6e-4a0e-bb4e-000000000000`)).statusCode).toBe(404);
    const bad = await get(`/api/v5/${kind}/not-a-uuid`);
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual([{ type: 'invalidField', field: 'UUID', message: expect.any(String) }]);
    expect((await del(`/api/v5/${kind}/not-a-uuid`)).statusCode).toBe(400);
  });
});

describe('lifecycles', () => {
  const id = '3f0a3c38-8f0e-4a4b-8d33-6f0d2b9f1e55';
  const stop = (lifecycle: string, remark: string) => ({
    id,
    actionType: 'stop',
    lifecycle,
    remark,
    location: { associationType: 'reference', uuid: '11c11d75-e114-4b5f-9751-b3a4afa23ecf', entityType: 'location' },
  });

  it('keeps each lifecycle and answers the latest unless asked', async () => {
    expect((await put('actions', stop('realized', 'done'))).statusCode).toBe(200);
    expect((await put('actions', stop('planned', 'plan'))).statusCode).toBe(200);
    expect((await get(`/api/v5/actions/${id}`)).json().lifecycle).toBe('realized');
    expect((await get(`/api/v5/actions/${id}?lifecycle=planned`)).json().remark).toBe('plan');
    expect((await get(`/api/v5/actions/${id}?lifecycle=actual`)).statusCode).toBe(404);
    const bad = await get(`/api/v5/actions/${id}?lifecycle=someday`);
    expect(bad.statusCode).toBe(400);
    expect(bad.json()[0]).toMatchObject({ type: 'invalidField', field: 'lifecycle' });
    expect((await get(`/api/v5/actions/${id}?color=red`)).statusCode).toBe(400);
  });
});

describe('authentication and tenants', () => {
  it('answers 401 with a Bearer challenge without a token or with an unknown one', async () => {
    const variants: Array<Record<string, string>> = [
      {},
      { authorization: 'Bearer nope-nope-nope' },
      { authorization: 'Basic dXNlcjpwYXNz' },
    ];
    for (const headers of variants) {
      const res = await get('/api/v5/vehicles/6f1c1a52-8f6e-4a0e-bb4e-000000000000', headers);
      expect(res.statusCode).toBe(401);
      expect(res.headers['www-authenticate']).toMatch(/^Bearer realm="otm"/);
      expect(res.json()).toEqual([{ type: 'unauthorized', message: expect.any(String) }]);
      expect((await put('vehicles', vehicle, headers)).statusCode).toBe(401);
    }
  });

  it('answers 403 to a write with a read-only token and to a read with a write-only token', async () => {
    const res = await put('vehicles', vehicle, auth('reader-token-acme'));
    expect(res.statusCode).toBe(403);
    expect(res.json()).toEqual([{ type: 'forbidden', message: expect.stringContaining('write') }]);
    const { id } = (await put('vehicles', vehicle)).json();
    expect((await del(`/api/v5/vehicles/${id}`, auth('reader-token-acme'))).statusCode).toBe(403);
    expect((await get(`/api/v5/vehicles/${id}`, auth('reader-token-acme'))).statusCode).toBe(200);
    expect((await get(`/api/v5/vehicles/${id}`, auth('writeonly-token'))).statusCode).toBe(403);
  });

  it("hides one tenant's entities from another", async () => {
    const { id } = (await put('vehicles', vehicle)).json();
    expect((await get(`/api/v5/vehicles/${id}`, auth('writer-token-globex'))).statusCode).toBe(404);
    expect((await del(`/api/v5/vehicles/${id}`, auth('writer-token-globex'))).statusCode).toBe(404);
    // The same id written by the other tenant is a different entity.
    await put('vehicles', { ...vehicle, id, name: 'Globex truck' }, auth('writer-token-globex'));
    expect((await get(`/api/v5/vehicles/${id}`)).json().name).toBe('Bob');
    expect((await get(`/api/v5/vehicles/${id}`, auth('writer-token-globex'))).json().name).toBe('Globex truck');
  });

  it('serves /healthz and /readyz without a token', async () => {
    expect((await get('/healthz', {})).json()).toEqual({ status: 'ok' });
    const ready = await get('/readyz', {});
    expect(ready.statusCode).toBe(200);
    expect(ready.json().status).toBe('ready');
  });
});

describe('bad requests get one clear answer and change nothing', () => {
  it('malformed JSON: 400 invalidJson', async () => {
    const res = await put('vehicles', '{"entityType": "vehicle",');
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual([{ type: 'invalidJson', message: expect.stringContaining('not valid JSON') }]);
  });

  it('empty body: 400 invalidJson', async () => {
    const res = await svc.app.inject({ method: 'PUT', url: '/api/v5/vehicles', headers: { ...json, ...auth() } });
    expect(res.statusCode).toBe(400);
    expect(res.json()[0].type).toBe('invalidJson');
  });

  it('a body that is not JSON: 415', async () => {
    const res = await svc.app.inject({
      method: 'PUT',
      url: '/api/v5/vehicles',
      headers: { 'content-type': 'text/plain', ...auth() },
      payload: 'hello',
    });
    expect(res.statusCode).toBe(415);
    expect(res.json()).toEqual([{ type: 'unsupportedMediaType', message: expect.any(String) }]);
  });

  it('too large: 413', async () => {
    const res = await put('vehicles', { ...vehicle, name: 'x'.repeat(70 * 1024) });
    expect(res.statusCode).toBe(413);
    expect(res.json()).toEqual([{ type: 'payloadTooLarge', message: expect.any(String) }]);
  });

  it('too deep: 400 invalidJson', async () => {
    const deep = '{"entityType":"vehicle","externalAttributes":{"a":' + '['.repeat(100) + ']'.repeat(100) + '}}';
    const res = await put('vehicles', deep);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual([{ type: 'invalidJson', message: expect.stringContaining('deeper than 64') }]);
  });

  it('very deep nesting does not crash the parser', async () => {
    const res = await put('vehicles', '['.repeat(30000) + ']'.repeat(30000));
    expect(res.statusCode).toBe(400);
  });

  it('unknown kinds and paths: 404; wrong methods: 405 with Allow', async () => {
    expect((await put('spaceships', vehicle)).statusCode).toBe(404);
    expect((await get('/api/v4/vehicles/6f1c1a52-8f6e-4a0e-bb4e-000000000000')).statusCode).toBe(404);
    const post = await svc.app.inject({ method: 'POST', url: '/api/v5/vehicles', headers: { ...json, ...auth() }, payload: '{}' });
    expect(post.statusCode).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD, PUT');
    expect(post.json()[0].type).toBe('methodNotAllowed');
    const patch = await svc.app.inject({ method: 'PATCH', url: '/api/v5/vehicles/6f1c1a52-8f6e-4a0e-bb4e-000000000000', headers: auth() });
    expect(patch.statusCode).toBe(405);
    expect(patch.headers.allow).toBe('GET, HEAD, DELETE');
  });

  it('any method a path does not declare (TRACE, PATCH, ...): 405 with the Allow of the path, in the error format', async () => {
    const uuid = '6f1c1a52-8f6e-4a0e-bb4e-000000000000';
    for (const [method, url, allow] of [
      ['TRACE', '/api/v5/vehicles', 'GET, HEAD, PUT'],
      ['OPTIONS', `/api/v5/trips/${uuid}`, 'GET, HEAD, DELETE'],
      ['PATCH', '/api/v5/changes', 'GET, HEAD'],
      ['DELETE', '/api/v5/vehicles/positions', 'GET, HEAD'],
      ['PUT', '/api/v5/bulk/trips', 'POST'],
      ['GET', '/api/v5/stream/tickets', 'POST'],
      ['POST', '/api/v5/stream', 'GET'],
      ['POST', '/healthz', 'GET, HEAD'],
      ['DELETE', '/api/v5/openapi.json', 'GET, HEAD'],
    ] as const) {
      const res = await svc.app.inject({ method, url, headers: auth() });
      expect({ method, url, status: res.statusCode, allow: res.headers.allow }).toEqual({ method, url, status: 405, allow });
      expect(res.json()).toEqual([{ type: 'methodNotAllowed', message: expect.stringContaining(allow) }]);
    }
  });

  it('an entityType that disagrees with the path: 400 at entityType, nothing stored', async () => {
    const id = '7d4c2a1e-5b6f-4c3d-8e9f-0a1b2c3d4e5f';
    const res = await put('trips', { ...vehicle, id });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toContainEqual(expect.objectContaining({ type: 'invalidField', field: 'entityType' }));
    expect((await get(`/api/v5/trips/${id}`)).statusCode).toBe(404);
    expect((await get(`/api/v5/vehicles/${id}`)).statusCode).toBe(404);
  });

  it('an invalid update of a stored entity changes nothing', async () => {
    const { id } = (await put('vehicles', vehicle)).json();
    const res = await put('vehicles', { ...vehicle, id, fuel: 'Diesel' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual([expect.objectContaining({ type: 'invalidField', field: 'fuel' })]);
    expect((await get(`/api/v5/vehicles/${id}`)).json()).toEqual({ ...vehicle, id });
  });

  it('a typo in a member name is reported, with the likely name', async () => {
    const res = await put('vehicles', { entityType: 'vehicle', licencePlate: 'AB-12-CD' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual([
      expect.objectContaining({ type: 'invalidField', field: 'licencePlate', message: expect.stringContaining('licensePlate') }),
    ]);
  });

  it('an empty id: 400', async () => {
    const res = await put('vehicles', { ...vehicle, id: '' });
    expect(res.statusCode).toBe(400);
    expect(res.json()[0]).toMatchObject({ type: 'invalidField', field: 'id' });
  });

  it('__proto__ and constructor keys pollute nothing', async () => {
    const evil = '{"entityType":"vehicle","__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}';
    const res = await put('vehicles', evil);
    expect(res.statusCode).toBe(400);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    // Inside externalAttributes such keys are opaque data, kept as sent.
    const ok = await put('vehicles', '{"entityType":"vehicle","externalAttributes":{"__proto__":{"polluted":true},"constructor":"x"}}');
    expect(ok.statusCode).toBe(200);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const got = await get(`/api/v5/vehicles/${ok.json().id}`);
    expect(got.body).toContain('"__proto__":{"polluted":true}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('externalAttributes hold any JSON, as the model examples do', async () => {
    const res = await put('vehicles', { ...vehicle, externalAttributes: { id: 'OrderId', n: 3, list: [1, 'a'], nested: { x: null } } });
    expect(res.statusCode).toBe(200);
  });
});
