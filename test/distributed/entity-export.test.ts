/**
 * The entity export (services/worker/src/entity-export.ts) on a real Redis and ClickHouse:
 * entity changes applied by the entity worker are copied from the Redis change feed into
 * otm_entities; later versions win, deletes leave tombstones, telemetry is not copied, the cursor is
 * saved only after an insert succeeded, a tenant without a cursor starts with a snapshot of every
 * entity stored (also those the feed no longer holds), an expired cursor is reported and followed
 * by a snapshot, one exporter works at a time, and the loop stops cleanly.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, registry, TOPICS, type EntityChangeSink, type Envelope, type EventStore, type Logger } from '@otm/core';
import { ClickHouseEventStore, RedisEntityStore } from '@otm/distributed';
import type { KindSegment } from '@otm/model';
import { EXPORTED_KINDS, EntityExporter, entityWorker, startEntityExport } from '@otm/worker';
import {
  freePort,
  integrationEnabled,
  requireServices,
  startClickHouse,
  startRedis,
  type RedisService,
  type UrlService,
} from '../infra/services.js';

const silent = createLogger('silent');

/** A logger whose lines (JSON) are kept. */
function capturingLogger(): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger('info', { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { logger, lines };
}

const ref = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Row {
  kind: string;
  entity_id: string;
  lifecycle_rank: number;
  status: string;
  name: string;
  linked_ids: string[];
  version: string;
  deleted: number;
  doc: string;
}

const enabled = integrationEnabled('entity export (Redis change feed to ClickHouse otm_entities)');
describe.skipIf(!enabled)('the entity export', () => {
  let redis: RedisService;
  let clickhouse: UrlService;
  let ch: ClickHouseEventStore;
  const stores: RedisEntityStore[] = [];

  beforeAll(async () => {
    requireServices(['redis', 'clickhouse']);
    [redis, clickhouse] = await Promise.all([startRedis({ own: true }), startClickHouse()]);
    ch = new ClickHouseEventStore({ url: clickhouse.url, database: `otm_export_${randomUUID().slice(0, 8)}` });
    await ch.migrate();
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await ch?.dropDatabase();
    await ch?.close();
    await clickhouse?.stop();
    await redis?.stop();
  });

  /** A Redis entity store with keys of its own. */
  const newStore = (opts: { feedRetentionMs?: number } = {}) => {
    const s = new RedisEntityStore({ url: redis.url, prefix: `ex${randomUUID().slice(0, 8)}`, ...opts });
    stores.push(s);
    return s;
  };
  let accepted = 1_000;
  /** Applies puts and deletes as the entity worker does, one unit of work. */
  const apply = (store: RedisEntityStore, tenant: string, changes: Array<[KindSegment, Record<string, unknown> | string]>) =>
    entityWorker(store, { logger: silent })(
      changes.map(([kind, doc]): Envelope => {
        const key = typeof doc === 'string' ? doc : (doc.id as string);
        const acceptedAt = ++accepted;
        return {
          topic: TOPICS.entities,
          key,
          message:
            typeof doc === 'string'
              ? { v: 1, op: 'delete', tenant, kind, key, acceptedAt }
              : { v: 1, op: 'put', tenant, kind, key, acceptedAt, doc },
        };
      }),
    );
  const rows = (tenant: string, where = 'deleted = 0') =>
    ch.query<Row>(
      `SELECT kind, entity_id, lifecycle_rank, status, name, linked_ids, version, deleted, doc FROM ${ch.database}.otm_entities FINAL ` +
        `WHERE tenant = {tenant:String} AND ${where} ORDER BY kind, entity_id, lifecycle_rank`,
      { tenant },
    );
  /** The cursor of the last change in the tenant's feed. */
  const feedEnd = async (store: RedisEntityStore, tenant: string) => {
    let after: string | undefined;
    for (;;) {
      const page = await store.feed.read({ tenant, limit: 1000, ...(after === undefined ? {} : { after }) });
      if (page.next === undefined || page.next === after) return after;
      after = page.next;
    }
  };

  it('copies every entity a unit stored, then later versions win and deletes leave tombstones; telemetry is not copied', async () => {
    const store = newStore();
    const tenant = 'acme';
    const [T, V, C, A] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    const trip = (status: string) => ({
      entityType: 'trip',
      id: T,
      name: 'Daily supply',
      status,
      vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id: V, licensePlate: 'AB-12-CD' } },
      actions: [
        { associationType: 'inline', entity: { actionType: 'load', id: A, lifecycle: 'planned', consignment: ref('consignment', C) } },
      ],
    });
    await apply(store, tenant, [['consignments', { entityType: 'consignment', id: C, name: 'Order 1', status: 'confirmed' }]]);
    const exporter = new EntityExporter(store, ch, silent, { pageSize: 2 });
    // No cursor yet: a snapshot (the consignment), then the feed after it.
    expect(await exporter.pass()).toEqual({ more: false, rows: 1 });
    await apply(store, tenant, [['trips', trip('planned')]]);
    // Telemetry events as the telemetry worker records them (their rows are in otm_events).
    await store.telemetry.appendFeed([
      { tenant, kind: 'events', key: randomUUID(), lifecycleRank: 4, op: 'put' },
      { tenant, kind: 'events', key: randomUUID(), lifecycleRank: 0, op: 'delete' },
    ]);

    const first = await exporter.pass();
    expect(first).toEqual({ more: false, rows: 3 });
    let live = await rows(tenant);
    expect(live.map((r) => `${r.kind} ${r.entity_id} ${r.lifecycle_rank}`)).toEqual(
      [`actions ${A} 2`, `consignments ${C} 0`, `trips ${T} 0`, `vehicles ${V} 0`].sort(),
    );
    const tripRow = live.find((r) => r.kind === 'trips')!;
    expect(tripRow).toMatchObject({ status: 'planned', name: 'Daily supply', deleted: 0 });
    expect(tripRow.linked_ids).toEqual([V, A, C]);
    expect(JSON.parse(tripRow.doc)).toEqual(await store.get(tenant, 'trips', T).then((d) => JSON.parse(d!.json)));
    expect(await rows(tenant, "kind = 'events'")).toEqual([]);
    expect(await store.feedExport.cursor(tenant)).toBe(await feedEnd(store, tenant));

    // A later version wins; a delete hides every version.
    await apply(store, tenant, [['trips', trip('completed')]]);
    await apply(store, tenant, [['consignments', C]]);
    expect((await exporter.pass()).rows).toBeGreaterThanOrEqual(7); // the trip and its holders' versions, 6 tombstones
    live = await rows(tenant);
    const updated = live.find((r) => r.kind === 'trips')!;
    expect(updated.status).toBe('completed');
    expect(BigInt(updated.version)).toBeGreaterThan(BigInt(tripRow.version));
    expect(live.some((r) => r.kind === 'consignments')).toBe(false);
    const tombstones = await rows(tenant, `kind = 'consignments' AND deleted = 1`);
    expect(tombstones.map((r) => r.lifecycle_rank)).toEqual([0, 1, 2, 3, 4, 5]);

    // Copied again (a lost cursor: a snapshot): the same state, every live row now at the version of the feed's end.
    await store.feedExport.saveCursor(tenant, undefined);
    await exporter.pass();
    const end = (await feedEnd(store, tenant))!;
    const again = await rows(tenant);
    const withoutVersion = (r: Row) => ({ ...r, version: undefined });
    expect(again.map(withoutVersion)).toEqual(live.map(withoutVersion));
    expect(again.map((r) => r.version)).toEqual(again.map(() => String(store.feedExport.versionOf(end))));
    expect((await rows(tenant, `kind = 'consignments' AND deleted = 1`)).map((r) => r.version)).toEqual(tombstones.map((r) => r.version));
    expect(await store.feedExport.cursor(tenant)).toBe(end);
    await exporter.close();
  });

  it('saves the cursor only once the insert succeeded: a failed insert loses nothing, in a snapshot or in the feed', async () => {
    const store = newStore();
    const tenant = 'flaky';
    const locations = async (ids: string[]) => {
      for (const id of ids) await apply(store, tenant, [['locations', { entityType: 'location', id, name: `L ${id.slice(0, 4)}` }]]);
    };
    const ids = Array.from({ length: 5 }, () => randomUUID()).sort();
    await locations(ids);

    // ClickHouse unreachable: nothing saved.
    const down = new ClickHouseEventStore({ url: `http://127.0.0.1:${await freePort()}`, database: ch.database, requestTimeoutMs: 2_000 });
    const unreachable = new EntityExporter(store, down, silent, { pageSize: 2 });
    await expect(unreachable.pass()).rejects.toMatchObject({ retryable: true });
    expect(await store.feedExport.cursor(tenant)).toBeUndefined();
    await unreachable.close();
    await down.close();

    // The snapshot's second insert fails: no cursor saved, the first page's rows are in.
    let inserts = 0;
    const failsSecond: EntityChangeSink = {
      writeEntityChanges: async (changes) => {
        if (++inserts === 2) throw new Error('insert refused');
        return ch.writeEntityChanges(changes);
      },
    };
    const flaky = new EntityExporter(store, failsSecond, silent, { pageSize: 2 });
    await expect(flaky.pass()).rejects.toThrow('insert refused');
    expect(await store.feedExport.cursor(tenant)).toBeUndefined();
    expect((await rows(tenant)).map((r) => r.entity_id)).toEqual(ids.slice(0, 2));
    // The next pass takes the snapshot again, whole, and only then saves the feed's end.
    const head = (await feedEnd(store, tenant))!;
    expect(await flaky.pass()).toEqual({ more: false, rows: 5 });
    expect(await store.feedExport.cursor(tenant)).toBe(head);
    expect((await rows(tenant)).map((r) => r.entity_id)).toEqual(ids);

    // In the feed: the second insert fails, the first page's cursor is saved, not the second's.
    const later = Array.from({ length: 5 }, () => randomUUID()).sort();
    await locations(later);
    inserts = 0;
    await expect(flaky.pass()).rejects.toThrow('insert refused');
    const page1 = await store.feed.read({ tenant, limit: 2, after: head });
    expect(await store.feedExport.cursor(tenant)).toBe(page1.next);
    expect((await rows(tenant)).map((r) => r.entity_id)).toEqual([...ids, ...later.slice(0, 2)].sort());
    await flaky.close();

    // The next exporter goes on from there: every location, once.
    const next = new EntityExporter(store, ch, silent, { pageSize: 2 });
    expect(await next.pass()).toEqual({ more: false, rows: 3 });
    expect((await rows(tenant)).map((r) => r.entity_id)).toEqual([...ids, ...later].sort());
    await next.close();
  });

  it('a cursor the feed no longer holds: a warning naming the tenant, then a snapshot brings every entity up to date', async () => {
    const store = newStore({ feedRetentionMs: 300 });
    const tenant = 'late';
    const [W, X, Y, Z] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    await apply(store, tenant, [['actors', { entityType: 'actor', id: W, name: 'W' }]]);
    await apply(store, tenant, [['actors', { entityType: 'actor', id: X, name: 'X' }]]);
    const before = new EntityExporter(store, ch, silent, {});
    await before.pass();
    await before.close();
    expect((await rows(tenant)).map((r) => r.name).sort()).toEqual(['W', 'X']);
    // The export stops; Y is stored and W deleted, and retention removes both changes before the export comes back.
    await apply(store, tenant, [['actors', { entityType: 'actor', id: Y, name: 'Y' }]]);
    await apply(store, tenant, [['actors', W]]);
    await sleep(400);
    await apply(store, tenant, [['actors', { entityType: 'actor', id: Z, name: 'Z' }]]);

    const { logger, lines } = capturingLogger();
    const after = new EntityExporter(store, ch, logger, {});
    await after.pass();
    const warnings = lines.filter((l) => l.level === 40);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ tenant });
    expect(String(warnings[0]!.msg)).toMatch(/OTM_FEED_RETENTION/);
    expect(String(warnings[0]!.msg)).toMatch(/deleted/);
    // Y, stored in the gap, is copied by the snapshot; W's delete is lost (as the warning says).
    expect((await rows(tenant)).map((r) => r.name).sort()).toEqual(['W', 'X', 'Y', 'Z']);
    expect(await store.feedExport.cursor(tenant)).toBe(await feedEnd(store, tenant));
    await after.pass();
    expect(lines.filter((l) => l.level === 40)).toHaveLength(1);
    await after.close();
  });

  it('a first export copies every entity stored, also those whose changes the feed no longer holds (a snapshot); later changes win', async () => {
    const store = newStore({ feedRetentionMs: 300 });
    const tenant = 'snapshot';
    const [T, V, A, L] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    const trip = (status: string) => ({
      entityType: 'trip',
      id: T,
      name: 'Old trip',
      status,
      vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id: V, licensePlate: 'OLD-1' } },
    });
    const action = (lifecycle: string) => ({ actionType: 'load', id: A, lifecycle, location: ref('location', L) });
    await apply(store, tenant, [['locations', { entityType: 'location', id: L, name: 'Depot' }]]);
    await apply(store, tenant, [['trips', trip('planned')]]);
    await apply(store, tenant, [['actions', action('planned')]]);
    await apply(store, tenant, [['actions', action('actual')]]);
    expect((await store.get(tenant, 'actions', A, 2))?.json).toBeDefined();
    // Retention removes their changes (it trims as the feed is appended to): the feed holds none of them.
    await sleep(400);
    await store.telemetry.appendFeed([{ tenant, kind: 'events', key: randomUUID(), lifecycleRank: 0, op: 'put' }]);
    expect((await store.feed.read({ tenant, limit: 100, kinds: EXPORTED_KINDS })).entries).toEqual([]);
    const head = await store.feed.head(tenant);
    const snapshotVersion = String(store.feedExport.versionOf(head));

    // The trip changes while the snapshot runs, just after the snapshot read it: the change, after
    // the snapshot's head in the feed, wins over the snapshot's row.
    let raced = false;
    const racing = new Proxy(store, {
      get(target, prop) {
        if (prop === 'get')
          return async (...args: Parameters<RedisEntityStore['get']>) => {
            const read = await target.get(...args);
            if (!raced && args[1] === 'trips' && args[2] === T) {
              raced = true;
              expect(read && JSON.parse(read.json).status).toBe('planned');
              await apply(store, tenant, [['trips', trip('completed')]]);
            }
            return read;
          };
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const exporter = new EntityExporter(racing, ch, silent, { pageSize: 2 });
    const done = await exporter.pass();
    expect(raced).toBe(true);
    expect(done.rows).toBeGreaterThanOrEqual(6); // 5 snapshot rows, then the trip's change
    let live = await rows(tenant);
    expect(live.map((r) => `${r.kind} ${r.entity_id} ${r.lifecycle_rank}`)).toEqual(
      [`actions ${A} 2`, `actions ${A} 4`, `locations ${L} 0`, `trips ${T} 0`, `vehicles ${V} 0`].sort(),
    );
    for (const r of live.filter((r) => r.kind !== 'trips' && r.kind !== 'vehicles')) expect(r.version, r.kind).toBe(snapshotVersion);
    for (const rank of [2, 4]) {
      const row = live.find((r) => r.kind === 'actions' && r.lifecycle_rank === rank)!;
      expect(JSON.parse(row.doc)).toEqual(JSON.parse((await store.get(tenant, 'actions', A, rank))!.json));
    }
    expect(live.map((r) => r.kind === 'actions' && JSON.parse(r.doc).lifecycle).filter(Boolean)).toEqual(['planned', 'actual']);
    const tripRow = live.find((r) => r.kind === 'trips')!;
    expect(tripRow.status).toBe('completed');
    expect(BigInt(tripRow.version)).toBeGreaterThan(BigInt(snapshotVersion));
    expect(await store.feedExport.cursor(tenant)).toBe(await feedEnd(store, tenant));

    // A change after the snapshot wins over its rows: a later lifecycle, a delete.
    await apply(store, tenant, [['actions', action('realized')]]);
    await apply(store, tenant, [['locations', L]]);
    await exporter.pass();
    live = await rows(tenant);
    expect(live.map((r) => `${r.kind} ${r.entity_id} ${r.lifecycle_rank}`)).toEqual(
      [`actions ${A} 2`, `actions ${A} 4`, `actions ${A} 5`, `trips ${T} 0`, `vehicles ${V} 0`].sort(),
    );
    expect((await rows(tenant, `kind = 'locations' AND deleted = 1`)).map((r) => r.lifecycle_rank)).toEqual([0, 1, 2, 3, 4, 5]);
    await exporter.close();
  });

  it('a snapshot renews the lease as it goes, and stops without saving the cursor once another process holds it', async () => {
    const store = newStore();
    const tenant = 'long';
    for (const name of ['a', 'b', 'c']) await apply(store, tenant, [['locations', { entityType: 'location', id: randomUUID(), name }]]);
    const leaseMs = 300;
    let inserts = 0;
    let stolen: boolean | undefined;
    let mode: 'slow' | 'stall' = 'slow';
    const sink: EntityChangeSink = {
      writeEntityChanges: async (changes) => {
        inserts++;
        if (mode === 'slow') {
          // Longer than the lease in all, unless it is renewed.
          if (inserts === 3) stolen = await store.feedExport.lease('someone else', 10_000);
          await sleep(200);
        } else if (inserts === 1) {
          await sleep(leaseMs + 100);
          stolen = await store.feedExport.lease('someone else', 10_000);
        }
        return ch.writeEntityChanges(changes);
      },
    };
    const exporter = new EntityExporter(store, sink, silent, { pageSize: 1, leaseMs });
    expect(await exporter.pass()).toEqual({ more: false, rows: 3 });
    expect(stolen).toBe(false);
    expect(await store.feedExport.cursor(tenant)).toBe(await feedEnd(store, tenant));

    // Taken again (a lost cursor); the lease expires during the first insert and another process takes it.
    await store.feedExport.saveCursor(tenant, undefined);
    mode = 'stall';
    inserts = 0;
    stolen = undefined;
    expect(await exporter.pass()).toEqual({ more: false, rows: 1 });
    expect(stolen).toBe(true);
    expect(inserts).toBe(1);
    expect(await store.feedExport.cursor(tenant)).toBeUndefined();
    await exporter.close();
    await store.feedExport.release('someone else');
  });

  it('one exporter works at a time (the lease); another takes over once it stops', async () => {
    const store = newStore();
    const tenant = 'leased';
    const a = new EntityExporter(store, ch, silent, {});
    const b = new EntityExporter(store, ch, silent, {});
    await apply(store, tenant, [['goods', { entityType: 'goods', type: 'items', id: randomUUID(), description: 'one' }]]);
    expect((await a.pass()).rows).toBe(1);
    await apply(store, tenant, [['goods', { entityType: 'goods', type: 'items', id: randomUUID(), description: 'two' }]]);
    expect(await b.pass()).toEqual({ more: false, rows: 0 });
    expect(await rows(tenant)).toHaveLength(1);
    await a.close();
    expect((await b.pass()).rows).toBe(1);
    expect(await rows(tenant)).toHaveLength(2);
    await b.close();
  });

  it('runs as a loop: copies within the interval, for every tenant, and stops cleanly', async () => {
    const store = newStore();
    const tenants = ['acme:x{y}', '100%'];
    const exportedBefore = (await registry.getSingleMetric('otm_entity_export_rows_total')!.get()).values[0]?.value ?? 0;
    const exporter = startEntityExport(store, ch, { logger: silent }, { intervalMs: 20 })!;
    expect(exporter).toBeInstanceOf(EntityExporter);
    const ids = tenants.map(() => randomUUID());
    for (const [i, tenant] of tenants.entries())
      await apply(store, tenant, [['vehicles', { entityType: 'vehicle', id: ids[i], name: tenant }]]);
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && (await Promise.all(tenants.map((t) => rows(t)))).some((r) => r.length === 0)) await sleep(20);
    for (const [i, tenant] of tenants.entries())
      expect(
        (await rows(tenant)).map((r) => [r.entity_id, r.name]),
        tenant,
      ).toEqual([[ids[i], tenant]]);
    const exported = (await registry.getSingleMetric('otm_entity_export_rows_total')!.get()).values[0]!.value;
    expect(exported - exportedBefore).toBeGreaterThanOrEqual(2);

    await exporter.close();
    const late = randomUUID();
    await apply(store, tenants[0]!, [['vehicles', { entityType: 'vehicle', id: late, name: 'late' }]]);
    await sleep(200);
    expect((await rows(tenants[0]!)).map((r) => r.entity_id)).not.toContain(late);
    // The lease was given up: another process may take over at once.
    expect(await store.feedExport.lease('someone else', 1_000)).toBe(true);
  });

  it('finds the tenants units wrote for, whatever characters a tenant has', async () => {
    const prefix = `ex${randomUUID().slice(0, 8)}`;
    const store = new RedisEntityStore({ url: redis.url, prefix });
    stores.push(store);
    const tenants = ['a:b{c}%41', '*?[x]'];
    for (const tenant of tenants) await apply(store, tenant, [['routes', { entityType: 'route', id: randomUUID(), name: tenant }]]);
    // A tenant that only sent telemetry has nothing to copy: not among them.
    await store.telemetry.appendFeed([{ tenant: 'telemetry-only', kind: 'events', key: randomUUID(), lifecycleRank: 0, op: 'put' }]);
    expect(await store.feedExport.tenants()).toEqual([...tenants].sort());
    const exporter = new EntityExporter(store, ch, silent);
    expect((await exporter.pass()).rows).toBe(2);
    for (const tenant of tenants) expect((await rows(tenant)).map((r) => r.name)).toEqual([tenant]);
    await exporter.close();
  });

  it('starts only where both stores offer it', () => {
    expect(startEntityExport(newStore(), {} as EventStore, { logger: silent })).toBeUndefined();
  });
});
