/**
 * Every 4xx answer, whoever gives it (the service, its web framework, or Node's HTTP parser), is the
 * model's error array (`[{type, message, field?}]`) in plain words that name no framework, and
 * stays small when the request carries long text that a message would echo.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, startService, type TestService } from '../../services/otm/test/helpers.js';

let svc: TestService;
let port: number;
beforeAll(async () => {
  svc = await startService();
  port = Number(new URL(await svc.app.listen({ host: '127.0.0.1', port: 0 })).port);
});
afterAll(async () => svc?.close());

/** The most an error answer may hold here (a few items of a few hundred characters). */
const SMALL = 1024;

function expectErrorArray(status: number, body: string, expected: number, type?: string): void {
  expect(status).toBe(expected);
  expect(body).not.toMatch(/FST_|fastify|find-my-way|llhttp|HPE_/i);
  expect(body.length).toBeLessThan(SMALL);
  const items = JSON.parse(body) as { type: string; message: string; field?: string }[];
  expect(Array.isArray(items)).toBe(true);
  expect(items.length).toBeGreaterThan(0);
  for (const item of items) {
    expect(Object.keys(item).every((k) => ['type', 'message', 'field'].includes(k))).toBe(true);
    expect(typeof item.type).toBe('string');
    expect(typeof item.message).toBe('string');
    expect(item.message.length).toBeGreaterThan(0);
  }
  if (type !== undefined) expect(items[0]!.type).toBe(type);
}

describe('answers made by the framework, through app.inject', () => {
  const uuid = '50824123-0924-4563-ac1e-ca0e37487823';
  it.each<[string, { method: string; url: string; headers?: Record<string, string>; payload?: string }, number, string]>([
    [
      'a path parameter longer than the router takes',
      { method: 'GET', url: `/api/v5/vehicles/${'a'.repeat(500)}`, headers: auth() },
      414,
      'uriTooLong',
    ],
    [
      'a kind longer than the router takes',
      { method: 'PUT', url: `/api/v5/${'k'.repeat(500)}`, headers: { ...auth(), 'content-type': 'application/json' }, payload: '{}' },
      414,
      'uriTooLong',
    ],
    ['bad percent-encoding in the path', { method: 'GET', url: '/api/v5/vehicles/%E0%A4%A', headers: auth() }, 400, 'invalidJson'],
    ['bad percent-encoding in a parameter', { method: 'GET', url: `/api/v5/vehicles/%zz${uuid}`, headers: auth() }, 400, 'invalidJson'],
    [
      'a Content-Length that does not match the body',
      {
        method: 'PUT',
        url: '/api/v5/vehicles',
        headers: { ...auth(), 'content-type': 'application/json', 'content-length': '50' },
        payload: '{}',
      },
      400,
      'invalidJson',
    ],
    [
      'a content type that does not parse',
      { method: 'PUT', url: '/api/v5/vehicles', headers: { ...auth(), 'content-type': 'application/' }, payload: '{}' },
      415,
      'unsupportedMediaType',
    ],
    ['an unknown path', { method: 'GET', url: '/nowhere' }, 404, 'notFound'],
    ['an unknown method on a path', { method: 'PATCH', url: '/api/v5/vehicles', headers: auth() }, 405, 'methodNotAllowed'],
  ])('%s', async (_what, request, status, type) => {
    const res = await svc.app.inject(request as never);
    expectErrorArray(res.statusCode, res.body, status, type);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
  });
});

/** Sends `raw` on a new connection; status and body of the answer (the service then closes it). */
function raw(text: string): Promise<{ status: number; headers: string; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(text));
    let data = '';
    socket.setEncoding('latin1');
    const finish = () => {
      socket.destroy();
      const m = /^HTTP\/1\.1 (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n([\s\S]*)$/.exec(data);
      if (!m) return reject(new Error(`no answer: ${JSON.stringify(data.slice(0, 300))}`));
      const length = /^content-length: *(\d+)/im.exec(m[2]!);
      resolve({ status: Number(m[1]), headers: m[2]!, body: length ? m[3]!.slice(0, Number(length[1])) : m[3]! });
    };
    socket.on('data', (d: string) => {
      data += d;
      const head = data.indexOf('\r\n\r\n');
      const length = /content-length: *(\d+)/i.exec(data);
      if (head >= 0 && length && data.length >= head + 4 + Number(length[1])) finish();
    });
    socket.on('error', () => {});
    socket.on('close', finish);
    setTimeout(finish, 3000);
  });
}

describe('answers to requests that are not valid HTTP, on a real connection', () => {
  it.each<[string, string, number, string]>([
    ['a request line that is not HTTP', 'GARBAGE\r\n\r\n', 400, 'invalidJson'],
    ['an unknown HTTP version', 'GET /healthz HTTP/3.7\r\nHost: x\r\n\r\n', 400, 'invalidJson'],
    ['a method with bad characters', 'G(T /healthz HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'invalidJson'],
    ['a header name with a space', 'GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n', 400, 'invalidJson'],
    ['a header without a colon', 'GET /healthz HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n', 400, 'invalidJson'],
    ['headers larger than the limit', `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`, 431, 'headersTooLarge'],
    ['a path larger than the header limit', `GET /${'p'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431, 'headersTooLarge'],
    [
      'Content-Length and Transfer-Encoding together',
      'PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}',
      400,
      'invalidJson',
    ],
    [
      'a transfer coding after chunked',
      'PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n',
      400,
      'invalidJson',
    ],
    [
      'two Content-Length headers that differ',
      'PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}',
      400,
      'invalidJson',
    ],
    [
      'a chunk size that is not hexadecimal',
      'PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer writer-token-acme\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n',
      400,
      'invalidJson',
    ],
    ['an HTTP/1.1 request without Host', 'GET /healthz HTTP/1.1\r\n\r\n', 400, 'invalidJson'],
    [
      'an expectation the service does not meet',
      'PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 2\r\n\r\n{}',
      417,
      'expectationFailed',
    ],
    [
      'a path with bad percent-encoding',
      'GET /api/v5/vehicles/%E0%A4%A HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer writer-token-acme\r\n\r\n',
      400,
      'invalidJson',
    ],
    [
      'a long path parameter',
      `GET /api/v5/vehicles/${'a'.repeat(1000)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer writer-token-acme\r\n\r\n`,
      414,
      'uriTooLong',
    ],
  ])('%s', async (_what, request, status, type) => {
    const res = await raw(request);
    expectErrorArray(res.status, res.body, status, type);
    expect(res.headers).toMatch(/^content-type: application\/json/im);
  });

  it('still answers well-formed requests on a new connection', async () => {
    const res = await raw('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(res.status).toBe(200);
  });
});

describe('answers stay small when they echo what the client sent', () => {
  const long = 'x'.repeat(6000);
  it.each<[string, { method: string; url: string; headers?: Record<string, string>; payload?: string }, number]>([
    [
      'a long content type',
      { method: 'PUT', url: '/api/v5/vehicles', headers: { ...auth(), 'content-type': `application/${long}` }, payload: '{}' },
      415,
    ],
    [
      'a long charset',
      {
        method: 'PUT',
        url: '/api/v5/vehicles',
        headers: { ...auth(), 'content-type': `application/json; charset=${long}` },
        payload: '{}',
      },
      415,
    ],
    [
      'a long content coding',
      {
        method: 'PUT',
        url: '/api/v5/vehicles',
        headers: { ...auth(), 'content-type': 'application/json', 'content-encoding': long },
        payload: '{}',
      },
      415,
    ],
    ['a long unknown path', { method: 'GET', url: `/${long}/${long}` }, 404],
    [
      'a long unknown kind',
      { method: 'GET', url: `/api/v5/${'k'.repeat(150)}/50824123-0924-4563-ac1e-ca0e37487823`, headers: auth() },
      404,
    ],
    [
      'a long query parameter name',
      { method: 'GET', url: `/api/v5/vehicles/50824123-0924-4563-ac1e-ca0e37487823?${long}=1`, headers: auth() },
      400,
    ],
    ['a long malformed id', { method: 'GET', url: `/api/v5/vehicles/${'u'.repeat(199)}`, headers: auth() }, 400],
  ])('%s', async (_what, request, status) => {
    const res = await svc.app.inject(request as never);
    expectErrorArray(res.statusCode, res.body, status);
    expect(res.body).not.toContain('x'.repeat(300));
  });

  it('a long Transfer-Encoding, on a real connection', async () => {
    const res = await raw(
      `PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer writer-token-acme\r\nContent-Type: application/json\r\nTransfer-Encoding: ${'t'.repeat(3000)}, chunked\r\n\r\n0\r\n\r\n`,
    );
    expectErrorArray(res.status, res.body, 415, 'unsupportedMediaType');
  });
});
