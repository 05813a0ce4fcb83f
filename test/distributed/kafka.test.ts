/**
 * Kafka in the distributed deployment, on the broker docker-compose.yml pins (test/infra): the
 * topics `otm migrate` creates, and worker rebalances under a stream of writes.
 *
 * The rebalance test runs writers (PUTs of vehicles, bulk requests of location events) while the
 * workers' consumer groups change: a second worker joins, leaves (SIGTERM: it finishes, commits,
 * leaves the group), a third joins and the first is killed (SIGKILL: its partitions move once the
 * broker's session timeout expired, and what it applied without committing is delivered again).
 * In the end every acknowledged write must be stored once: on the bus once (the producer is
 * idempotent, and no client had to retry), each vehicle as it was put with one put in the change
 * feed, each event once in ClickHouse (after `FINAL`, which merges the rows of a redelivered batch)
 * and by GET, and in the change feed. What a crash redelivers is counted and printed: messages
 * applied twice are expected with at-least-once delivery, and harmless where the stores' writes
 * are idempotent. Not asserted, but printed: telemetry events with more than one put in the change
 * feed (a redelivered telemetry batch appends its puts again; seen: ~1,100 of 25,000 after the
 * SIGKILL).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { createClient } from '@clickhouse/client';
import { ConfigResourceTypes, Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOPICS } from '@otm/core';
import { DEFAULT_TOPIC_PARTITIONS, FAST_CONSUMER_SETTINGS, TOPIC_CONFIG } from '@otm/distributed';
import { decodeRecord } from '../../packages/distributed/src/kafka/record-pack.js';
import { integrationEnabled, requireServices } from '../infra/services.js';
import { OTM_BIN } from '../process.js';
import { eventually, startCluster, type Cluster } from './cluster.js';

const run = promisify(execFile);
const enabled = integrationEnabled('Kafka in the distributed deployment (migrate, rebalances under load)');
const H = { authorization: 'Bearer writer-token-acme', 'content-type': 'application/json' };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!enabled)('Kafka in the distributed deployment', () => {
  let c: Cluster;
  let kafka: Kafka;

  beforeAll(async () => {
    requireServices(['kafka', 'clickhouse', 'redis']);
    c = await startCluster();
    kafka = new Kafka({ brokers: c.kafka.brokers, logLevel: logLevel.NOTHING });
  }, 120_000);
  afterAll(async () => c?.close(), 60_000);

  it('otm migrate created the topics with their partitions and settings (the broker creates none itself); run again, it changes nothing', async () => {
    const admin = kafka.admin();
    await admin.connect();
    try {
      const describe = async () => {
        const names = Object.keys(DEFAULT_TOPIC_PARTITIONS);
        const meta = await admin.fetchTopicMetadata({ topics: names });
        const configs = await admin.describeConfigs({
          resources: names.map((name) => ({ type: ConfigResourceTypes.TOPIC, name, configNames: Object.keys(TOPIC_CONFIG) })),
          includeSynonyms: false,
        });
        return names.map((name) => ({
          name,
          partitions: meta.topics.find((t) => t.name === name)!.partitions.length,
          replicas: meta.topics.find((t) => t.name === name)!.partitions[0]!.replicas.length,
          config: Object.fromEntries(
            configs.resources.find((r) => r.resourceName === name)!.configEntries.map((e) => [e.configName, e.configValue]),
          ),
        }));
      };
      const expected = Object.entries(DEFAULT_TOPIC_PARTITIONS).map(([name, partitions]) => ({
        name,
        partitions,
        replicas: 1,
        config: TOPIC_CONFIG,
      }));
      expect(DEFAULT_TOPIC_PARTITIONS).toEqual({ [TOPICS.entities]: 12, [TOPICS.telemetry]: 24, [TOPICS.deadLetter]: 3 });
      expect(await describe()).toEqual(expected);
      // No other topic of ours: the test broker's auto-create is off, as it should be in production.
      expect((await admin.listTopics()).filter((t) => !t.startsWith('__')).sort()).toEqual(Object.keys(DEFAULT_TOPIC_PARTITIONS).sort());

      const again = await run(process.execPath, [OTM_BIN, 'migrate'], { env: { PATH: process.env.PATH ?? '', ...c.env } });
      expect(again.stdout).toContain('otm migrate: done');
      expect(await describe()).toEqual(expected);
    } finally {
      await admin.disconnect();
    }
  });

  it('two workers in one group under a stream of writes, with joins, a leave and a crash: every acknowledged write is stored exactly once', async () => {
    const vehicleId = (i: number) => `7a000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    const eventId = (i: number) => `7a100000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    const vehicle = (i: number) => ({ entityType: 'vehicle', id: vehicleId(i), name: `rebalance ${i}`, licensePlate: `RB-${i}` });
    const event = (i: number) => ({
      eventType: 'locationUpdateEvent',
      id: eventId(i),
      lifecycle: 'actual',
      creationDate: new Date(Date.parse('2026-11-20T00:00:00Z') + i * 1000).toISOString(),
      geoReference: { type: 'latLonPointGeoReference', lat: 51 + (i % 100) / 1000, lon: 4 + (i % 97) / 1000 },
      vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicleId(i % 40) },
    });

    // Writers: each round a PUT of a new vehicle and a bulk request of 50 new events, retried on
    // 503 until acknowledged; only acknowledged writes are counted.
    const acked = { vehicles: new Set<number>(), events: new Set<number>() };
    let retried = 0;
    let nextVehicle = 0;
    let nextEvent = 0;
    let writing = true;
    const send = async (path: string, body: unknown): Promise<Response> => {
      for (;;) {
        const r = await fetch(`${c.url}${path}`, {
          method: path.startsWith('/api/v5/bulk') ? 'POST' : 'PUT',
          headers: H,
          body: JSON.stringify(body),
        });
        if (r.status !== 503) return r;
        retried++;
        await r.arrayBuffer();
        await sleep(100);
      }
    };
    const writer = async () => {
      while (writing) {
        const v = nextVehicle++;
        const p = await send('/api/v5/vehicles', vehicle(v));
        expect(p.status).toBe(200);
        await p.arrayBuffer();
        acked.vehicles.add(v);
        const from = nextEvent;
        nextEvent += 50;
        const b = await send(
          '/api/v5/bulk/events',
          Array.from({ length: 50 }, (_, k) => event(from + k)),
        );
        expect(b.status).toBe(200);
        expect(((await b.json()) as { accepted: number }).accepted).toBe(50);
        for (let k = 0; k < 50; k++) acked.events.add(from + k);
      }
    };
    const applied = async (role: string) => {
      const m = await (await fetch(`${c.processes.get(role)!.url}/metrics`)).text();
      const n = (topic: string) => Number(new RegExp(`otm_applied_messages_total\\{topic="${topic}"\\} (\\d+)`).exec(m)?.[1] ?? 0);
      return { entities: n('entities'), telemetry: n('telemetry') };
    };
    /** Until `role` applied messages of both topics: it has partitions of both groups. */
    const working = (role: string) =>
      eventually(
        async () => {
          const a = await applied(role);
          return a.entities > 0 && a.telemetry > 0 ? a : undefined;
        },
        30_000,
        `${role} applying messages of both topics`,
      );
    const writers = Promise.all(Array.from({ length: 4 }, writer));
    const steps: string[] = [];
    const step = (what: string) => steps.push(`${what} (${acked.vehicles.size} vehicles, ${acked.events.size} events acknowledged)`);
    try {
      await eventually(async () => (acked.events.size >= 500 ? true : undefined), 30_000, 'the first writes');
      step('worker-2 joins');
      await c.startRole('worker-2', ['worker']);
      await working('worker-2');
      step('worker-2 leaves (SIGTERM)');
      await c.stopRole('worker-2', 'SIGTERM');
      await sleep(1_000);
      step('worker-3 joins');
      await c.startRole('worker-3', ['worker']);
      await working('worker-3');
      step('worker (the first) is killed (SIGKILL)');
      await c.stopRole('worker', 'SIGKILL');
      await sleep(4_000); // past the session timeout (3 s): worker-3 takes its partitions
      step('writes stop');
    } finally {
      writing = false;
      await writers;
    }
    const vehicles = acked.vehicles.size;
    const events = acked.events.size;
    expect(vehicles).toBe(nextVehicle);
    expect(events).toBe(nextEvent);

    // The bus: every acknowledged write once (the producer is idempotent; a write is published
    // again only when its client retried after a 503).
    const onBus = await countOnBus({ [TOPICS.entities]: vehicles, [TOPICS.telemetry]: events });
    const busEntities = onBus.get(TOPICS.entities)!;
    const busEvents = onBus.get(TOPICS.telemetry)!;
    for (let i = 0; i < vehicles; i++) expect(busEntities.get(vehicleId(i)), `vehicle ${i} on the bus`).toBeGreaterThanOrEqual(1);
    for (let i = 0; i < events; i++) expect(busEvents.get(eventId(i)), `event ${i} on the bus`).toBeGreaterThanOrEqual(1);
    const busCopies = [...busEntities.values(), ...busEvents.values()].reduce((a, n) => a + n - 1, 0);
    if (retried === 0) expect(busCopies).toBe(0);

    // Entities: each as put, and one put each in the change feed.
    await eventually(
      async () => ((await fetch(`${c.url}/api/v5/vehicles/${vehicleId(vehicles - 1)}`, { headers: H })).status === 200 ? true : undefined),
      60_000,
      'the last vehicle',
    );
    for (let i = 0; i < vehicles; i++) {
      const r = await fetch(`${c.url}/api/v5/vehicles/${vehicleId(i)}`, { headers: H });
      expect(r.status, `vehicle ${i}`).toBe(200);
      expect(await r.json()).toEqual(vehicle(i));
    }
    const puts = new Map<string, number>();
    for (const change of await feed('/api/v5/changes?kinds=vehicles&limit=1000')) {
      if (change.op === 'put' && change.id.startsWith('7a000000-')) puts.set(change.id, (puts.get(change.id) ?? 0) + 1);
    }
    const feedLost = Array.from({ length: vehicles }, (_, i) => vehicleId(i)).filter((id) => !puts.has(id));
    const feedTwice = [...puts.entries()].filter(([, n]) => n > 1);

    // Events: each once in ClickHouse after FINAL; rows written more than once before merging
    // are the redeliveries.
    const eventPuts = new Map<string, number>();
    for (const change of await feed('/api/v5/changes?kinds=events&limit=1000')) {
      if (change.op === 'put' && change.id.startsWith('7a100000-')) eventPuts.set(change.id, (eventPuts.get(change.id) ?? 0) + 1);
    }
    const ch = createClient({ url: c.clickhouse.url });
    const counts = async () => {
      const rs = await ch.query({
        query:
          "SELECT uniqExact(event_id) AS u, count() AS n, (SELECT count() FROM otm.otm_events WHERE event_id LIKE '7a100000-%') AS raw " +
          "FROM otm.otm_events FINAL WHERE tenant = 'acme' AND deleted = 0 AND event_id LIKE '7a100000-%'",
        format: 'JSONEachRow',
      });
      const [row] = await rs.json<{ u: string; n: string; raw: string }>();
      return { unique: Number(row!.u), final: Number(row!.n), raw: Number(row!.raw) };
    };
    const stored = await eventually(
      async () => {
        const r = await counts();
        return r.unique >= events ? r : undefined;
      },
      60_000,
      'all events in ClickHouse',
    );
    await ch.close();
    for (let i = 0; i < events; i += 37) {
      const r = await eventually(
        async () => {
          const g = await fetch(`${c.url}/api/v5/events/${eventId(i)}`, { headers: H });
          return g.status === 200 ? await g.json() : undefined;
        },
        20_000,
        `GET event ${i}`,
      );
      expect(r).toEqual(event(i));
    }

    console.log(
      [
        'rebalance under load:',
        ...steps.map((s) => `  ${s}`),
        `  acknowledged: ${vehicles} vehicles, ${events} events; ${retried} requests retried after a 503`,
        `  on the bus: ${busCopies} extra copies of acknowledged writes`,
        `  stored: ${stored.unique} events, ${stored.final} rows after FINAL; ${stored.raw - stored.final} more rows without FINAL (rows of redelivered batches not merged away yet)`,
        `  change feed: ${puts.size} vehicles with a put, ${feedLost.length} without, ${feedTwice.length} with more than one; ` +
          `events: ${eventPuts.size} with a put, ${events - eventPuts.size} without, ${[...eventPuts.values()].filter((n) => n > 1).length} with more than one`,
      ].join('\n'),
    );
    expect(stored).toMatchObject({ unique: events, final: events });
    expect(feedLost).toEqual([]);
    expect(feedTwice).toEqual([]);
    expect(eventPuts.size).toBe(events);
  }, 240_000);

  /** How many times each message key is on each topic, read from the start in a new group (until `expected` keys seen). */
  async function countOnBus(expected: Record<string, number>): Promise<Map<string, Map<string, number>>> {
    const counts = new Map(Object.keys(expected).map((t) => [t, new Map<string, number>()]));
    const consumer = kafka.consumer({ groupId: `count-${Date.now()}`, ...FAST_CONSUMER_SETTINGS });
    await consumer.connect();
    try {
      await consumer.subscribe({ topics: Object.keys(expected), fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ topic, message }) => {
          for (const d of decodeRecord(topic, message)) {
            if (d.envelope?.message.op !== 'put' || d.envelope.message.inlineOnly) continue;
            const m = counts.get(topic)!;
            m.set(d.envelope.message.key, (m.get(d.envelope.message.key) ?? 0) + 1);
          }
        },
      });
      await eventually(
        async () => (Object.entries(expected).every(([t, n]) => counts.get(t)!.size >= n) ? true : undefined),
        60_000,
        'every acknowledged write read back from Kafka',
      );
      // A little longer, for copies behind the last new key.
      await sleep(1_000);
    } finally {
      await consumer.disconnect();
    }
    return counts;
  }

  /** The change feed from `url` until a page comes back empty. */
  async function feed(url: string): Promise<{ op: string; id: string }[]> {
    const items: { op: string; id: string }[] = [];
    let next: string | null = url;
    for (let pages = 0; next !== null && pages < 1_000; pages++) {
      const page = (await (await fetch(`${c.url}${next}`, { headers: H })).json()) as {
        items: { op: string; id: string }[];
        next: string | null;
      };
      if (page.items.length === 0) break;
      items.push(...page.items);
      next = page.next;
    }
    return items;
  }
});
