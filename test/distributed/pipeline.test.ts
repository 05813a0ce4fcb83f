/**
 * The distributed deployment, as separate processes on real services: the interface over HTTP
 * (model examples, semantics, auth), analysts' joins of events to entities in ClickHouse, 20,000
 * location events counted exactly in ClickHouse and by GET, a worker killed with SIGKILL
 * mid-stream, and Kafka gone (503 within the bound).
 */
import fs from 'node:fs';
import { createClient } from '@clickhouse/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices } from '../infra/services.js';
import { consignment, ids, trip, vehicle } from '../fixtures/documents.js';
import { eventually, startCluster, type Cluster } from './cluster.js';

const enabled = integrationEnabled('distributed pipeline (Kafka, Redis, ClickHouse, separate processes)');

interface Example {
  name: string;
  kind: string | null;
  valid: boolean;
  document: Record<string, unknown>;
}
const examples = JSON.parse(
  fs.readFileSync(new URL('../../packages/model/test/fixtures/model-examples.json', import.meta.url), 'utf8'),
) as Example[];

/** Whether every thread of process `pid` is stopped (state T in /proc), as SIGSTOP leaves it once delivered to all. */
const allThreadsStopped = (pid: number): boolean => {
  try {
    const tasks = fs.readdirSync(`/proc/${pid}/task`);
    return (
      tasks.length > 0 &&
      tasks.every((t) => {
        const stat = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
        return stat.slice(stat.lastIndexOf(')') + 2).startsWith('T');
      })
    );
  } catch {
    return false;
  }
};

const H = (token = 'writer-token-acme') => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

describe.skipIf(!enabled)('the distributed pipeline', () => {
  let c: Cluster;
  const put = async (kind: string, body: unknown, token?: string) => {
    const res = await fetch(`${c.url}/api/v5/${kind}`, { method: 'PUT', headers: H(token), body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any, headers: res.headers };
  };
  const get = async (path: string, token?: string) => {
    const res = await fetch(`${c.url}${path}`, { headers: H(token) });
    return { status: res.status, body: res.status === 200 ? ((await res.json()) as any) : undefined };
  };
  /** GET until it answers 200 (the pipeline is asynchronous). */
  const visible = (path: string, pred: (b: any) => boolean = () => true, token?: string) =>
    eventually(
      async () => {
        const r = await get(path, token);
        return r.status === 200 && pred(r.body) ? r.body : undefined;
      },
      20_000,
      `GET ${path}`,
    );
  const gone = (path: string) => eventually(async () => ((await get(path)).status === 404 ? true : undefined), 20_000, `404 at ${path}`);

  beforeAll(async () => {
    requireServices(['kafka', 'clickhouse', 'redis']);
    c = await startCluster();
  }, 120_000);
  afterAll(async () => c?.close(), 60_000);

  it('every model example: put, visible unchanged, delete 204, gone', async () => {
    for (const ex of examples.filter((e) => e.kind !== null && e.valid)) {
      const p = await put(ex.kind!, ex.document);
      expect(p.status, `${ex.name}: ${JSON.stringify(p.body)}`).toBe(200);
      const location = p.headers.get('location')!;
      // Several examples share ids (the same vehicle inline in many): wait for this version.
      const want = JSON.stringify(p.body);
      expect(await visible(location, (b) => JSON.stringify(b) === want)).toEqual(p.body);
      const d = await fetch(`${c.url}${location}`, { method: 'DELETE', headers: H() });
      expect(d.status).toBe(204);
      await gone(location);
    }
    const bad = examples.find((e) => e.name === 'attachTransportEquipment')!;
    const r = await put('actions', bad.document);
    expect(r.status).toBe(400);
    expect(r.body).toEqual([expect.objectContaining({ type: 'missingField' })]);
  }, 240_000);

  it('authentication and tenants as in the embedded deployment', async () => {
    expect((await fetch(`${c.url}/api/v5/vehicles/${ids.vehicle}`)).status).toBe(401);
    expect((await put('vehicles', vehicle, 'reader-token-acme')).status).toBe(403);
    await put('vehicles', vehicle);
    await visible(`/api/v5/vehicles/${ids.vehicle}`);
    expect((await get(`/api/v5/vehicles/${ids.vehicle}`, 'writer-token-globex')).status).toBe(404);
    expect((await get('/api/v5/vehicles/not-a-uuid')).status).toBe(400);
  });

  it('model semantics: inline entities, update, association, lifecycles', async () => {
    expect((await put('trips', trip)).status).toBe(200);
    await visible(`/api/v5/trips/${ids.trip}`);
    await visible(`/api/v5/locations/${ids.depot}`);
    await visible(`/api/v5/actions/${ids.stopLoad}`);
    await put('consignments', consignment);
    await visible(`/api/v5/consignments/${ids.consignment}`);
    const u = await put('events', {
      eventType: 'updateEvent',
      lifecycle: 'actual',
      entity: { entityType: 'consignment', id: ids.consignment, status: 'completed', description: null },
    });
    expect(u.status).toBe(200);
    const updated = await visible(`/api/v5/consignments/${ids.consignment}`, (b) => b.status === 'completed');
    expect(updated).not.toHaveProperty('description');
    expect(updated.goods).toEqual(consignment.goods);
    const tid = '9e000000-0000-4000-8000-000000000001';
    await put('trips', { entityType: 'trip', id: tid });
    await visible(`/api/v5/trips/${tid}`);
    await put('events', {
      eventType: 'associationCreatedEvent',
      entity1: { associationType: 'reference', entityType: 'trip', uuid: tid },
      entity2: { associationType: 'reference', entityType: 'vehicle', uuid: ids.vehicle },
    });
    await visible(`/api/v5/trips/${tid}`, (b) => b.vehicle?.uuid === ids.vehicle);
    await put('actions', { ...trip.actions[0]!.entity, lifecycle: 'realized' });
    await visible(`/api/v5/actions/${ids.stopLoad}`, (b) => b.lifecycle === 'realized');
    expect((await get(`/api/v5/actions/${ids.stopLoad}?lifecycle=planned`)).body.lifecycle).toBe('planned');
  }, 60_000);

  it("analysts join events to their trips and consignments in ClickHouse (the worker's entity export)", async () => {
    const [tripId, consignmentId, loadId] = [
      '5a000000-0000-4000-8000-000000000001',
      '5a000000-0000-4000-8000-000000000002',
      '5a000000-0000-4000-8000-000000000003',
    ];
    const reference = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
    expect((await put('consignments', { entityType: 'consignment', id: consignmentId, name: 'Pallets', status: 'confirmed' })).status).toBe(
      200,
    );
    const tripDoc = {
      entityType: 'trip',
      id: tripId,
      name: 'Export check',
      status: 'inTransit',
      vehicle: reference('vehicle', ids.vehicle),
      actions: [
        {
          associationType: 'inline',
          entity: { actionType: 'load', id: loadId, lifecycle: 'planned', consignment: reference('consignment', consignmentId) },
        },
      ],
    };
    expect((await put('trips', tripDoc)).status).toBe(200);
    // Telemetry naming the trip: a location event in its references, a fuel event in its `trip`.
    const event = (eventType: string, over: Record<string, unknown>) => ({
      eventType,
      lifecycle: 'actual',
      creationDate: '2026-11-23T07:00:00Z',
      vehicle: reference('vehicle', ids.vehicle),
      ...over,
    });
    const location = event('locationUpdateEvent', {
      geoReference: { type: 'latLonPointGeoReference', lat: 52.3, lon: 5.1 },
      references: [reference('trip', tripId)],
    });
    expect((await put('events', location)).status).toBe(200);
    expect(
      (await put('events', event('fuelConsumedEvent', { trip: reference('trip', tripId), amount: { value: 12.5, unit: 'l' } }))).status,
    ).toBe(200);

    // The queries of docs/analytics.md, as written (but for the consignment's id).
    const md = fs.readFileSync(new URL('../../docs/analytics.md', import.meta.url), 'utf8');
    const named = (name: string) =>
      [...md.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.startsWith(`-- name: ${name}\n`))!;
    const ch = createClient({ url: c.clickhouse.url });
    const query = async <T>(sql: string) => (await ch.query({ query: sql, format: 'JSONEachRow' })).json<T>();
    try {
      const perTrip = await eventually(
        async () =>
          (await query<Record<string, unknown>>(named('fuel_co2_per_trip_with_status'))).find(
            (r) => r.trip_id === tripId && r.fuel_l === 12.5,
          ),
        20_000,
        'the trip and its fuel in ClickHouse',
      );
      expect(perTrip).toEqual({ trip_id: tripId, name: 'Export check', status: 'inTransit', fuel_l: 12.5, co2_kg: 0 });
      const sql = named('events_of_consignment_trips').split('5e1f0c2a-7d3b-4c8e-9f10-2a3b4c5d6e01').join(consignmentId);
      const events = await eventually(
        async () => {
          const rows = await query<{ trip_id: string; event_type: string }>(sql);
          return rows.length === 2 ? rows : undefined;
        },
        20_000,
        "the consignment's trip's events",
      );
      expect(events.map((r) => `${r.trip_id} ${r.event_type}`).sort()).toEqual([
        `${tripId} fuelConsumedEvent`,
        `${tripId} locationUpdateEvent`,
      ]);
    } finally {
      await ch.close();
    }
  }, 60_000);

  it('20,000 location events with a worker killed mid-stream: exact counts in ClickHouse and by GET', async () => {
    const vehicles = 50;
    const total = 20_000;
    const base = Date.parse('2026-11-22T00:00:00Z');
    const idOf = (i: number) => `7e000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    const doc = (i: number) => ({
      eventType: 'locationUpdateEvent',
      id: idOf(i),
      lifecycle: 'actual',
      creationDate: new Date(base + i * 1000).toISOString(),
      geoReference: { type: 'latLonPointGeoReference', lat: 52 + (i % 100) / 1000, lon: 5 + (i % 77) / 1000 },
      vehicle: {
        associationType: 'reference',
        entityType: 'vehicle',
        uuid: `7f000000-0000-4000-8000-${String(i % vehicles).padStart(12, '0')}`,
      },
    });
    // Sent in bulk requests of 250 (each item checked like a PUT, all published together), eight
    // at a time; a third of the way in, the worker is killed with SIGKILL and a new one started.
    const chunk = 250;
    let next = 0;
    let acknowledged = 0;
    let killed = false;
    let killedAfter = 0;
    let workerStart = 0;
    const sender = async () => {
      while (next < total) {
        const from = next;
        next += chunk;
        const body = Array.from({ length: Math.min(chunk, total - from) }, (_, k) => doc(from + k));
        for (;;) {
          const r = await fetch(`${c.url}/api/v5/bulk/events`, { method: 'POST', headers: H(), body: JSON.stringify(body) });
          if (r.status === 200) {
            const res = (await r.json()) as { accepted: number; rejected: number };
            expect(res.rejected).toBe(0);
            acknowledged += res.accepted;
            break;
          }
          await new Promise((res) => setTimeout(res, 100));
        }
        if (!killed && acknowledged >= total / 3) {
          killed = true;
          // The worker dies without a chance to commit; a new one takes over its partitions.
          killedAfter = acknowledged;
          const killAt = Date.now();
          await c.stopRole('worker', 'SIGKILL');
          await c.startRole('worker', ['worker']);
          workerStart = Date.now() - killAt;
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, sender));
    const sentAt = Date.now();
    expect(acknowledged).toBe(total);

    const ch = createClient({ url: c.clickhouse.url });
    const count = async () => {
      const rs = await ch.query({
        query:
          "SELECT count() AS n, uniqExact(event_id) AS u FROM otm.otm_events FINAL WHERE tenant = 'acme' AND event_type = 'locationUpdateEvent' AND deleted = 0 AND event_id LIKE '7e000000-%'",
        format: 'JSONEachRow',
      });
      const [row] = await rs.json<{ n: string; u: string }>();
      return row;
    };
    const row = await eventually(
      async () => {
        const r = await count();
        return r && Number(r.u) === total ? r : undefined;
      },
      60_000,
      'all events in ClickHouse',
    );
    const countedIn = Date.now() - sentAt;
    expect(Number(row.u)).toBe(total);
    expect(Number(row.n)).toBe(total);
    await ch.close();

    // otm_events is written before otm_event_ids (which GET reads): wait for the id table too.
    for (let i = 0; i < total; i += 97) {
      expect(await visible(`/api/v5/events/${idOf(i)}`)).toEqual(doc(i));
    }
    console.log(
      `worker killed (SIGKILL) after ${killedAfter} of ${total} events acknowledged, a new one started in ${(workerStart / 1000).toFixed(1)} s: ` +
        `${acknowledged} acknowledged, ${row.u} distinct and ${row.n} rows in ClickHouse (FINAL; 0 lost), all there ${(countedIn / 1000).toFixed(1)} s after the last was acknowledged`,
    );
  }, 300_000);

  it('a compact event, in bulk or by PUT, is answered by GET as the bytes it was sent as, through Kafka and ClickHouse', async () => {
    const id = '7b000000-0000-4000-8000-000000000001';
    const sent =
      `{"eventType":"locationUpdateEvent","id":"${id}","lifecycle":"actual","geoReference":{"type":"latLonPointGeoReference","lat":52.4000,"lon":5.10},` +
      `"vehicle":{"associationType":"reference","entityType":"vehicle","uuid":"7b000000-0000-4000-8000-000000000099"},"externalAttributes":{"note":"\\u00e9 \\/"}}`;
    const spaced = {
      eventType: 'locationUpdateEvent',
      id: '7b000000-0000-4000-8000-000000000002',
      lifecycle: 'actual',
      geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
    };
    const r = await fetch(`${c.url}/api/v5/bulk/events`, {
      method: 'POST',
      headers: H(),
      body: `[${sent}, ${JSON.stringify(spaced, null, 2)}]`,
    });
    expect(((await r.json()) as { accepted: number }).accepted).toBe(2);
    const text = async (path: string) => {
      const res = await fetch(`${c.url}${path}`, { headers: H() });
      return res.status === 200 ? res.text() : undefined;
    };
    expect(await eventually(() => text(`/api/v5/events/${id}`), 20_000, 'the compact event')).toBe(sent);
    // Sent with whitespace: stored as JSON.stringify makes it, as a single PUT would.
    expect(await eventually(() => text(`/api/v5/events/${spaced.id}`), 20_000, 'the spaced event')).toBe(JSON.stringify(spaced));
    // A single PUT of a plain event: answered and stored as sent too.
    const one = sent.replaceAll(id, '7b000000-0000-4000-8000-000000000003');
    const p = await fetch(`${c.url}/api/v5/events`, { method: 'PUT', headers: H(), body: one });
    expect(await p.text()).toBe(one);
    expect(await eventually(() => text('/api/v5/events/7b000000-0000-4000-8000-000000000003'), 20_000, 'the PUT event')).toBe(one);
  }, 60_000);

  it("the query answers entities it read again from memory, and sees a worker's later change to them", async () => {
    const metric = async (name: string) => {
      const m = await (await fetch(`${c.processes.get('query')!.url}/metrics`)).text();
      return Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(m)?.[1] ?? 0);
    };
    expect(
      await eventually(async () => ((await metric('otm_entity_cache_tracking')) === 1 ? true : undefined), 10_000, 'tracking on'),
    ).toBe(true);
    const id = '7e000000-0000-4000-8000-000000000001';
    expect((await put('vehicles', { entityType: 'vehicle', id, name: 'first' })).status).toBe(200);
    await visible(`/api/v5/vehicles/${id}`, (v) => v.name === 'first');
    const hits = await metric('otm_entity_cache_reads_total\\{result="hit"\\}');
    for (let i = 0; i < 5; i++) expect((await get(`/api/v5/vehicles/${id}`)).body.name).toBe('first');
    expect(await metric('otm_entity_cache_reads_total\\{result="hit"\\}')).toBeGreaterThanOrEqual(hits + 4);
    // Changed by the worker (another process): the query drops what it kept when Redis says so.
    expect((await put('vehicles', { entityType: 'vehicle', id, name: 'second' })).status).toBe(200);
    await visible(`/api/v5/vehicles/${id}`, (v) => v.name === 'second');
    for (let i = 0; i < 5; i++) expect((await get(`/api/v5/vehicles/${id}`)).body.name).toBe('second');
  }, 60_000);

  it('two telemetry workers share the partitions; one leaving hands its partitions over without loss', async () => {
    await c.startRole('worker-2', ['worker', '--telemetry']);
    const idOf = (i: number) => `7d000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    const doc = (i: number) => ({
      eventType: 'locationUpdateEvent',
      id: idOf(i),
      lifecycle: 'actual',
      geoReference: { type: 'latLonPointGeoReference', lat: 51, lon: 4 + i / 10_000 },
      vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: `7c000000-0000-4000-8000-${String(i % 40).padStart(12, '0')}` },
    });
    const send = async (from: number, n: number) => {
      const r = await fetch(`${c.url}/api/v5/bulk/events`, {
        method: 'POST',
        headers: H(),
        body: JSON.stringify(Array.from({ length: n }, (_, k) => doc(from + k))),
      });
      expect(r.status).toBe(200);
      expect(((await r.json()) as { accepted: number }).accepted).toBe(n);
    };
    // Send until the second worker has taken partitions and written events of its own.
    const appliedBy2 = async () => {
      const m = await (await fetch(`${c.processes.get('worker-2')!.url}/metrics`)).text();
      return Number(/otm_applied_messages_total\{topic="telemetry"\} (\d+)/.exec(m)?.[1] ?? 0);
    };
    // Bounded in time, not in batches: the group's rebalance (worker-2 joining, worker-1 rejoining
    // on its next heartbeat) took 8-10 s alone and over 13 s with the rest of the suite running.
    const giveUp = Date.now() + 45_000;
    let b = 0;
    while (b < 10 || (await appliedBy2()) === 0) {
      expect(Date.now()).toBeLessThan(giveUp);
      await send(b * 200, 200);
      b++;
      if (b >= 10) await new Promise((r) => setTimeout(r, 200));
    }
    // The second worker leaves gracefully (SIGTERM: finishes its batch, commits, leaves the group).
    await c.stopRole('worker-2', 'SIGTERM');
    const sent = b + 10;
    for (; b < sent; b++) await send(b * 200, 200);
    const total = sent * 200;
    const ch = createClient({ url: c.clickhouse.url });
    const u = await eventually(
      async () => {
        const rs = await ch.query({
          query: "SELECT uniqExact(event_id) AS u, count() AS n FROM otm.otm_events FINAL WHERE deleted = 0 AND event_id LIKE '7d000000-%'",
          format: 'JSONEachRow',
        });
        const [row] = await rs.json<{ u: string; n: string }>();
        return row && Number(row.u) === total ? row : undefined;
      },
      60_000,
      'all events in ClickHouse',
    );
    expect(Number(u.n)).toBe(total);
    await ch.close();
  }, 120_000);

  it('Kafka unreachable: 503 with Retry-After within the bound; acknowledged writes survive; writes resume when it returns', async () => {
    const before = { entityType: 'vehicle', id: '7b000000-0000-4000-8000-000000000001', name: 'before the outage' };
    expect((await put('vehicles', before)).status).toBe(200);
    c.kafka.pause();
    // SIGSTOP is asynchronous: the writes below go only once every thread of the broker is
    // stopped (state T), so that none of them can have been taken by a broker still running.
    await eventually(async () => (allThreadsStopped(c.kafka.pid) ? true : undefined), 5_000, 'every thread of the broker stopped');
    // A PUT the ingress answers 200 while the broker is frozen would be a lost write unless it is
    // stored at the end: such a 200 is accepted only if GET then finds the write (checked below),
    // never taken as proof of anything. Up to three tries; one must be a 503.
    const acknowledged: Array<{ entityType: string; id: string; name: string }> = [];
    const statuses: number[] = [];
    let resumedAt: number;
    try {
      let refused = false;
      for (let i = 0; i < 3 && !refused; i++) {
        const during = { entityType: 'vehicle', id: `7b000000-0000-4000-8000-00000000001${i}`, name: `during ${i}` };
        const started = Date.now();
        const r = await fetch(`${c.url}/api/v5/vehicles`, { method: 'PUT', headers: H(), body: JSON.stringify(during) });
        statuses.push(r.status);
        if (r.status === 200) {
          acknowledged.push(during);
          continue;
        }
        expect(r.status).toBe(503);
        expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
        // Bounded by KAFKA_PUBLISH_TIMEOUT_MS (3 s here): the client is never left hanging.
        expect(Date.now() - started).toBeLessThan(15_000);
        refused = true;
      }
      expect(refused).toBe(true);
    } finally {
      c.kafka.resume();
      resumedAt = Date.now();
    }
    const after = { entityType: 'vehicle', id: '7b000000-0000-4000-8000-000000000002', name: 'after the outage' };
    let tries = 0;
    const again = await eventually(
      async () => {
        tries++;
        const r = await put('vehicles', after);
        return r.status === 200 ? r : undefined;
      },
      60_000,
      'writes accepted again',
    );
    const acceptedIn = Date.now() - resumedAt;
    expect(again.status).toBe(200);
    expect(await visible(`/api/v5/vehicles/${after.id}`)).toEqual(after);
    const visibleIn = Date.now() - resumedAt;
    expect(await visible(`/api/v5/vehicles/${before.id}`)).toEqual(before);
    for (const d of acknowledged) expect(await visible(`/api/v5/vehicles/${d.id}`)).toEqual(d);
    console.log(
      `kafka frozen (SIGSTOP): PUTs meanwhile answered ${statuses.join(',')} (${acknowledged.length} 200s, each found by GET at the end); ` +
        `after SIGCONT: a write accepted in ${(acceptedIn / 1000).toFixed(1)} s (${tries} tries), visible by GET in ${(visibleIn / 1000).toFixed(1)} s`,
    );
  }, 120_000);

  it('Kafka gone: PUT answers 503 with Retry-After within the bound, never 200', async () => {
    await c.kafka.kill();
    const started = Date.now();
    const r = await fetch(`${c.url}/api/v5/vehicles`, {
      method: 'PUT',
      headers: H(),
      body: JSON.stringify({ entityType: 'vehicle', name: 'lost?' }),
    });
    expect(r.status).toBe(503);
    expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(await r.json()).toEqual([{ type: 'unavailable', message: expect.any(String) }]);
    expect(Date.now() - started).toBeLessThan(15_000);
    const ready = await fetch(`${new URL(c.processes.get('ingress')!.url).href}readyz`);
    expect(ready.status).toBe(503);
  }, 60_000);
});
