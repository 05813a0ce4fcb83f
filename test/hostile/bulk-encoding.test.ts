/**
 * How a bulk body may be sent (`POST /api/v5/bulk/<kind>`): JSON or NDJSON in UTF-8, the charset
 * named or not; as it is or gzip-compressed, the bulk limit applying to the decompressed body, so
 * that a compression bomb is refused without being inflated to its end. Other charsets and other
 * content codings: 415 in the model's error format. Run with bodies checked on the event loop and
 * on a worker thread (the thread runs the compiled module: build first).
 */
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, startService, type TestService } from '../../services/otm/test/helpers.js';

const BULK_LIMIT = 16_777_216;

const location = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `7b000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
});

describe.each([
  { where: 'on the event loop', bulkThreads: 0 },
  { where: 'on a worker thread', bulkThreads: 1, bulkThreadMinBytes: 0 },
])('bulk bodies: charsets and content codings, checked $where', (mode) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(mode);
  });
  afterAll(async () => svc.close());
  const post = (payload: string | Buffer, headers: Record<string, string>, url = '/api/v5/bulk/events') =>
    svc.app.inject({ method: 'POST', url, headers: { ...auth(), ...headers }, payload });
  const get = (url: string) => svc.app.inject({ method: 'GET', url, headers: auth() });
  const base = mode.bulkThreads * 1000;

  it('takes JSON and NDJSON with charset=utf-8, in any case, quoted or not', async () => {
    let n = base;
    for (const type of [
      'application/json; charset=utf-8',
      'application/json;charset=UTF-8',
      'Application/JSON; Charset="utf-8"',
      'application/json; charset="UTF-8"; foo=bar',
      'application/vnd.otm+json; charset=utf-8',
    ]) {
      const doc = location(++n);
      const res = await post(JSON.stringify([doc]), { 'content-type': type });
      expect(res.statusCode, type).toBe(200);
      expect(res.json(), type).toMatchObject({ accepted: 1 });
      expect((await get(`/api/v5/events/${doc.id}`)).statusCode).toBe(200);
    }
    for (const type of [
      'application/x-ndjson; charset=utf-8',
      'application/x-ndjson; CHARSET="UTF-8"',
      'application/ndjson;charset=utf-8',
    ]) {
      const doc = location(++n);
      const res = await post(`${JSON.stringify(doc)}\n`, { 'content-type': type });
      expect(res.statusCode, type).toBe(200);
      expect(res.json(), type).toMatchObject({ accepted: 1 });
    }
  });

  it('refuses another charset, and a content type that is neither JSON nor NDJSON, with 415 in the model format', async () => {
    const doc = location(base + 50);
    for (const type of [
      'application/json; charset=iso-8859-1',
      'application/json; charset="utf-16"',
      'application/x-ndjson; charset=latin1',
      'application/json; charset=utf-8; charset=us-ascii',
      'text/plain',
      'text/plain; charset=utf-8',
      'application/xml',
    ]) {
      const res = await post(JSON.stringify([doc]), { 'content-type': type });
      expect(res.statusCode, type).toBe(415);
      expect(res.json(), type).toEqual([{ type: 'unsupportedMediaType', message: expect.any(String) }]);
    }
    const none = await svc.app.inject({ method: 'POST', url: '/api/v5/bulk/events', headers: auth(), payload: JSON.stringify([doc]) });
    expect(none.statusCode).toBe(415);
    expect((await get(`/api/v5/events/${doc.id}`)).statusCode).toBe(404);
  });

  it('takes a gzip-compressed JSON or NDJSON body', async () => {
    const a = location(base + 100);
    const b = location(base + 101);
    const json = await post(zlib.gzipSync(JSON.stringify([a])), { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(json.statusCode, json.body).toBe(200);
    expect(json.json()).toEqual({ accepted: 1, rejected: 0, items: [{ index: 0, id: a.id }] });
    const ndjson = await post(zlib.gzipSync(`${JSON.stringify(b)}\n`), {
      'content-type': 'application/x-ndjson; charset=utf-8',
      'content-encoding': 'GZIP',
    });
    expect(ndjson.statusCode, ndjson.body).toBe(200);
    expect(ndjson.json()).toMatchObject({ accepted: 1 });
    // Stored as the text that was compressed.
    expect((await get(`/api/v5/events/${a.id}`)).body).toBe(JSON.stringify(a));
    expect((await get(`/api/v5/events/${b.id}`)).body).toBe(JSON.stringify(b));
    const identity = await post(JSON.stringify([location(base + 102)]), {
      'content-type': 'application/json',
      'content-encoding': 'identity',
    });
    expect(identity.statusCode).toBe(200);
  });

  it('refuses a compression bomb with 413 naming the bulk limit, without inflating it to its end', async () => {
    const bomb = zlib.gzipSync(Buffer.alloc(100 * 1_048_576, 0x20), { level: 9 });
    expect(bomb.length).toBeLessThan(BULK_LIMIT / 16);
    const res = await post(bomb, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(res.statusCode).toBe(413);
    expect(res.json()).toEqual([{ type: 'payloadTooLarge', message: expect.stringContaining(String(BULK_LIMIT)) }]);
    // The same bomb with its checksum broken: inflated to its end it would be a corrupt body (400);
    // inflation that stops at the limit never reaches the checksum.
    const broken = Buffer.from(bomb);
    broken[broken.length - 6]! ^= 0xff;
    expect(() => zlib.gunzipSync(broken)).toThrow(/check/);
    const stopped = await post(broken, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(stopped.statusCode).toBe(413);
    // Exactly the limit decompressed is not over it.
    const atLimit = zlib.gzipSync(Buffer.concat([Buffer.from('[]'), Buffer.alloc(BULK_LIMIT - 2, 0x20)]));
    expect((await post(atLimit, { 'content-type': 'application/json', 'content-encoding': 'gzip' })).statusCode).toBe(200);
  });

  it('refuses a corrupt or truncated gzip body with 400, and invalid UTF-8 inside gzip with 400', async () => {
    const good = zlib.gzipSync(JSON.stringify([location(base + 200)]));
    for (const body of [
      Buffer.from('not gzip at all'),
      good.subarray(0, good.length - 10),
      Buffer.alloc(0),
      Buffer.concat([good, Buffer.from('trailing')]),
    ]) {
      const res = await post(body, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual([{ type: 'invalidJson', message: expect.stringContaining('gzip') }]);
    }
    const notUtf8 = zlib.gzipSync(
      Buffer.concat([Buffer.from(`[${JSON.stringify(location(base + 201))},{"id":"`), Buffer.from([0xff, 0xfe]), Buffer.from('"}]')]),
    );
    const res = await post(notUtf8, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual([expect.objectContaining({ type: 'invalidJson', message: expect.stringContaining('UTF-8') })]);
    expect((await get(`/api/v5/events/${location(base + 201).id}`)).statusCode).toBe(404);
  });

  it('refuses other content codings with 415 in the model format', async () => {
    const doc = location(base + 300);
    for (const encoding of ['br', 'deflate', 'compress', 'zstd', 'x-unknown', 'gzip, br', 'gzip, gzip']) {
      const res = await post(JSON.stringify([doc]), { 'content-type': 'application/json', 'content-encoding': encoding });
      expect(res.statusCode, encoding).toBe(415);
      expect(res.json(), encoding).toEqual([{ type: 'unsupportedMediaType', message: expect.any(String) }]);
    }
    expect((await get(`/api/v5/events/${doc.id}`)).statusCode).toBe(404);
  });
});
