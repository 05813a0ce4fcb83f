/**
 * Authentication over one kept-alive connection: the service remembers the header a connection
 * sent last (packages/http/src/authentication.ts), and that must never let a later, different header through.
 * Real sockets (app.inject makes a new one per request), one connection reused for every request.
 */
import http from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startService, type TestService } from './helpers.js';

let svc: TestService;
let base: URL;
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

beforeAll(async () => {
  svc = await startService();
  base = new URL(await svc.app.listen({ host: '127.0.0.1', port: 0 }));
});
afterAll(async () => {
  agent.destroy();
  await svc.close();
});

interface Answer {
  status: number;
  body: string;
  reused: boolean;
  challenge?: string;
}

function send(method: string, path: string, authorization: string | undefined, body?: unknown): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = {};
    if (authorization !== undefined) headers.authorization = authorization;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const req = http.request(new URL(path, base), { method, agent, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body: text, reused: req.reusedSocket, challenge: res.headers['www-authenticate'] }),
      );
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

const vehicle = { entityType: 'vehicle', name: 'Bob', licensePlate: 'AB-12-CD' };

it('checks every request on a kept-alive connection: a changed or dropped token is not taken for the last one', async () => {
  const first = await send('PUT', '/api/v5/vehicles', 'Bearer writer-token-acme', vehicle);
  expect(first.status).toBe(200);
  const id = JSON.parse(first.body).id as string;

  const steps: Array<[string, string | undefined, number]> = [
    ['GET', 'Bearer writer-token-acme', 200],
    ['GET', 'Bearer writer-token-acmX', 401], // one character off the last, verified header
    ['GET', undefined, 401],
    ['GET', 'Bearer writer-token-acme', 200],
    ['GET', 'Bearer writer-token-globex', 404], // another tenant on the same connection sees nothing
    ['GET', 'Bearer writer-token-acme', 200],
    ['DELETE', 'Bearer reader-token-acme', 403], // the scope of the token now sent, not of the last one
    ['GET', 'Bearer writeonly-token', 403],
    ['GET', 'Bearer writer-token-acme', 200],
  ];
  for (const [method, authorization, status] of steps) {
    const res = await send(method, `/api/v5/vehicles/${id}`, authorization);
    expect({ method, authorization, status: res.status }).toEqual({ method, authorization, status });
    expect(res.reused).toBe(true);
    if (status === 401) expect(res.challenge).toMatch(/^Bearer realm="otm"/);
  }
});
