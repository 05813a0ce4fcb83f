/**
 * RedisEntityStore `catchUpLists` (packages/distributed/src/redis/catch-up.ts), which `otm migrate`
 * runs: entities a Redis of 0.1.0 stored (their `P:e:` hashes and nothing else) are listed as a unit
 * would have listed them, once; an entity with a list record is left alone, also one a unit lists
 * while the catch-up reads it. On a single Redis, and on a Redis Cluster (one redis-server with
 * every slot, started here: cross-slot commands are refused as on any Cluster). And `otm migrate`
 * (the built command) runs it and says what it listed.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyChanges, createLogger, encodeListRecord, facetsOf, TOPICS, type Envelope, type ListScan } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { RedisEntityStore } from '@otm/distributed';
import { findExecutable, freePort, integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';
import { OTM_BIN } from '../process.js';
import { onOwnRedis, removeKeys, testPrefix } from '../contract/fixture.js';

type Doc = Record<string, unknown>;
type Client = Redis | Cluster;

/** A tenant whose name keys.ts escapes (`:`, `{`, `}`, `%`) in the hash tag. */
const T = 'acme:x{y}%';
const ESCAPED_T = 'acme%3Ax%7By%7D%25';
const V = '7b000000-0000-4000-8000-0000000000aa';
const A = '7b000000-0000-4000-8000-000000000001';
const B = '7b000000-0000-4000-8000-000000000002';
const C = '7b000000-0000-4000-8000-000000000003';
const D = '7b000000-0000-4000-8000-000000000004';
const X = '7b000000-0000-4000-8000-000000000005';

const tripA: Doc = {
  id: A,
  entityType: 'trip',
  status: 'planned',
  // Upper case: listed under the vehicle's storage key (lower case).
  vehicle: { associationType: 'reference', uuid: V.toUpperCase(), entityType: 'vehicle' },
};
const tripB: Doc = { id: B, entityType: 'trip', status: 'inTransit' };
const vehicle: Doc = { id: V, entityType: 'vehicle', licensePlate: 'AB-12' };
const requested: Doc = { id: X, entityType: 'action', actionType: 'stop', lifecycle: 'requested' };
const actual: Doc = { id: X, entityType: 'action', actionType: 'stop', lifecycle: 'actual' };

/** Writes one version as 0.1.0 did: a field of the entity's hash, `modified acceptedAt \n json`, nothing else. */
async function writeAsBefore(
  raw: Client,
  prefix: string,
  tenant: string,
  kind: KindSegment,
  key: string,
  rank: number,
  at: number,
  doc: Doc,
) {
  const escaped = tenant === T ? ESCAPED_T : tenant;
  await raw.hset(`${prefix}:e:{${escaped}:${kind}:${key}}`, String(rank), `${at - 5} ${at}\n${JSON.stringify(doc)}`);
}

const logger = createLogger('silent');

/** A put of `doc` through apply-changes, as the entity worker applies it. */
async function putByUnit(store: RedisEntityStore, tenant: string, kind: KindSegment, key: string, doc: Doc): Promise<void> {
  const put: Envelope = { topic: TOPICS.entities, key, message: { v: 1, op: 'put', tenant, kind, key, acceptedAt: Date.now(), doc } };
  await store.unit((tx) => applyChanges(tx, [put], { logger }));
}

const scan = (store: RedisEntityStore, facet: string, more: Partial<ListScan> = {}) =>
  store.list({ tenant: T, kind: 'trips', facet, limit: 100, ...more });
const keysOf = async (p: Promise<Array<{ key: string }>>) => (await p).map((e) => e.key);

interface Setup {
  /** A client to write and read raw keys with. */
  readonly raw: Client;
  /** A store on `prefix`; `client`: on that client (which the store does not close). */
  readonly store: (prefix: string, client?: Client) => RedisEntityStore;
  /** A new client of the same server(s), closed by the caller. */
  readonly client: () => Client;
}

function catchUpTests(setup: () => Setup) {
  it('lists the entities stored without lists as a unit would have, once, and leaves a listed entity alone', async () => {
    const { raw, store: open } = setup();
    const prefix = testPrefix();
    const store = open(prefix);
    try {
      await writeAsBefore(raw, prefix, T, 'trips', A, 0, 3000, tripA);
      await writeAsBefore(raw, prefix, T, 'trips', B, 0, 1000, tripB);
      await writeAsBefore(raw, prefix, T, 'vehicles', V, 0, 2000, vehicle);
      // An action with two lifecycle versions: listed at the newer, under the facets of both.
      await writeAsBefore(raw, prefix, T, 'actions', X, 1, 1500, requested);
      await writeAsBefore(raw, prefix, T, 'actions', X, 4, 2500, actual);
      await writeAsBefore(raw, prefix, 'u', 'trips', C, 0, 500, { id: C, entityType: 'trip', status: 'planned' });
      // An entity a unit listed already (its record says otherwise than its document would): kept as it is.
      await store.unit(async (tx) => {
        tx.put(T, {
          kind: 'trips',
          key: D,
          lifecycleRank: 0,
          json: JSON.stringify({ id: D, status: 'planned' }),
          stamp: { modified: 1, acceptedAt: 2 },
        });
        tx.setListRecord(T, 'trips', D, { at: 9000, ranks: { 0: ['', 'status=done'] } }, undefined);
      });
      const recordD = await raw.get(`${prefix}:lr:{${ESCAPED_T}:trips:${D}}`);
      expect(recordD).toBe(encodeListRecord({ at: 9000, ranks: { 0: ['', 'status=done'] } }));
      expect(await scan(store, '')).toEqual([{ at: 9000, key: D }]);

      // Batches of two: the entities of one SCAN reply are written in several.
      expect(await store.catchUpLists({ batch: 2, scanCount: 3 })).toEqual({ entities: 6, listed: 5 });

      expect(await scan(store, '')).toEqual([
        { at: 1000, key: B },
        { at: 3000, key: A },
        { at: 9000, key: D },
      ]);
      expect(await keysOf(scan(store, 'status=planned'))).toEqual([A]);
      expect(await keysOf(scan(store, 'status=inTransit'))).toEqual([B]);
      expect(await keysOf(scan(store, `vehicle=${V}`))).toEqual([A]);
      expect(await keysOf(scan(store, 'status=done'))).toEqual([D]);
      expect(await store.list({ tenant: T, kind: 'vehicles', facet: '', limit: 10 })).toEqual([{ at: 2000, key: V }]);
      expect(await store.list({ tenant: T, kind: 'vehicles', facet: 'licensePlate=AB-12', limit: 10 })).toEqual([{ at: 2000, key: V }]);
      for (const f of ['', 'lifecycle=requested', 'lifecycle=actual', 'actionType=stop'])
        expect(await store.list({ tenant: T, kind: 'actions', facet: f, limit: 10 }), f).toEqual([{ at: 2500, key: X }]);
      expect(await store.list({ tenant: 'u', kind: 'trips', facet: '', limit: 10 })).toEqual([{ at: 500, key: C }]);
      // The records a unit writes for a new entity, byte for byte.
      expect(await raw.get(`${prefix}:lr:{${ESCAPED_T}:trips:${A}}`)).toBe(
        encodeListRecord({ at: 3000, ranks: { 0: facetsOf('trips', tripA) } }),
      );
      expect(await raw.get(`${prefix}:lr:{${ESCAPED_T}:actions:${X}}`)).toBe(
        encodeListRecord({ at: 2500, ranks: { 1: facetsOf('actions', requested), 4: facetsOf('actions', actual) } }),
      );
      expect(await raw.get(`${prefix}:lr:{${ESCAPED_T}:trips:${D}}`)).toBe(recordD);
      expect((await raw.smembers(`${prefix}:tenants`)).sort()).toEqual([T, 'u'].sort());

      // Once: a second run lists nothing and changes nothing.
      expect(await store.catchUpLists()).toEqual({ entities: 6, listed: 0 });
      expect(await keysOf(scan(store, ''))).toEqual([B, A, D]);

      // A later change moves the entity from where the catch-up listed it, as for any entity.
      const t0 = Date.now();
      await putByUnit(store, T, 'trips', B, { ...tripB, status: 'cancelled' });
      expect(await keysOf(scan(store, 'status=inTransit'))).toEqual([]);
      expect(await keysOf(scan(store, 'status=cancelled'))).toEqual([B]);
      const all = await scan(store, '');
      expect(all.map((p) => p.key)).toEqual([A, D, B]);
      expect(all[2]!.at).toBeGreaterThanOrEqual(t0);
    } finally {
      await store.close();
    }
  });

  it('leaves an entity that a unit lists while the catch-up reads it to the unit', async () => {
    const { raw, store: open, client } = setup();
    const prefix = testPrefix();
    const writer = open(prefix);
    const own = client();
    const t0 = Date.now();
    let raced = 0;
    // After the catch-up read B's versions, and before it writes, a worker applies a change to B.
    const race = (conn: Client) => {
      const read = conn.hgetallBuffer.bind(conn);
      conn.hgetallBuffer = async (key: string) => {
        const got = await read(key);
        if (key.includes(B) && raced++ === 0) await putByUnit(writer, T, 'trips', B, { ...tripB, status: 'cancelled' });
        return got;
      };
      return conn;
    };
    if (own instanceof Redis) {
      // A single Redis: the catch-up reads on a connection of its own.
      const duplicate = own.duplicate.bind(own);
      own.duplicate = ((...args: Parameters<Redis['duplicate']>) => race(duplicate(...args))) as Redis['duplicate'];
    } else race(own);
    const store = open(prefix, own);
    try {
      await writeAsBefore(raw, prefix, T, 'trips', A, 0, 3000, tripA);
      await writeAsBefore(raw, prefix, T, 'trips', B, 0, 1000, tripB);
      const done = await store.catchUpLists();
      expect(raced).toBeGreaterThan(0);
      expect(done.entities).toBe(2);
      const all = await scan(store, '');
      // B once, where the unit listed it; not also at the time the catch-up had read (1000).
      expect(all.map((p) => p.key)).toEqual([A, B]);
      expect(all[0]!.at).toBe(3000);
      expect(all[1]!.at).toBeGreaterThanOrEqual(t0);
      expect(await keysOf(scan(store, 'status=inTransit'))).toEqual([]);
      expect(await keysOf(scan(store, 'status=cancelled'))).toEqual([B]);
      const recordB = JSON.parse((await raw.get(`${prefix}:lr:{${ESCAPED_T}:trips:${B}}`))!) as { at: number };
      expect(recordB.at).toBe(all[1]!.at);
    } finally {
      await store.close();
      await writer.close();
      own.disconnect();
    }
  });
}

onOwnRedis('list catch-up: single Redis', (url) => {
  describe('catchUpLists on a single Redis', () => {
    const prefixes: string[] = [];
    let raw: Redis;
    beforeAll(() => {
      raw = new Redis(url());
    });
    afterAll(async () => {
      await raw.quit();
      for (const p of prefixes) await removeKeys(url(), p);
    });
    catchUpTests(() => ({
      raw,
      store: (prefix, client) => {
        prefixes.push(prefix);
        return new RedisEntityStore(client ? { client, prefix } : { url: url(), prefix });
      },
      client: () => new Redis(url()),
    }));
  });
});

/** One redis-server in cluster mode holding every slot. */
async function startOneNodeCluster(): Promise<{ port: number; stop(): Promise<void> }> {
  const server = findExecutable('redis-server');
  if (!server) throw new Error('redis-server is not installed: apt-get install -y redis-server');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-redis-cluster-'));
  const port = await freePort();
  const child: ChildProcess = spawn(
    server,
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--cluster-enabled',
      'yes',
      '--cluster-announce-ip',
      '127.0.0.1',
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      'no',
    ],
    { cwd: dir, stdio: 'ignore' },
  );
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  // Reconnects every 20 ms until the server listens; commands wait for it (maxRetriesPerRequest: null).
  const admin = new Redis({ port, host: '127.0.0.1', retryStrategy: () => 20, maxRetriesPerRequest: null });
  admin.on('error', () => {});
  try {
    const deadline = Date.now() + 10_000;
    const until = async (what: string, ok: () => Promise<boolean>) => {
      for (;;) {
        if (await ok().catch(() => false)) return;
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the one-node Redis Cluster: ${what}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await until('no answer', async () => (await admin.ping()) === 'PONG');
    await admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    await until('not ok', async () => String(await admin.call('CLUSTER', 'INFO')).includes('cluster_state:ok'));
  } catch (e) {
    admin.disconnect();
    await stop();
    throw e;
  }
  admin.disconnect();
  return { port, stop };
}

describe.skipIf(!integrationEnabled('list catch-up: Redis Cluster'))('catchUpLists on a Redis Cluster', () => {
  let cluster: { port: number; stop(): Promise<void> } | undefined;
  const clients: Cluster[] = [];
  const newClient = () => {
    const c = new Cluster([{ host: '127.0.0.1', port: cluster!.port }]);
    c.on('error', () => {});
    clients.push(c);
    return c;
  };
  let raw: Cluster;
  beforeAll(async () => {
    requireServices(['redis']);
    cluster = await startOneNodeCluster();
    raw = newClient();
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await cluster?.stop();
  });
  catchUpTests(() => ({
    raw,
    store: (prefix, client) => new RedisEntityStore({ client: client ?? newClient(), prefix }),
    client: newClient,
  }));
});

describe.skipIf(!integrationEnabled('list catch-up: otm migrate'))('otm migrate on a Redis of 0.1.0', () => {
  let redis: RedisService | undefined;
  let dir: string | undefined;
  beforeAll(async () => {
    requireServices(['redis']);
    // A server of its own: the command writes under the default prefix, `otm`.
    redis = await startRedis({ own: true });
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-migrate-'));
  });
  afterAll(async () => {
    await redis?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('lists the entities stored without lists and says how many, then none the second time', async () => {
    const raw = new Redis(redis!.url);
    const store = new RedisEntityStore({ url: redis!.url });
    try {
      await writeAsBefore(raw, 'otm', T, 'trips', A, 0, 3000, tripA);
      await writeAsBefore(raw, 'otm', T, 'vehicles', V, 0, 2000, vehicle);
      const env = { PATH: process.env.PATH ?? '', OTM_ENTITY_STORE: 'redis', REDIS_URL: redis!.url, OTM_DATA_DIR: dir! };
      const migrate = async () => (await promisify(execFile)(process.execPath, [OTM_BIN, 'migrate'], { env })).stdout;
      expect(await migrate()).toBe('otm migrate: listed 2 entities stored without lists (of 2)\notm migrate: done\n');
      expect(await keysOf(scan(store, `vehicle=${V}`))).toEqual([A]);
      expect(await store.list({ tenant: T, kind: 'vehicles', facet: '', limit: 10 })).toEqual([{ at: 2000, key: V }]);
      expect(await migrate()).toBe('otm migrate: listed 0 entities stored without lists (of 2)\notm migrate: done\n');
    } finally {
      await store.close();
      await raw.quit();
    }
  });
});
