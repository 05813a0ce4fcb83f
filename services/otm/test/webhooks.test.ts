/**
 * Webhooks on the embedded service (`otm serve` in-process): the subscriptions API, and deliveries
 * to receivers on 127.0.0.1 (allowed by OTM_WEBHOOK_ALLOW=127.0.0.1, as `webhooks.allow`): signed
 * batches of at most OTM_WEBHOOK_BATCH changes in feed order, retries after failures with nothing
 * lost, the pause after the retry window and resume, replay, the deliveries list, filters, and the
 * SSRF rule (literal addresses refused at creation, names at delivery, redirects not followed,
 * large answers cut). Timings are shortened for the tests (retry window, backoff, linger, timeouts).
 * test/distributed/webhooks.test.ts delivers through the distributed deployment.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, parseAddressRanges, parseTokens } from '@otm/core';
import { createEmbeddedService, type EmbeddedService } from '../src/index.js';
import { TOKENS, auth } from './helpers.js';
import { sleep, startReceiver, until, verifySignature, type Change, type Receiver } from './receiver.js';

const uuid = (prefix: string, i: number) => `${prefix}-0000-4000-8000-${String(i).padStart(12, '0')}`;
const vehicleId = (i: number) => uuid('6a000000', i);
const tripId = (i: number) => uuid('6b000000', i);
const eventId = (i: number) => uuid('6c000000', i);
const reference = (entityType: string, id: string) => ({ associationType: 'reference', entityType, uuid: id });
const T0 = Date.parse('2026-11-24T08:00:00Z');

interface Svc {
  readonly svc: EmbeddedService;
  close(): Promise<void>;
}

type Webhooks = NonNullable<Parameters<typeof createEmbeddedService>[0]['webhooks']>;

const FAST: Webhooks = {
  batch: 5,
  allow: parseAddressRanges('127.0.0.1'),
  lingerMs: 50,
  pollMs: 20,
  scanMs: 100,
  retry: { baseMs: 20, capMs: 100, windowMs: 60_000 },
  http: { connectMs: 2_000, answerMs: 2_000, maxAnswerBytes: 65_536 },
  maxPerTenant: 5,
};

async function start(webhooks: Webhooks): Promise<Svc> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-webhooks-'));
  const svc = await createEmbeddedService(
    { dataDir, bodyLimit: 1_048_576, maxDepth: 64, webhooks },
    parseTokens(TOKENS),
    createLogger('silent'),
  );
  await svc.app.ready();
  return {
    svc,
    close: async () => {
      await svc.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function client(s: () => Svc) {
  const inject = (method: string, url: string, body?: unknown, token?: string) =>
    s().svc.app.inject({
      method: method as 'GET',
      url,
      headers: { ...auth(token), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
    });
  const put = async (kind: string, doc: unknown) => {
    const res = await inject('PUT', `/api/v5/${kind}`, doc);
    expect(res.statusCode, res.body).toBe(200);
  };
  const subscribe = async (body: Record<string, unknown>, token?: string) => {
    const res = await inject('POST', '/api/v5/subscriptions', body, token);
    expect(res.statusCode, res.body).toBe(201);
    return res.json<{ id: string; secret: string; cursor: string; state: string }>();
  };
  const sub = async (id: string) => (await inject('GET', `/api/v5/subscriptions/${id}`)).json<Record<string, any>>();
  const deliveries = async (id: string) => (await inject('GET', `/api/v5/subscriptions/${id}/deliveries`)).json<{ items: any[] }>().items;
  const removeAll = async () => {
    for (const token of ['writer-token-acme', 'writer-token-globex']) {
      const list = (await inject('GET', '/api/v5/subscriptions', undefined, token)).json<{ items: Array<{ id: string }> }>();
      for (const { id } of list.items) await inject('DELETE', `/api/v5/subscriptions/${id}`, undefined, token);
    }
  };
  return { inject, put, subscribe, sub, deliveries, removeAll };
}

/** Changes of one kind and id, by cursor order. */
const ids = (changes: Change[]) => changes.map((c) => c.id);

describe('webhooks on the embedded service', () => {
  let main: Svc;
  let rx: Receiver;
  beforeAll(async () => {
    main = await start(FAST);
    rx = await startReceiver();
  });
  afterAll(async () => {
    await main?.close();
    await rx?.close();
  });
  const c = client(() => main);
  afterEach(async () => {
    await c.removeAll();
    rx.deliveries.length = 0;
    rx.answer = 200;
  });

  it('creates, lists, gets and deletes subscriptions; the secret is shown in full once', async () => {
    const made = await c.inject('POST', '/api/v5/subscriptions', {
      url: rx.url,
      kinds: ['trips', 'events'],
      filter: { vehicle: vehicleId(1) },
    });
    expect(made.statusCode, made.body).toBe(201);
    const s = made.json<Record<string, any>>();
    expect(made.headers.location).toBe(`/api/v5/subscriptions/${s.id}`);
    expect(s).toMatchObject({ url: rx.url, kinds: ['trips', 'events'], filter: { vehicle: vehicleId(1) }, state: 'active' });
    expect(s.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(typeof s.cursor).toBe('string');
    expect(Date.parse(s.createdAt)).toBeGreaterThan(Date.now() - 60_000);

    const got = await c.sub(s.id);
    expect(got).toMatchObject({ id: s.id, url: rx.url, state: 'active', secret: `****${s.secret.slice(-4)}` });
    const own = await c.subscribe({ url: rx.url, secret: 'my-own-secret-of-20-chars' });
    expect(own.secret).toBe('my-own-secret-of-20-chars');
    const list = (await c.inject('GET', '/api/v5/subscriptions', undefined, 'reader-token-acme')).json<{ items: any[] }>();
    expect(list.items.map((x) => x.id)).toEqual([s.id, own.id]);
    expect(list.items.every((x) => x.secret.startsWith('****'))).toBe(true);

    // The reader may look, not change.
    const refused = await c.inject('POST', '/api/v5/subscriptions', { url: rx.url }, 'reader-token-acme');
    expect(refused.statusCode).toBe(403);
    expect(refused.json()).toEqual([expect.objectContaining({ type: 'forbidden' })]);
    expect((await c.inject('DELETE', `/api/v5/subscriptions/${s.id}`, undefined, 'reader-token-acme')).statusCode).toBe(403);
    const noToken = await main.svc.app.inject({ method: 'GET', url: '/api/v5/subscriptions' });
    expect(noToken.statusCode).toBe(401);

    expect((await c.inject('DELETE', `/api/v5/subscriptions/${s.id}`)).statusCode).toBe(204);
    const gone = await c.inject('GET', `/api/v5/subscriptions/${s.id}`);
    expect(gone.statusCode).toBe(404);
    expect(gone.json()).toEqual([{ type: 'notFound', message: `no subscription with id ${s.id}` }]);
    expect((await c.inject('DELETE', `/api/v5/subscriptions/${s.id}`)).statusCode).toBe(404);
    const put = await c.inject('PUT', `/api/v5/subscriptions/${own.id}`, {});
    expect(put.statusCode).toBe(405);
    expect(put.headers.allow).toBe('GET, HEAD, DELETE');
    expect((await c.inject('GET', '/api/v5/subscriptions/not-a-uuid')).statusCode).toBe(400);
  });

  it('is described in openapi.json', async () => {
    const doc = (await main.svc.app.inject({ method: 'GET', url: '/api/v5/openapi.json' })).json<{
      paths: Record<string, Record<string, { operationId: string }>>;
    }>();
    expect(doc.paths['/api/v5/subscriptions']!.post!.operationId).toBe('createSubscription');
    expect(Object.keys(doc.paths['/api/v5/subscriptions/{id}']!)).toEqual(['get', 'delete']);
    expect(doc.paths['/api/v5/subscriptions/{id}/deliveries']!.get!.operationId).toBe('listSubscriptionDeliveries');
    expect(doc.paths['/api/v5/subscriptions/{id}/replay']!.post!.operationId).toBe('replaySubscription');
    expect(doc.paths['/api/v5/subscriptions/{id}/resume']!.post!.operationId).toBe('resumeSubscription');
  });

  it('refuses bodies that are not a subscription, naming every problem', async () => {
    const res = await c.inject('POST', '/api/v5/subscriptions', {
      url: 'ftp://example.com/hook',
      kinds: ['trips', 'boats'],
      filter: { vehicle: vehicleId(1), driver: 'x', eventType: 'jumpEvent' },
      secret: 'short',
      colour: 'blue',
    });
    expect(res.statusCode).toBe(400);
    const fields = res.json<Array<{ type: string; field: string }>>().map((e) => e.field);
    expect(fields.sort()).toEqual(['colour', 'filter.driver', 'filter.eventType', 'kinds[1]', 'secret', 'url'].sort());
    const problem = async (body: unknown) => {
      const r = await c.inject('POST', '/api/v5/subscriptions', body);
      expect(r.statusCode, r.body).toBe(400);
      return r.json<Array<{ field?: string; message: string; type: string }>>();
    };
    expect(await problem({})).toEqual([expect.objectContaining({ type: 'missingField', field: 'url' })]);
    expect((await problem({ url: 'https://user:pw@example.com/hook' }))[0]!.message).toMatch(/credentials/);
    expect((await problem({ url: `https://example.com/${'a'.repeat(2_100)}` }))[0]!.message).toMatch(/2048/);
    expect((await problem({ url: 'not a url' }))[0]!.field).toBe('url');
    expect((await problem({ url: rx.url, kinds: [] }))[0]!.field).toBe('kinds');
    expect((await problem({ url: rx.url, from: 'nonsense' }))[0]!.field).toBe('from');
    expect((await problem([1, 2]))[0]!.type).toBe('invalidJson');
    // Private, link-local and metadata addresses are refused when the host is an address (only 127.0.0.1 is allowed here).
    for (const url of [
      'http://10.0.0.1/hook',
      'http://169.254.169.254/latest/meta-data',
      'http://[::1]:8080/',
      'http://[::ffff:10.0.0.1]/',
      'http://[fd00:ec2::254]/',
      'http://100.64.0.1/',
      'http://0.0.0.0/',
      'http://127.0.0.2/',
    ]) {
      const [item] = await problem({ url });
      expect(item!.field, url).toBe('url');
      expect(item!.message, url).toMatch(/OTM_WEBHOOK_ALLOW/);
    }
    // Allowed: the address OTM_WEBHOOK_ALLOW lists, and public names.
    await c.subscribe({ url: 'http://127.0.0.1:9/hook' });
    await c.subscribe({ url: 'https://hooks.example.com/otm' });
  });

  it('keeps tenants apart', async () => {
    const s = await c.subscribe({ url: rx.url });
    for (const [method, url] of [
      ['GET', `/api/v5/subscriptions/${s.id}`],
      ['DELETE', `/api/v5/subscriptions/${s.id}`],
      ['GET', `/api/v5/subscriptions/${s.id}/deliveries`],
      ['POST', `/api/v5/subscriptions/${s.id}/resume`],
      ['POST', `/api/v5/subscriptions/${s.id}/replay?cursor=${s.cursor}`],
    ] as const) {
      const res = await c.inject(method, url, undefined, 'writer-token-globex');
      expect(res.statusCode, `${method} ${url}`).toBe(404);
    }
    expect((await c.inject('GET', '/api/v5/subscriptions', undefined, 'writer-token-globex')).json()).toEqual({ items: [] });
    // globex's changes do not go to acme's subscription.
    const r = await c.inject('PUT', '/api/v5/vehicles', { id: vehicleId(90), licensePlate: 'GLOBEX' }, 'writer-token-globex');
    expect(r.statusCode).toBe(200);
    await c.put('vehicles', { id: vehicleId(91), licensePlate: 'ACME' });
    await until(
      () => rx.delivered(),
      (d) => d.length >= 1,
    );
    await sleep(200);
    expect(ids(rx.delivered())).toEqual([vehicleId(91)]);
  });

  it('allows at most maxPerTenant subscriptions a tenant (409)', async () => {
    for (let i = 0; i < 5; i++) await c.subscribe({ url: `https://hooks.example.com/${i}` });
    const res = await c.inject('POST', '/api/v5/subscriptions', { url: 'https://hooks.example.com/6' });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toEqual([{ type: 'tooManySubscriptions', message: expect.stringContaining('at most 5') }]);
    // Another tenant has its own.
    expect((await c.inject('POST', '/api/v5/subscriptions', { url: rx.url }, 'writer-token-globex')).statusCode).toBe(201);
  });

  it('delivers signed batches of at most OTM_WEBHOOK_BATCH changes, in feed order, starting after its creation', async () => {
    await c.put('vehicles', { id: vehicleId(0), licensePlate: 'BEFORE' });
    const s = await c.subscribe({ url: rx.url });
    for (let i = 1; i <= 12; i++) await c.put('vehicles', { id: vehicleId(i), licensePlate: `V-${i}` });
    // One trip changed three times: its changes arrive in that order.
    for (const status of ['confirmed', 'inTransit', 'completed']) await c.put('trips', { id: tripId(1), name: 'ordered', status });
    const got = await until(
      () => rx.delivered(),
      (d) => d.length >= 15,
      10_000,
      'all changes',
    );
    expect(got.length).toBe(15);
    expect(got.slice(0, 12).map((x) => x.id)).toEqual(Array.from({ length: 12 }, (_, i) => vehicleId(i + 1)));
    expect(got.slice(12).map((x) => x.document?.status)).toEqual(['confirmed', 'inTransit', 'completed']);
    // The items are those of GET /api/v5/changes.
    const feed = (await c.inject('GET', `/api/v5/changes?cursor=${s.cursor}`)).json<{ items: Change[] }>();
    expect(got).toEqual(feed.items);
    for (const d of rx.deliveries) {
      expect(d.body.changes.length).toBeLessThanOrEqual(5);
      expect(d.body.subscription).toBe(s.id);
      expect(d.headers['content-type']).toBe('application/json');
      expect(d.headers['otm-delivery']).toBe(d.body.deliveryId);
      expect(verifySignature(s.secret, d.headers['otm-signature'] as string, d.raw)).toBe(true);
      expect(verifySignature('another secret', d.headers['otm-signature'] as string, d.raw)).toBe(false);
    }
    // The cursor moved past the last change delivered; the list shows each delivery.
    await until(
      () => c.sub(s.id),
      (x) => x.cursor === got[got.length - 1]!.cursor,
    );
    const list = await c.deliveries(s.id);
    expect(list.length).toBe(rx.deliveries.length);
    expect(list[0]).toMatchObject({ outcome: 'delivered', status: 200, attempt: 1, lastCursor: got[got.length - 1]!.cursor });
    expect(list.map((d) => d.changes).reduce((a, b) => a + b, 0)).toBe(15);
    expect(Date.parse(list[0].at)).toBeGreaterThanOrEqual(Date.parse(list[list.length - 1].at));
  });

  it('retries after 500s and timeouts, then delivers everything, the deliveries list showing each attempt', async () => {
    let calls = 0;
    rx.answer = (_req, res, d) => {
      calls++;
      if (calls <= 2) {
        d.status = 500;
        res.writeHead(500).end('try later');
      } else if (calls === 3) {
        // No answer within the answer timeout (2 s here).
        setTimeout(() => res.destroyed || res.writeHead(200).end(), 5_000).unref();
      } else {
        d.status = 200;
        res.writeHead(200).end();
      }
    };
    const s = await c.subscribe({ url: rx.url });
    for (let i = 20; i < 28; i++) await c.put('vehicles', { id: vehicleId(i), licensePlate: `R-${i}` });
    const got = await until(
      () => rx.delivered(),
      (d) => d.length >= 8,
      15_000,
      'all changes after the retries',
    );
    // Nothing lost; each change delivered (2xx) once; the failed attempts carried the same first batch.
    expect(ids(got)).toEqual(Array.from({ length: 8 }, (_, i) => vehicleId(20 + i)));
    const seen = rx.deliveries.flatMap((d) => d.body.changes.map((x) => x.cursor));
    expect(seen.length - new Set(seen).size).toBeGreaterThanOrEqual(3 * 1); // the same batch three more times
    expect(new Set(rx.deliveries.slice(0, 4).map((d) => d.body.deliveryId)).size).toBe(1);
    const list = await until(
      () => c.deliveries(s.id),
      (l) => l.some((d) => d.outcome === 'delivered'),
    );
    const first = list.slice().reverse();
    expect(first.slice(0, 4).map((d) => [d.attempt, d.outcome, d.status])).toEqual([
      [1, 'failed', 500],
      [2, 'failed', 500],
      [3, 'failed', undefined],
      [4, 'delivered', 200],
    ]);
    expect(first[0].error).toMatch(/HTTP 500: try later/);
    expect(first[2].error).toMatch(/answer/);
    expect((await c.sub(s.id)).failingSince).toBeUndefined();
  });

  it('replays from a cursor: the subscription goes back and delivers again', async () => {
    const s = await c.subscribe({ url: rx.url });
    for (let i = 30; i < 36; i++) await c.put('vehicles', { id: vehicleId(i), licensePlate: `P-${i}` });
    const got = await until(
      () => rx.delivered(),
      (d) => d.length >= 6,
    );
    await until(
      () => c.sub(s.id),
      (x) => x.cursor === got[5]!.cursor,
    );
    const res = await c.inject('POST', `/api/v5/subscriptions/${s.id}/replay?cursor=${got[2]!.cursor}`);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ id: s.id, cursor: got[2]!.cursor, state: 'active' });
    const again = await until(
      () => rx.delivered(),
      (d) => d.length >= 9,
    );
    expect(ids(again.slice(6))).toEqual([vehicleId(33), vehicleId(34), vehicleId(35)]);
    // A cursor that is not the feed's is a 400; a missing one too.
    const bad = await c.inject('POST', `/api/v5/subscriptions/${s.id}/replay?cursor=abc`);
    expect(bad.statusCode).toBe(400);
    expect(bad.json()[0]).toMatchObject({ field: 'cursor' });
    expect((await c.inject('POST', `/api/v5/subscriptions/${s.id}/replay`)).statusCode).toBe(400);
  });

  it('sends only the kinds and the vehicle, trip or eventType asked for', async () => {
    const byVehicle = await c.subscribe({ url: `${rx.url}?vehicle`, filter: { vehicle: vehicleId(41) } });
    const byTrip = await c.subscribe({ url: `${rx.url}?trip`, filter: { trip: tripId(41) } });
    const byType = await c.subscribe({ url: `${rx.url}?type`, filter: { eventType: 'fuelConsumedEvent' } });
    const byKind = await c.subscribe({ url: `${rx.url}?kind`, kinds: ['trips'] });
    await c.put('vehicles', { id: vehicleId(41), licensePlate: 'F-41' });
    await c.put('vehicles', { id: vehicleId(42), licensePlate: 'F-42' });
    await c.put('trips', { id: tripId(41), name: 't41', status: 'confirmed', vehicle: reference('vehicle', vehicleId(41)) });
    await c.put('trips', { id: tripId(42), name: 't42', status: 'confirmed', vehicle: reference('vehicle', vehicleId(42)) });
    const location = (i: number, v: number) => ({
      id: eventId(i),
      eventType: 'locationUpdateEvent',
      lifecycle: 'actual',
      creationDate: new Date(T0 + i * 1_000).toISOString(),
      vehicle: reference('vehicle', vehicleId(v)),
      geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
    });
    const fuel = (i: number, v: number, t: number) => ({
      id: eventId(i),
      eventType: 'fuelConsumedEvent',
      lifecycle: 'actual',
      creationDate: new Date(T0 + i * 1_000).toISOString(),
      vehicle: reference('vehicle', vehicleId(v)),
      trip: reference('trip', tripId(t)),
      amount: { value: 10, unit: 'l' },
    });
    await c.put('events', location(1, 41));
    await c.put('events', fuel(2, 42, 41));
    await c.put('events', location(3, 42));
    // The last change of all: once it is in, everything before it was looked at.
    await c.put('trips', { id: tripId(43), name: 'end', status: 'confirmed' });
    const by = (q: string) => rx.deliveries.filter((d) => d.status === 200 && d.body.subscription === q).flatMap((d) => d.body.changes);
    await until(
      () => by(byKind.id),
      (x) => x.length >= 3,
      10_000,
      'the kinds subscription',
    );
    // Every subscription has looked at the whole feed (changes left out move the cursor on without a POST).
    await sleep(200);
    const all = (await c.inject('GET', '/api/v5/changes?limit=1000')).json<{ items: Change[] }>().items;
    const end = all[all.length - 1]!.cursor;
    for (const s of [byVehicle, byTrip, byType, byKind])
      await until(
        () => c.sub(s.id),
        (x) => x.cursor === end,
        10_000,
        'the end of the feed',
      );
    expect(by(byVehicle.id).map((x) => `${x.kind}/${x.id}`)).toEqual([
      `vehicles/${vehicleId(41)}`,
      `trips/${tripId(41)}`,
      `events/${eventId(1)}`,
    ]);
    expect(by(byTrip.id).map((x) => `${x.kind}/${x.id}`)).toEqual([`trips/${tripId(41)}`, `events/${eventId(2)}`]);
    expect(by(byType.id).map((x) => `${x.kind}/${x.id}`)).toEqual([`events/${eventId(2)}`]);
    expect(by(byKind.id).map((x) => x.id)).toEqual([tripId(41), tripId(42), tripId(43)]);
  });

  it('does not follow a redirect (to a private address): the attempt fails with the 3xx', async () => {
    rx.answer = (_req, res, d) => {
      d.status = 302;
      res.writeHead(302, { location: 'http://10.0.0.1/internal' }).end();
    };
    const s = await c.subscribe({ url: rx.url });
    await c.put('vehicles', { id: vehicleId(50), licensePlate: 'REDIRECT' });
    const list = await until(
      () => c.deliveries(s.id),
      (l) => l.length >= 2,
    );
    expect(list[list.length - 1]).toMatchObject({
      outcome: 'failed',
      status: 302,
      error: expect.stringContaining('redirects are not followed'),
    });
    expect(rx.deliveries.every((d) => d.status === 302)).toBe(true);
  });

  it('reads at most 64 KiB of an answer (a 10 MB one is cut off) and counts the 2xx', async () => {
    const written: Array<{ bytes: number; finished: boolean }> = [];
    rx.answer = (_req, res, d) => {
      d.status = 200;
      const total = 10 * 1024 * 1024;
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      let sent = 0;
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(total) });
      const pump = () => {
        while (sent < total && !res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (!res.destroyed) res.end();
      };
      res.on('close', () => written.push({ bytes: sent, finished: res.writableFinished }));
      pump();
    };
    const s = await c.subscribe({ url: rx.url });
    await c.put('vehicles', { id: vehicleId(60), licensePlate: 'BIG' });
    const list = await until(
      () => c.deliveries(s.id),
      (l) => l.length >= 1,
    );
    expect(list[0]).toMatchObject({ outcome: 'delivered', status: 200 });
    await until(
      () => written,
      (w) => w.length >= 1,
    );
    expect(written[0]!.finished).toBe(false);
    expect(written[0]!.bytes).toBeLessThan(10 * 1024 * 1024);
  });

  it('delivers to a name that resolves to an allowed address (localhost, with 127.0.0.1 allowed)', async () => {
    const s = await c.subscribe({ url: `http://localhost:${rx.port}/hook` });
    await c.put('vehicles', { id: vehicleId(70), licensePlate: 'LOCALHOST' });
    await until(
      () => rx.delivered(),
      (d) => d.length >= 1,
    );
    const list = await until(
      () => c.deliveries(s.id),
      (l) => l.length >= 1,
    );
    expect(list[0]).toMatchObject({ outcome: 'delivered' });
  });
});

describe('webhooks: pause after the retry window, resume', () => {
  let svc: Svc;
  let rx: Receiver;
  beforeAll(async () => {
    svc = await start({ ...FAST, retry: { baseMs: 20, capMs: 50, windowMs: 400 } });
    rx = await startReceiver();
  });
  afterAll(async () => {
    await svc?.close();
    await rx?.close();
  });
  const c = client(() => svc);

  it('pauses a subscription whose receiver fails for longer than the window; resume picks up at the same cursor', async () => {
    rx.answer = 503;
    const s = await c.subscribe({ url: rx.url });
    for (let i = 80; i < 83; i++) await c.put('vehicles', { id: vehicleId(i), licensePlate: `W-${i}` });
    const paused = await until(
      () => c.sub(s.id),
      (x) => x.state === 'paused',
      10_000,
      'paused',
    );
    expect(paused.reason).toMatch(/retry window: HTTP 503/);
    expect(paused.cursor).toBe(s.cursor);
    const attempts = rx.deliveries.length;
    expect(attempts).toBeGreaterThanOrEqual(2);
    // Paused: nothing more is sent, also for new changes.
    await c.put('vehicles', { id: vehicleId(83), licensePlate: 'W-83' });
    await sleep(300);
    expect(rx.deliveries.length).toBe(attempts);

    rx.answer = 200;
    const resumed = await c.inject('POST', `/api/v5/subscriptions/${s.id}/resume`);
    expect(resumed.statusCode).toBe(200);
    expect(resumed.json()).toMatchObject({ state: 'active', cursor: s.cursor });
    expect(resumed.json().reason).toBeUndefined();
    const got = await until(
      () => rx.delivered(),
      (d) => d.length >= 4,
    );
    expect(ids(got)).toEqual([vehicleId(80), vehicleId(81), vehicleId(82), vehicleId(83)]);
  });
});

describe('webhooks: the SSRF rule without OTM_WEBHOOK_ALLOW', () => {
  let svc: Svc;
  let rx: Receiver;
  beforeAll(async () => {
    svc = await start({ ...FAST, allow: [], retry: { baseMs: 20, capMs: 50, windowMs: 300 } });
    rx = await startReceiver();
  });
  afterAll(async () => {
    await svc?.close();
    await rx?.close();
  });
  const c = client(() => svc);

  it('refuses loopback, private and metadata addresses at creation', async () => {
    for (const url of [
      'http://127.0.0.1:8080/',
      'http://10.0.0.1/',
      'http://169.254.169.254/',
      'http://[::1]/',
      'http://2130706433/',
      'http://[::ffff:7f00:1]/',
    ]) {
      const res = await c.inject('POST', '/api/v5/subscriptions', { url });
      expect(res.statusCode, url).toBe(400);
      expect(res.json()[0], url).toMatchObject({
        type: 'invalidField',
        field: 'url',
        message: expect.stringContaining('OTM_WEBHOOK_ALLOW'),
      });
    }
  });

  it('refuses a name that resolves to loopback at delivery, recording a refused attempt, and pauses after the window', async () => {
    const s = await c.subscribe({ url: `http://localhost:${rx.port}/hook` });
    await c.put('vehicles', { id: vehicleId(95), licensePlate: 'SSRF' });
    const list = await until(
      () => c.deliveries(s.id),
      (l) => l.length >= 1,
    );
    expect(list[list.length - 1]).toMatchObject({
      outcome: 'refused',
      error: expect.stringMatching(/localhost resolves to .*loopback.*OTM_WEBHOOK_ALLOW/),
    });
    const paused = await until(
      () => c.sub(s.id),
      (x) => x.state === 'paused',
      10_000,
      'paused',
    );
    expect(paused.reason).toMatch(/refused/);
    expect(rx.deliveries.length).toBe(0);
  });
});

describe('webhooks: subscriptions are independent, and the dispatcher stops cleanly', () => {
  let rx: Receiver;
  beforeAll(async () => {
    rx = await startReceiver();
  });
  afterAll(async () => {
    await rx?.close();
  });

  it('a slow receiver does not delay another subscription', async () => {
    const svc = await start({ ...FAST, http: { connectMs: 1_000, answerMs: 5_000, maxAnswerBytes: 65_536 } });
    try {
      const c = client(() => svc);
      rx.answer = (req, res, d) => {
        if (req.url === '/slow') return void setTimeout(() => res.destroyed || res.writeHead(200).end(), 3_000).unref();
        d.status = 200;
        res.writeHead(200).end();
      };
      const slow = await c.subscribe({ url: rx.url.replace('/hook', '/slow') });
      const fast = await c.subscribe({ url: rx.url });
      const started = Date.now();
      for (let i = 100; i < 103; i++) await c.put('vehicles', { id: vehicleId(i), licensePlate: `I-${i}` });
      await until(
        () => rx.delivered(),
        (d) => d.length >= 3,
        2_500,
        'the fast subscription',
      );
      expect(Date.now() - started).toBeLessThan(2_500);
      // The slow subscription's POST is on its way too (on a busy machine it may reach the
      // receiver just after the fast one's last), and it is not answered yet: it takes 3 s.
      await until(
        () => rx.deliveries.filter((d) => d.body.subscription === slow.id),
        (d) => d.length > 0,
        2_500,
        "the slow subscription's POST",
      );
      expect(rx.deliveries.filter((d) => d.body.subscription === slow.id && d.status !== undefined)).toEqual([]);
      expect(rx.delivered().every((x) => rx.deliveries.find((d) => d.body.changes.includes(x))?.body.subscription === fast.id)).toBe(true);
    } finally {
      await svc.close();
      rx.deliveries.length = 0;
    }
  });

  it('close() aborts a POST in flight at once and leaves no timer behind', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const svc = await start({ ...FAST, http: { connectMs: 1_000, answerMs: 10_000, maxAnswerBytes: 65_536 } });
    const c = client(() => svc);
    let closedByClient = false;
    rx.answer = (req) => {
      req.socket.on('close', () => (closedByClient = true));
    };
    await c.subscribe({ url: rx.url });
    await c.put('vehicles', { id: vehicleId(110), licensePlate: 'HANG' });
    await until(
      () => rx.deliveries.length,
      (n) => n >= 1,
      5_000,
      'the POST',
    );
    const t0 = Date.now();
    await svc.close();
    expect(Date.now() - t0).toBeLessThan(1_000);
    await until(
      () => closedByClient,
      (x) => x,
      2_000,
      'the connection closed',
    );
    await sleep(50);
    expect(timers()).toBeLessThanOrEqual(before);
  });
});
