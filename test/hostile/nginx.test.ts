/**
 * The project's own proxy configuration (deploy/nginx/otm.conf) on a real nginx, in front of an
 * embedded service: a body that is too large gets the model's 413 (its JSON error array), never
 * nginx's HTML page or a 502 because the service closed the connection while nginx was still
 * sending the body. The configuration under test is the deployed file itself; only its upstream
 * addresses and its listen port are changed to loopback ones (nginx-conf.ts).
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, startService, type TestService } from '../../services/otm/test/helpers.js';
import { integrationEnabled, requireServices, startNginx, type NginxService } from '../infra/services.js';
import { deployedConf } from './nginx-conf.js';

const MiB = 1024 * 1024;
/** The service's body limit as the test starts it (OTM_BODY_LIMIT's default). Bulk requests get the
 * service's default OTM_BULK_LIMIT, 16 MiB. The configuration's limits must be these. */
const BODY_LIMIT = 1 * MiB;

interface Answer {
  status: number;
  type: string | undefined;
  body: string;
}

/**
 * One request on a connection of its own. The body goes in chunks, as a client streams it; an
 * answer that comes before the whole body was sent is kept (a server may answer a too-large body
 * early and stop reading), and an error of the upload after the answer is not a failure.
 */
function send(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: Buffer,
  opts: { chunked?: boolean } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = http.request(url, {
      method,
      agent: false,
      // Without a Content-Length, Node sends the body chunked: its size is known only at the end.
      headers: { ...headers, ...(body && !opts.chunked ? { 'content-length': String(body.length) } : {}) },
      timeout: 30_000,
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer within 30 s`)));
    req.on('error', (e) => {
      if (!answered) reject(e);
    });
    req.on('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('error', reject);
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], body: Buffer.concat(chunks).toString('utf8') });
        req.destroy();
      });
    });
    if (!body) {
      req.end();
      return;
    }
    const CHUNK = 64 * 1024;
    let offset = 0;
    const write = () => {
      while (offset < body.length && !answered && !req.destroyed) {
        const end = Math.min(offset + CHUNK, body.length);
        const ok = req.write(body.subarray(offset, end));
        offset = end;
        if (!ok) {
          req.once('drain', write);
          return;
        }
      }
      if (offset >= body.length) req.end();
    };
    write();
  });
}

/** A JSON document of exactly `bytes` bytes: a vehicle whose name fills it up. */
function vehicleOfSize(bytes: number): Buffer {
  const head = '{"entityType":"vehicle","name":"';
  const tail = '"}';
  return Buffer.from(head + 'x'.repeat(bytes - head.length - tail.length) + tail);
}

/** A JSON array of location events, about `bytes` long. */
function bulkOfSize(bytes: number): Buffer {
  const items: string[] = [];
  let size = 2;
  for (let i = 0; size < bytes; i++) {
    const item = JSON.stringify({
      eventType: 'locationUpdateEvent',
      id: `5d000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      lifecycle: 'actual',
      geoReference: { type: 'latLonPointGeoReference', lat: 52 + i / 100_000, lon: 5 },
      name: `position ${i} ${'y'.repeat(300)}`,
    });
    items.push(item);
    size += item.length + 1;
  }
  return Buffer.from(`[${items.join(',')}]`);
}

const JSON_TYPE = 'application/json; charset=utf-8';
const headers = { ...auth(), 'content-type': 'application/json' };

function expectModel413(res: Answer, what: string): void {
  expect({ what, status: res.status, type: res.type }).toEqual({ what, status: 413, type: JSON_TYPE });
  expect(JSON.parse(res.body)).toEqual([{ type: 'payloadTooLarge', message: expect.any(String) }]);
}

const enabled = integrationEnabled('test/hostile/nginx.test.ts (deploy/nginx/otm.conf on a real nginx)');

describe.skipIf(!enabled)('deploy/nginx/otm.conf on a real nginx, in front of the service', () => {
  let svc: TestService;
  let nginx: NginxService;

  beforeAll(async () => {
    requireServices(['nginx']);
    svc = await startService({ bodyLimit: BODY_LIMIT });
    await svc.app.listen({ host: '127.0.0.1', port: 0 });
    const address = svc.app.server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the service has no address');
    const upstream = `127.0.0.1:${address.port}`;
    nginx = await startNginx({ http: (listen) => deployedConf(listen, { ingress: upstream, query: upstream }) });
  });
  afterAll(async () => {
    await nginx?.stop();
    await svc?.close();
  });

  it('passes a normal PUT and GET through to the service', async () => {
    const id = '5d100000-0000-4000-8000-000000000001';
    const put = await send(
      `${nginx.url}/api/v5/vehicles`,
      'PUT',
      headers,
      Buffer.from(JSON.stringify({ entityType: 'vehicle', id, name: 'Truck 5' })),
    );
    expect(put.status).toBe(200);
    const get = await send(`${nginx.url}/api/v5/vehicles/${id}`, 'GET', auth());
    expect(get.status).toBe(200);
    expect(JSON.parse(get.body)).toMatchObject({ id, name: 'Truck 5' });
  });

  it("answers a 20 MiB PUT with the model's 413", async () => {
    expectModel413(await send(`${nginx.url}/api/v5/vehicles`, 'PUT', headers, vehicleOfSize(20 * MiB)), '20 MiB PUT');
  });

  it("answers a 2 MiB PUT (over the service's limit, under the bulk limit) with the model's 413, also when sent chunked", async () => {
    expectModel413(await send(`${nginx.url}/api/v5/vehicles`, 'PUT', headers, vehicleOfSize(2 * MiB)), '2 MiB PUT');
    expectModel413(
      await send(`${nginx.url}/api/v5/vehicles`, 'PUT', headers, vehicleOfSize(2 * MiB), { chunked: true }),
      '2 MiB chunked PUT',
    );
  });

  it("takes a PUT of exactly the service's limit, and answers one byte more with the model's 413", async () => {
    expect((await send(`${nginx.url}/api/v5/vehicles`, 'PUT', headers, vehicleOfSize(BODY_LIMIT))).status).toBe(200);
    expectModel413(
      await send(`${nginx.url}/api/v5/vehicles`, 'PUT', headers, vehicleOfSize(BODY_LIMIT + 1)),
      'PUT of the limit plus one byte',
    );
  });

  it("takes a bulk POST of about 2 MiB, and answers a 20 MiB one with the model's 413", async () => {
    const ok = await send(`${nginx.url}/api/v5/bulk/events`, 'POST', headers, bulkOfSize(2 * MiB));
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toMatchObject({ rejected: 0 });
    expectModel413(await send(`${nginx.url}/api/v5/bulk/events`, 'POST', headers, bulkOfSize(20 * MiB)), '20 MiB bulk POST');
  });

  it("passes the service's own 413 through unchanged", async () => {
    const many = Buffer.from(JSON.stringify(Array.from({ length: 10_001 }, () => ({}))));
    const res = await send(`${nginx.url}/api/v5/bulk/events`, 'POST', headers, many);
    expectModel413(res, 'bulk POST of 10,001 documents');
    expect(res.body).toMatch(/10000 documents/);
  });

  it("answers every one of repeated too-large PUTs with the model's 413, never a 502", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await send(`${nginx.url}/api/v5/vehicles`, 'PUT', headers, vehicleOfSize(20 * MiB));
      statuses.push(res.status);
      expectModel413(res, `too-large PUT #${i + 1}`);
    }
    expect(statuses).toEqual([413, 413, 413, 413, 413]);
    // Nothing in this suite breaks a connection to the service.
    expect(nginx.errorLog()).not.toMatch(/while sending request to upstream|prematurely closed|Broken pipe|Connection reset/);
  });
});
