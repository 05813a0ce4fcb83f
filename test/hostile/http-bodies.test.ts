/**
 * What a single PUT's body may be: JSON in UTF-8 only. A charset parameter of UTF-8 (any case,
 * quoted or not) is accepted; another charset, NDJSON, a content coding or a transfer coding
 * other than chunked is refused with the model's error array before the body is read; bytes that
 * are not UTF-8 are a 400, never stored with replacement characters; a leading byte order mark is
 * dropped. The bulk route, which takes NDJSON and gzip, has tests of its own.
 */
import http from 'node:http';
import net from 'node:net';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonMediaType } from '@otm/http';
import { auth, startService, type TestService } from '../../services/otm/test/helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc?.close());

const vehicle = (id: string, name = 'Bob') => JSON.stringify({ id, entityType: 'vehicle', name });
const put = (headers: Record<string, string>, payload: string | Buffer) =>
  svc.app.inject({ method: 'PUT', url: '/api/v5/vehicles', headers: { ...auth(), ...headers }, payload });

describe('content types of a PUT', () => {
  it.each([
    'application/json',
    'application/json; charset=utf-8',
    'application/json;charset=UTF-8',
    'Application/JSON; Charset="utf-8"',
    'application/json;charset="UTF-8"',
    'application/json ; charset=utf8',
    'application/vnd.otm+json; charset=utf-8',
  ])('accepts %s', async (type) => {
    const res = await put({ 'content-type': type }, vehicle('2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c01'));
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ entityType: 'vehicle', name: 'Bob' });
  });

  it.each([
    'application/json; charset=iso-8859-1',
    'application/json; charset="windows-1252"',
    'application/json; charset=utf-16',
    'application/x-ndjson',
    'application/ndjson',
    'text/plain',
    'application/jsonx',
    'nonsense',
  ])('refuses %s with 415', async (type) => {
    const res = await put({ 'content-type': type }, vehicle('2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c02'));
    expect(res.statusCode).toBe(415);
    expect(res.json()).toEqual([{ type: 'unsupportedMediaType', message: expect.any(String) }]);
    expect(res.body).not.toMatch(/FST_|fastify/i);
  });

  it('names the media types in plain words for other routes to reuse', () => {
    expect(jsonMediaType('application/json')).toBe('json');
    expect(jsonMediaType('application/problem+json; charset="UTF-8"')).toBe('json');
    expect(jsonMediaType('application/x-ndjson; charset=utf-8')).toBe('ndjson');
    expect(jsonMediaType('application/ndjson')).toBe('ndjson');
    expect(jsonMediaType('application/json; charset=latin1')).toBe('unsupported-charset');
    expect(jsonMediaType('text/plain')).toBeUndefined();
    expect(jsonMediaType(undefined)).toBeUndefined();
  });
});

describe('the bytes of a PUT', () => {
  it('answers 400 for a body that is not UTF-8, and stores nothing', async () => {
    const id = '2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c03';
    const bytes = Buffer.concat([
      Buffer.from(`{"id":"${id}","entityType":"vehicle","name":"B`),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('b"}'),
    ]);
    const res = await put({ 'content-type': 'application/json' }, bytes);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual([{ type: 'invalidJson', message: 'the body is not valid UTF-8' }]);
    const get = await svc.app.inject({ method: 'GET', url: `/api/v5/vehicles/${id}`, headers: auth() });
    expect(get.statusCode).toBe(404);
  });

  it('answers 400 for an overlong encoding and a lone surrogate', async () => {
    for (const bad of [
      [0xc0, 0xaf],
      [0xed, 0xa0, 0x80],
    ]) {
      const bytes = Buffer.concat([Buffer.from('{"entityType":"vehicle","name":"'), Buffer.from(bad), Buffer.from('"}')]);
      const res = await put({ 'content-type': 'application/json' }, bytes);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual([{ type: 'invalidJson', message: 'the body is not valid UTF-8' }]);
    }
  });

  it('keeps characters beyond ASCII as sent', async () => {
    const id = '2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c04';
    const res = await put({ 'content-type': 'application/json; charset=utf-8' }, Buffer.from(vehicle(id, 'Zoë 🚚'), 'utf8'));
    expect(res.statusCode).toBe(200);
    const get = await svc.app.inject({ method: 'GET', url: `/api/v5/vehicles/${id}`, headers: auth() });
    expect(get.json().name).toBe('Zoë 🚚');
  });

  it('drops a leading byte order mark', async () => {
    const id = '2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c05';
    const res = await put(
      { 'content-type': 'application/json' },
      Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(vehicle(id))]),
    );
    expect(res.statusCode).toBe(200);
    const get = await svc.app.inject({ method: 'GET', url: `/api/v5/vehicles/${id}`, headers: auth() });
    expect(get.statusCode).toBe(200);
    expect(get.rawPayload[0]).toBe(0x7b); // '{', no mark
    expect(get.json()).toMatchObject({ id, name: 'Bob' });
  });
});

describe('codings of a PUT', () => {
  it.each(['gzip', 'deflate', 'br', 'x-whatever', 'gzip, identity'])('refuses Content-Encoding: %s with 415', async (coding) => {
    const res = await put(
      { 'content-type': 'application/json', 'content-encoding': coding },
      zlib.gzipSync(vehicle('2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c06')),
    );
    expect(res.statusCode).toBe(415);
    expect(res.json()).toEqual([{ type: 'unsupportedMediaType', message: expect.stringContaining('Content-Encoding') }]);
  });

  it('accepts Content-Encoding: identity', async () => {
    const res = await put(
      { 'content-type': 'application/json', 'content-encoding': 'identity' },
      vehicle('2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c07'),
    );
    expect(res.statusCode).toBe(200);
  });

  it('refuses a content coding on a route without a body too', async () => {
    const res = await svc.app.inject({
      method: 'DELETE',
      url: '/api/v5/vehicles/2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c07',
      headers: { ...auth(), 'content-encoding': 'gzip' },
    });
    expect(res.statusCode).toBe(415);
    expect(res.json()[0].type).toBe('unsupportedMediaType');
  });
});

describe('transfer codings, on a real connection', () => {
  let port: number;
  beforeAll(async () => {
    port = Number(new URL(await svc.app.listen({ host: '127.0.0.1', port: 0 })).port);
  });

  /** Sends `raw` on a new connection; what came back until the service closed it or 3 s passed. */
  const roundTrip = (raw: string | Buffer) =>
    new Promise<string>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write(raw));
      let data = '';
      socket.setEncoding('latin1');
      socket.on('data', (d: string) => {
        data += d;
        // One whole answer is enough.
        const head = data.indexOf('\r\n\r\n');
        const length = /content-length: *(\d+)/i.exec(data);
        if (head >= 0 && length && data.length >= head + 4 + Number(length[1])) socket.destroy();
      });
      socket.on('error', () => {});
      socket.on('close', () => resolve(data));
      setTimeout(() => socket.destroy(), 3000);
    });
  const chunked = (body: Buffer) => Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]);
  const head = (te: string) =>
    `PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer writer-token-acme\r\nContent-Type: application/json\r\nTransfer-Encoding: ${te}\r\n\r\n`;

  it.each(['gzip, chunked', 'deflate, chunked', 'x-custom, chunked'])(
    'refuses Transfer-Encoding: %s with 415, before reading the body',
    async (te) => {
      const body = zlib.gzipSync(vehicle('2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c08'));
      const answer = await roundTrip(Buffer.concat([Buffer.from(head(te)), chunked(body)]));
      expect(answer).toMatch(/^HTTP\/1\.1 415 /);
      const json = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
      expect(json).toEqual([{ type: 'unsupportedMediaType', message: expect.stringContaining('Transfer-Encoding') }]);
    },
  );

  it('refuses a body sent gzipped as if plain (Transfer-Encoding: gzip, chunked) and stores nothing', async () => {
    const id = '2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c09';
    // The body itself is plain JSON here: a server that ignores the coding would store it.
    const answer = await roundTrip(Buffer.concat([Buffer.from(head('gzip, chunked')), chunked(Buffer.from(vehicle(id)))]));
    expect(answer).toMatch(/^HTTP\/1\.1 415 /);
    const get = await svc.app.inject({ method: 'GET', url: `/api/v5/vehicles/${id}`, headers: auth() });
    expect(get.statusCode).toBe(404);
  });

  // Over the single-PUT limit (1 MiB here), sent with a Content-Length and sent chunked (no
  // length known before the body ends): the same 413, the model's error array, either way.
  it.each(['content-length', 'chunked'])('answers 413 to a body over the limit sent with %s', async (framing) => {
    const big = Buffer.from(vehicle('2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c0b', 'x'.repeat(4_000_000)));
    const start = `PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer writer-token-acme\r\nContent-Type: application/json\r\n`;
    const request =
      framing === 'chunked'
        ? Buffer.concat([
            Buffer.from(`${start}Transfer-Encoding: chunked\r\n\r\n`),
            ...Array.from({ length: Math.ceil(big.length / 65_536) }, (_, i) => {
              const part = big.subarray(i * 65_536, (i + 1) * 65_536);
              return Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')]);
            }),
            Buffer.from('0\r\n\r\n'),
          ])
        : Buffer.concat([Buffer.from(`${start}Content-Length: ${big.length}\r\n\r\n`), big]);
    const answer = await roundTrip(request);
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(answer).toMatch(/content-type: application\/json/i);
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual([
      { type: 'payloadTooLarge', message: 'the body is larger than the limit of 1048576 bytes' },
    ]);
  });

  // A client that sends its body as a stream and reads the answer when it comes (Node's own).
  it.each([true, false])('answers 413 to a streamed client, chunked: %s', async (isChunked) => {
    const part = Buffer.alloc(65_536, 0x20);
    const parts = 64; // 4 MiB of spaces after the opening brace: over the limit
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          method: 'PUT',
          path: '/api/v5/vehicles',
          headers: {
            authorization: 'Bearer writer-token-acme',
            'content-type': 'application/json',
            ...(isChunked ? {} : { 'content-length': String(1 + parts * part.length + 1) }),
          },
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        },
      );
      req.on('error', reject);
      let sent = 0;
      const more = (): void => {
        if (sent === 0) req.write('{');
        while (sent < parts) {
          sent++;
          if (!req.write(part)) return void req.once('drain', more);
        }
        req.end('}');
      };
      more();
    });
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toEqual([{ type: 'payloadTooLarge', message: 'the body is larger than the limit of 1048576 bytes' }]);
  });

  it('accepts Transfer-Encoding: chunked', async () => {
    const answer = await roundTrip(
      Buffer.concat([Buffer.from(head('chunked')), chunked(Buffer.from(vehicle('2f6b6f7e-3a52-4c5e-9d0a-2b7d9a4e1c0a')))]),
    );
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
  });
});
