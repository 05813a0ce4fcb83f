/**
 * GET /api/v5/stream (Server-Sent Events) and POST /api/v5/stream/tickets over real HTTP: events in
 * feed order with the feed's cursors as ids, filters, resuming with Last-Event-ID (compared with
 * GET /api/v5/changes from the same cursor), the position snapshot, heartbeats, the per-token limit,
 * tickets, tenants apart, and closing. Run against the embedded service here and against the
 * distributed deployment (ingress, query and worker processes; tickets given by the ingress, taken
 * by the query process) by test/distributed/stream.dist.test.ts.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLogger, parseTokens } from '@otm/core';
import { StreamTickets, streamTicketKey } from '@otm/query';
import { createEmbeddedService } from '../src/index.js';
import { TOKENS, auth, target } from './helpers.js';
import { openStream, startStreamService, type SseEvent, type SseStream, type StreamService } from './sse.js';

const uuid = (prefix: string, i: number) => `${prefix}-0000-4000-8000-${String(i).padStart(12, '0')}`;
const vehicleId = (i: number) => uuid('5a000000', i);
const tripId = (i: number) => uuid('5b000000', i);
const eventId = (i: number) => uuid('5c000000', i);

const reference = (entityType: string, id: string) => ({ associationType: 'reference', entityType, uuid: id });
const vehicle = (i: number) => ({ id: vehicleId(i), licensePlate: `STREAM-${i}` });
const trip = (i: number, v: number) => ({
  id: tripId(i),
  name: `stream trip ${i}`,
  status: 'inTransit',
  vehicle: reference('vehicle', vehicleId(v)),
});
const T0 = Date.parse('2026-11-24T08:00:00Z');
const location = (i: number, v: number, extra: Record<string, unknown> = {}) => ({
  id: eventId(i),
  eventType: 'locationUpdateEvent',
  lifecycle: 'actual',
  creationDate: new Date(T0 + i * 1_000).toISOString(),
  vehicle: reference('vehicle', vehicleId(v)),
  geoReference: { type: 'latLonPointGeoReference', lat: 52 + i / 1_000, lon: 5 + i / 1_000 },
  ...extra,
});
const fuel = (i: number, v: number, t: number) => ({
  id: eventId(i),
  eventType: 'fuelConsumedEvent',
  lifecycle: 'actual',
  creationDate: new Date(T0 + i * 1_000).toISOString(),
  vehicle: reference('vehicle', vehicleId(v)),
  trip: reference('trip', tripId(t)),
  amount: { value: 12.5, unit: 'l' },
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Item {
  cursor: string;
  op: 'put' | 'delete';
  kind: string;
  id: string;
  lifecycle?: string;
  document?: Record<string, unknown>;
}

describe('stream: GET /api/v5/stream', () => {
  let svc: StreamService;
  const open: SseStream[] = [];
  beforeAll(async () => {
    svc = await startStreamService();
  }, 120_000);
  // Whatever a test left open (one that failed) is closed, so that the next is not refused 429.
  afterEach(() => {
    for (const s of open.splice(0)) s.close();
  });
  afterAll(async () => {
    await svc?.close();
  });

  const request = (method: string, url: string, token: string | undefined, body?: unknown) =>
    fetch(`${svc.url}${url}`, {
      method,
      headers: { ...(token === undefined ? {} : auth(token)), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  /**
   * The distributed deployment answers a write once the bus took it: wait until GET shows it
   * applied (as test/distributed/inject.ts does), so that writes are applied in the order made.
   */
  const applied = async (url: string, token: string, status: number) => {
    if (!svc.distributed) return;
    for (let i = 0; i < 500 && (await request('GET', url, token)).status !== status; i++) await sleep(20);
  };
  const put = async (kind: string, doc: { id: string }, token = 'writer-token-acme') => {
    const res = await request('PUT', `/api/v5/${kind}`, token, doc);
    expect(res.status, await res.clone().text()).toBe(200);
    await applied(`/api/v5/${kind}/${doc.id}`, token, 200);
  };
  const del = async (kind: string, id: string) => {
    expect((await request('DELETE', `/api/v5/${kind}/${id}`, 'writer-token-acme')).status).toBe(204);
    await applied(`/api/v5/${kind}/${id}`, 'writer-token-acme', 404);
  };

  /** Every change after `cursor` (all when undefined), and where the feed ends. */
  const changesAfter = async (
    cursor: string | undefined,
    token = 'writer-token-acme',
  ): Promise<{ items: Item[]; end: string | undefined }> => {
    const items: Item[] = [];
    let next = `/api/v5/changes?limit=1000${cursor === undefined ? '' : `&cursor=${encodeURIComponent(cursor)}`}`;
    for (;;) {
      const res = await request('GET', next, token);
      expect(res.status).toBe(200);
      const page = (await res.json()) as { items: Item[]; next: string };
      items.push(...page.items);
      if (page.items.length === 0) return { items, end: new URL(page.next, 'http://x').searchParams.get('cursor') ?? undefined };
      next = page.next;
    }
  };

  /** Opens a stream, trying again while the token's streams closed just before are still counted. */
  const stream = async (query = '', headers: Record<string, string> = auth()): Promise<SseStream> => {
    for (let i = 0; ; i++) {
      const s = await openStream(svc.url, `/api/v5/stream${query}`, headers);
      if (s.status === 429 && i < 50) {
        await sleep(100);
        continue;
      }
      expect(s.status, s.body).toBe(200);
      open.push(s);
      return s;
    }
  };

  const ofChange = (e: SseEvent) => ({ e, item: JSON.parse(e.data) as Item });
  const brief = (i: Item) => `${i.op} ${i.kind} ${i.id}`;
  const briefs = (s: SseStream) => s.events.filter((e) => e.event !== 'position').map((e) => brief(ofChange(e).item));
  const has = (s: SseStream, what: string) => () => briefs(s).includes(what);

  /** Sorted, for changes of entities and telemetry, whose order in the feed is the order they were stored in. */
  const sorted = (list: string[]) => [...list].sort();

  /** The stream's events, in the feed's order. */
  const inFeedOrder = (s: SseStream, items: Item[]) => {
    const at = s.events.filter((e) => e.event !== 'position').map((e) => items.findIndex((i) => i.cursor === e.id));
    expect(at.every((n) => n >= 0)).toBe(true);
    expect(at).toEqual([...at].sort((a, b) => a - b));
  };

  /** The stream's change events equal the feed's items from the same cursor: ids, order, items. */
  const sameAsFeed = (events: SseEvent[], items: Item[]) => {
    const changes = events.filter((e) => e.event !== 'position').map(ofChange);
    expect(changes.map(({ e }) => e.id)).toEqual(items.map((i) => i.cursor));
    changes.forEach(({ e, item }, n) => {
      const fed = items[n]!;
      expect(e.event).toBe(fed.op);
      expect({ ...item, document: undefined }).toEqual({ ...fed, document: undefined });
      // A version read when asked (the distributed feed keeps no document) may have changed since.
      if (item.document !== undefined && fed.document !== undefined && !svc.distributed) expect(item.document).toEqual(fed.document);
    });
  };

  it('sends every put and delete in feed order, with the feed cursor as id and the items of /changes', async () => {
    const start = (await changesAfter(undefined)).end;
    const s = await stream();
    const other = await stream('', auth('writer-token-globex'));
    expect(s.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(s.headers['cache-control']).toBe('no-store');
    await put('vehicles', vehicle(1));
    await put('trips', trip(1, 1));
    await put('events', location(1, 1, { references: [reference('trip', tripId(1))] }));
    await del('trips', tripId(1));
    await s.until(has(s, `delete trips ${tripId(1)}`), 20_000, 'the delete');
    expect(s.retry()).toBeGreaterThan(0);
    await s.until(has(s, `put events ${eventId(1)}`), 20_000, 'the event');
    const { items } = await changesAfter(start);
    expect(sorted(items.map(brief))).toEqual(
      sorted([`put vehicles ${vehicleId(1)}`, `put trips ${tripId(1)}`, `put events ${eventId(1)}`, `delete trips ${tripId(1)}`]),
    );
    sameAsFeed(s.events, items);
    const put1 = ofChange(s.events[0]!).item;
    expect(put1.document).toEqual(vehicle(1));
    // Another tenant's stream saw none of it, and sees its own.
    await put('vehicles', vehicle(2), 'writer-token-globex');
    await other.until(has(other, `put vehicles ${vehicleId(2)}`), 20_000, "globex's own write");
    expect(briefs(other)).toEqual([`put vehicles ${vehicleId(2)}`]);
    s.close();
    other.close();
  }, 60_000);

  it('filters by kinds, by vehicle (itself, its trips, its events) and by trip (itself, its events)', async () => {
    const start = (await changesAfter(undefined)).end;
    const byKind = await stream('?kinds=vehicles');
    const byVehicle = await stream(`?vehicle=${vehicleId(12)}`);
    const byTrip = await stream(`?trip=${tripId(12)}`, auth('reader-token-acme'));
    const eventsOfVehicle = await stream(`?kinds=events&vehicle=${vehicleId(13)}`, auth('reader-token-acme'));
    const all = await stream('', auth('reader-token-acme'));
    await put('vehicles', vehicle(12));
    await put('vehicles', vehicle(13));
    await put('trips', trip(12, 12));
    await put('trips', trip(13, 13));
    await put('events', location(12, 12));
    await put('events', location(13, 13, { references: [reference('trip', tripId(12))] }));
    await put('events', fuel(14, 13, 12));
    await del('trips', tripId(12));
    await put('vehicles', vehicle(19)); // the last change: every stream has had its share once `all` has it
    // The last change (events are in the feed once stored: wait for them too); then every stream
    // has had its share.
    await all.until(
      () => [`put vehicles ${vehicleId(19)}`, ...[12, 13, 14].map((i) => `put events ${eventId(i)}`)].every((b) => has(all, b)()),
      20_000,
      'every change',
    );
    await sleep(300);
    const { items } = await changesAfter(start);
    sameAsFeed(all.events, items);
    expect(briefs(byKind)).toEqual([`put vehicles ${vehicleId(12)}`, `put vehicles ${vehicleId(13)}`, `put vehicles ${vehicleId(19)}`]);
    // A delete has no document left to tell its vehicle: only the vehicle's own delete would come.
    expect(sorted(briefs(byVehicle))).toEqual(
      sorted([`put vehicles ${vehicleId(12)}`, `put trips ${tripId(12)}`, `put events ${eventId(12)}`]),
    );
    expect(sorted(briefs(byTrip))).toEqual(
      sorted([`put trips ${tripId(12)}`, `put events ${eventId(13)}`, `put events ${eventId(14)}`, `delete trips ${tripId(12)}`]),
    );
    expect(sorted(briefs(eventsOfVehicle))).toEqual(sorted([`put events ${eventId(13)}`, `put events ${eventId(14)}`]));
    for (const s of [byKind, byVehicle, byTrip, eventsOfVehicle]) inFeedOrder(s, items);
    for (const s of [byKind, byVehicle, byTrip, eventsOfVehicle, all]) s.close();
  }, 60_000);

  it('resumes after Last-Event-ID (header, or lastEventId in the query): nothing missed, nothing twice', async () => {
    const first = await stream();
    await put('vehicles', vehicle(20));
    await put('vehicles', vehicle(21));
    await first.until(has(first, `put vehicles ${vehicleId(21)}`), 20_000, 'the first two');
    const last = first.lastId()!;
    first.close();
    // Written while nobody follows.
    await put('trips', trip(20, 20));
    await put('events', location(20, 20));
    await del('vehicles', vehicleId(20));
    await put('events', location(21, 21));
    await put('trips', trip(21, 21));
    const byHeader = await stream('', { ...auth(), 'last-event-id': last });
    const byQuery = await stream(`?lastEventId=${encodeURIComponent(last)}`);
    await put('vehicles', vehicle(22));
    const marker = `put vehicles ${vehicleId(22)}`;
    const every = [`put events ${eventId(20)}`, `put events ${eventId(21)}`, marker];
    await byHeader.until(() => every.every((b) => has(byHeader, b)()), 20_000, 'the changes after resuming');
    await byQuery.until(() => every.every((b) => has(byQuery, b)()), 20_000, 'the changes after resuming');
    await sleep(200);
    const { items } = await changesAfter(last);
    expect(sorted(items.map(brief))).toEqual(
      sorted([
        `put trips ${tripId(20)}`,
        `put events ${eventId(20)}`,
        `delete vehicles ${vehicleId(20)}`,
        `put events ${eventId(21)}`,
        `put trips ${tripId(21)}`,
        marker,
      ]),
    );
    sameAsFeed(byHeader.events, items);
    sameAsFeed(byQuery.events, items);
    // The header wins over the query (an EventSource reconnecting sends the id it got last).
    const third = byHeader.events[2]!.id!;
    const both = await stream(`?lastEventId=${encodeURIComponent(last)}`, { ...auth(), 'last-event-id': third });
    await both.until((ev) => ev.length === items.length - 3, 20_000, 'the resumed changes');
    sameAsFeed(both.events, items.slice(3));
    for (const s of [byHeader, byQuery, both]) s.close();
  }, 60_000);

  it('resumes while changes keep coming: each stream gets the feed after its cursor exactly once, in order', async () => {
    const start = (await changesAfter(undefined)).end;
    const resumed: Array<{ s: SseStream; from: string | undefined }> = [];
    const live = await stream('', auth('reader-token-acme'));
    let writing = true;
    const writer = (async () => {
      for (let i = 0; i < 40; i++) {
        await put(i % 3 === 0 ? 'trips' : 'vehicles', i % 3 === 0 ? trip(100 + i, 30) : vehicle(100 + i));
        if (i % 5 === 4) await sleep(5);
      }
      writing = false;
    })();
    const cursors = [start];
    while (writing) {
      await sleep(svc.distributed ? 150 : 40);
      const from = cursors[Math.floor(Math.random() * cursors.length)]!;
      if (resumed.length < 4 && from !== undefined) {
        const s = await stream('', {
          ...auth(resumed.length % 2 === 0 ? 'writer-token-acme' : 'reader-token-acme'),
          'last-event-id': from,
        });
        resumed.push({ s, from });
      }
      const id = live.lastId();
      if (id !== undefined) cursors.push(id);
    }
    await writer;
    await put('vehicles', vehicle(199));
    const marker = `put vehicles ${vehicleId(199)}`;
    for (const { s } of resumed) await s.until(has(s, marker), 20_000, 'the last change');
    await live.until(has(live, marker), 20_000, 'the last change');
    expect(resumed.length).toBeGreaterThan(0);
    for (const { s, from } of resumed) {
      const { items } = await changesAfter(from);
      sameAsFeed(s.events, items);
    }
    // The live stream: a run of the feed without a gap, from wherever it started.
    const { items } = await changesAfter(start);
    const firstAt = items.findIndex((i) => i.cursor === live.events[0]!.id);
    expect(firstAt).toBeGreaterThanOrEqual(0);
    sameAsFeed(live.events, items.slice(firstAt));
    for (const { s } of resumed) s.close();
    live.close();
  }, 120_000);

  it('snapshot=positions: the latest positions of the matching vehicles first, then the changes', async () => {
    await put('events', location(40, 40));
    await put('events', location(41, 40)); // newer: moves vehicle 40
    await put('events', location(42, 41));
    const positions = async () => {
      const res = await request('GET', '/api/v5/vehicles/positions', 'writer-token-acme');
      return ((await res.json()) as { items: Array<{ vehicle: string; eventId: string }> }).items;
    };
    for (let i = 0; i < 200; i++) {
      const p = await positions();
      if (p.some((x) => x.eventId === eventId(41)) && p.some((x) => x.eventId === eventId(42))) break;
      await sleep(50);
    }
    const expected = await positions();
    const s = await stream('?snapshot=positions');
    const one = await stream(`?snapshot=positions&vehicle=${vehicleId(40)}`);
    await s.until((ev) => ev.filter((e) => e.event === 'position').length === expected.length, 10_000, 'the positions');
    await one.until((ev) => ev.length === 1, 10_000, 'the position');
    expect(s.events.map((e) => JSON.parse(e.data) as unknown)).toEqual(expected);
    expect(s.events.every((e) => e.id === undefined)).toBe(true);
    expect(JSON.parse(one.events[0]!.data)).toMatchObject({ vehicle: vehicleId(40), eventId: eventId(41) });
    await put('vehicles', vehicle(42));
    await put('events', location(43, 40));
    await s.until(() => has(s, `put events ${eventId(43)}`)() && has(s, `put vehicles ${vehicleId(42)}`)(), 20_000, 'the changes');
    await one.until(has(one, `put events ${eventId(43)}`), 20_000, 'the changes after the snapshot');
    expect(sorted(briefs(s))).toEqual(sorted([`put vehicles ${vehicleId(42)}`, `put events ${eventId(43)}`]));
    expect(briefs(one)).toEqual([`put events ${eventId(43)}`]);
    // Resuming with a snapshot: the positions, then what came after the id.
    const from = s.events.find((e) => e.id)!.id!;
    const resumed = await stream(`?snapshot=positions&vehicle=${vehicleId(40)}`, { ...auth(), 'last-event-id': from });
    const after = (await changesAfter(from)).items.filter((i) => i.kind === 'events' && i.id === eventId(43));
    await resumed.until(has(resumed, `put events ${eventId(43)}`), 20_000, 'the resumed changes');
    expect(resumed.events.map((e) => e.event)).toEqual(['position', ...after.map(() => 'put')]);
    expect(JSON.parse(resumed.events[0]!.data)).toMatchObject({ vehicle: vehicleId(40) });
    for (const x of [s, one, resumed]) x.close();
  }, 60_000);

  it('sends a heartbeat comment while nothing changes', async () => {
    const s = await stream('?kinds=documents');
    await s.until(() => s.comments.length > 0, svc.heartbeatMs * 3 + 2_000, 'a heartbeat');
    expect(s.events).toEqual([]);
    s.close();
  });

  it('answers a bad parameter with 400 naming it, and a token in the URL with 400', async () => {
    const field = async (query: string, headers: Record<string, string> = auth()) => {
      const s = await openStream(svc.url, `/api/v5/stream${query}`, headers);
      expect(s.status, s.body).toBe(400);
      return (JSON.parse(s.body) as Array<{ field?: string }>)[0]!.field;
    };
    expect(await field('?nope=1')).toBe('nope');
    expect(await field('?kinds=trips,nothing')).toBe('kinds');
    expect(await field('?snapshot=everything')).toBe('snapshot');
    expect(await field('?vehicle=')).toBe('vehicle');
    expect(await field('', { ...auth(), 'last-event-id': 'not-a-cursor' })).toBe('Last-Event-ID');
    expect(await field('?lastEventId=x-y-z')).toBe('lastEventId');
    expect(await field('?token=writer-token-acme', {})).toBe('token');
    expect(await field('?access_token=writer-token-acme')).toBe('access_token');
    expect((await openStream(svc.url, '/api/v5/stream')).status).toBe(401);
    expect((await openStream(svc.url, '/api/v5/stream', auth('writeonly-token'))).status).toBe(403);
  });

  it('limits the streams of a token (429 with Retry-After); closing one frees a place', async () => {
    const token = auth('reader-token-acme');
    const held: SseStream[] = [];
    for (let i = 0; i < svc.perToken; i++) held.push(await stream('', token));
    const refused = await openStream(svc.url, '/api/v5/stream', token);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect(JSON.parse(refused.body)).toEqual([{ type: 'tooManyStreams', message: expect.stringContaining('OTM_STREAMS_PER_TOKEN') }]);
    // The token's ticket counts as the token.
    const ticket = (await (await request('POST', '/api/v5/stream/tickets', 'reader-token-acme')).json()) as { ticket: string };
    expect((await openStream(svc.url, `/api/v5/stream?ticket=${ticket.ticket}`)).status).toBe(429);
    // Another token has its own.
    const other = await stream('', auth('writer-token-acme'));
    held[0]!.close();
    const again = await stream('', token);
    expect(again.status).toBe(200);
    for (const s of [...held, other, again]) s.close();
  }, 30_000);

  it('tickets: good for the stream, for a minute, for the tenant of their token only', async () => {
    const res = await request('POST', '/api/v5/stream/tickets', 'reader-token-acme');
    expect(res.status).toBe(200);
    const body = (await res.json()) as { ticket: string; expiresAt: string };
    expect(Object.keys(body).sort()).toEqual(['expiresAt', 'ticket']);
    expect(Date.parse(body.expiresAt) - Date.now()).toBeGreaterThan(50_000);
    expect(Date.parse(body.expiresAt) - Date.now()).toBeLessThanOrEqual(61_000);
    expect(body.ticket).not.toContain('reader-token-acme');
    const s = await stream(`?ticket=${encodeURIComponent(body.ticket)}&kinds=vehicles`, {});
    await put('vehicles', vehicle(50));
    await s.until(has(s, `put vehicles ${vehicleId(50)}`), 20_000, 'a change, on a ticket');
    // Only the stream takes it.
    expect((await request('GET', `/api/v5/changes?ticket=${encodeURIComponent(body.ticket)}`, undefined)).status).toBe(401);
    expect((await request('POST', '/api/v5/stream/tickets', 'writeonly-token')).status).toBe(403);
    // No body is needed, whatever the Content-Type says.
    const noBody = await fetch(`${svc.url}/api/v5/stream/tickets`, {
      method: 'POST',
      headers: { ...auth('reader-token-acme'), 'content-type': 'application/json' },
    });
    expect(noBody.status).toBe(200);
    expect((await request('POST', '/api/v5/stream/tickets', undefined)).status).toBe(401);
    // Every process derives the same key from the same tokens: a ticket made here with that key
    // is taken; an expired, a tampered one, or one of another key, is not.
    const tickets = new StreamTickets(streamTicketKey(parseTokens(TOKENS)));
    const acme = { tenant: 'acme', scopes: new Set(['read'] as const) };
    const made = tickets.issue(acme, 'test').ticket;
    const made2 = await openStream(svc.url, `/api/v5/stream?ticket=${made}`);
    expect(made2.status).toBe(200);
    made2.close();
    const expired = tickets.issue(acme, 'test', Date.now() - 61_000).ticket;
    const [payload, sig] = made.split('.') as [string, string];
    const other = JSON.parse(Buffer.from(payload, 'base64url').toString()) as Record<string, unknown>;
    const tampered = `${Buffer.from(JSON.stringify({ ...other, t: 'globex' })).toString('base64url')}.${sig}`;
    const foreign = new StreamTickets(streamTicketKey([], 'another secret of at least thirty-two characters')).issue(acme, 'test').ticket;
    for (const t of [expired, tampered, foreign, 'x', `${payload}.`]) {
      const r = await openStream(svc.url, `/api/v5/stream?ticket=${encodeURIComponent(t)}`);
      expect(r.status, t).toBe(401);
      expect(r.headers['www-authenticate']).toMatch(/^Bearer/);
    }
    // Another tenant's ticket sees that tenant only.
    const globex = (await (await request('POST', '/api/v5/stream/tickets', 'writer-token-globex')).json()) as { ticket: string };
    const g = await stream(`?ticket=${encodeURIComponent(globex.ticket)}`, {});
    await put('vehicles', vehicle(51));
    await put('vehicles', vehicle(52), 'writer-token-globex');
    await g.until(has(g, `put vehicles ${vehicleId(52)}`), 20_000, "globex's change");
    await s.until(has(s, `put vehicles ${vehicleId(51)}`), 20_000, "acme's change");
    expect(briefs(g)).toEqual([`put vehicles ${vehicleId(52)}`]);
    expect(briefs(s)).not.toContain(`put vehicles ${vehicleId(52)}`);
    s.close();
    g.close();
  }, 60_000);
});

describe.skipIf(target() === 'distributed')('stream: closing the service', () => {
  it('app.close() ends open streams at once, catching up or attached, and stops its readings', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-stream-close-'));
    try {
      const svc = await createEmbeddedService(
        { dataDir, bodyLimit: 1_048_576, maxDepth: 64, streams: { perToken: 5, heartbeatMs: 60_000 } },
        parseTokens(TOKENS),
        createLogger('silent'),
      );
      const url = await svc.app.listen({ port: 0, host: '127.0.0.1' });
      const first = await openStream(url, '/api/v5/stream', auth());
      const res = await fetch(`${url}/api/v5/vehicles`, {
        method: 'PUT',
        headers: { ...auth(), 'content-type': 'application/json' },
        body: JSON.stringify(vehicle(60)),
      });
      expect(res.status).toBe(200);
      await first.until((ev) => ev.length === 1, 10_000, 'the change');
      const resumed = await openStream(url, '/api/v5/stream', { ...auth(), 'last-event-id': '0' });
      const other = await openStream(url, '/api/v5/stream?kinds=trips', auth('reader-token-acme'));
      for (const s of [first, resumed, other]) expect(s.status).toBe(200);
      const t0 = Date.now();
      await svc.close();
      expect(Date.now() - t0).toBeLessThan(3_000);
      await Promise.all([first.ended, resumed.ended, other.ended]);
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
