/**
 * The event store of the distributed deployment on ClickHouse (@clickhouse/client).
 *
 * Two tables (DDL in `eventStoreDdl`, documented in docs/analytics.md):
 * - `otm_events`: one row per telemetry event version with typed columns for analysts,
 *   ReplacingMergeTree(version), monthly partitions, ORDER BY (tenant, vehicle_id, event_time,
 *   event_id, lifecycle_rank) for per-vehicle time ranges. No document column: it would double
 *   the storage of the largest table; the document is in `otm_event_ids` (join on event_id).
 * - `otm_event_ids`: one row per (tenant, kind, event_id, lifecycle_rank) version with the
 *   document as answered, ORDER BY (tenant, kind, event_id, lifecycle_rank): GET and DELETE by id
 *   read it through the primary index. It also remembers where the event's row sits in
 *   `otm_events` (vehicle_id, event_time), so that a delete, or a new version that moved the event
 *   to another vehicle or time, can write a tombstone with the same sorting key there.
 *
 * Deduplication: ReplacingMergeTree merges rows with the same sorting key in the background,
 * keeping the highest `version`; until then reads deduplicate themselves: GET uses
 * `argMax(..., version)`; analysts use `FINAL` with `WHERE deleted = 0` (both work on 18.16 and on
 * a current ClickHouse; WHERE, not PREWHERE, so it filters after the FINAL merge).
 * `version` is the write time in microseconds, strictly increasing within a process, so a replay of
 * a batch (at-least-once delivery) writes the same rows again with higher versions: same answer.
 * Deletes write tombstones (`deleted = 1`): GET answers 404 at once.
 *
 * SQL is kept to what ClickHouse 18.16 and a current ClickHouse both accept: no query parameters
 * (values are validated/escaped here), no DateTime64 (DateTime('UTC') + Int64 ms), no
 * LowCardinality, Nullable(Float64) for absent measurements.
 *
 * Durability: an INSERT is answered after the part is written to the server's filesystem (not
 * fsynced by default). Production should use ReplicatedReplacingMergeTree on a cluster (and
 * `insert_quorum` if acknowledged rows must survive the loss of a replica).
 */
import { ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';
import type { KindSegment } from '@otm/model';
import { unavailable, type DocumentWrite, type EventStore, type StoredDocument } from '@otm/core';
import { eventColumns, type EventColumns } from './event-columns.js';

export interface ClickHouseEventStoreOptions {
  /** e.g. http://127.0.0.1:8123 (user and password may be in the URL). */
  readonly url: string;
  /** Database of the tables (created by migrate()). Default `otm`. */
  readonly database?: string;
  readonly username?: string;
  readonly password?: string;
  /** Per-request timeout (ms). Default 30000. */
  readonly requestTimeoutMs?: number;
  /** Ids looked up per query when a batch needs the current state. Default 1000. */
  readonly lookupChunk?: number;
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** A ClickHouse string literal (single quotes; backslash and quote escaped; NUL and newlines too). */
export function sqlString(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\0/g, '\\0').replace(/\n/g, '\\n').replace(/\r/g, '\\r')}'`;
}

/** A non-negative integer for SQL, or an error. */
function sqlUInt(n: number): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`not an unsigned integer: ${n}`);
  return String(n);
}

/** CREATE statements for the tables (idempotent), in the order to run them. */
export function eventStoreDdl(database: string): string[] {
  if (!IDENT.test(database)) throw new Error(`bad ClickHouse database name: ${database}`);
  return [
    `CREATE DATABASE IF NOT EXISTS ${database}`,
    `CREATE TABLE IF NOT EXISTS ${database}.otm_events
(
    tenant String,
    event_id String,
    lifecycle_rank UInt8,
    lifecycle String,
    event_type String,
    event_time DateTime('UTC'),
    event_time_ms Int64,
    vehicle_id String,
    trip_id String,
    sensor_id String,
    transport_equipment_id String,
    lat Nullable(Float64),
    lon Nullable(Float64),
    speed Nullable(Float64),
    speed_unit String,
    speed_kmh Nullable(Float64),
    heading Nullable(Float64),
    heading_unit String,
    sensor_value Nullable(Float64),
    sensor_unit String,
    amount Nullable(Float64),
    amount_unit String,
    amount_normalised Nullable(Float64),
    amount_normalised_unit String,
    fuel_type String,
    emission_method String,
    weight Nullable(Float64),
    weight_unit String,
    weight_kg Nullable(Float64),
    weighing_type String,
    accepted_at Int64,
    version UInt64,
    deleted UInt8
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(event_time)
ORDER BY (tenant, vehicle_id, event_time, event_id, lifecycle_rank)`,
    `CREATE TABLE IF NOT EXISTS ${database}.otm_event_ids
(
    tenant String,
    kind String,
    event_id String,
    lifecycle_rank UInt8,
    vehicle_id String,
    event_time DateTime('UTC'),
    accepted_at Int64,
    version UInt64,
    deleted UInt8,
    doc String
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant, kind, event_id, lifecycle_rank)`,
  ];
}

type EventRow = EventColumns & {
  tenant: string;
  event_id: string;
  lifecycle_rank: number;
  event_time: number;
  accepted_at: number;
  version: number;
  deleted: 0 | 1;
};

interface IdRow {
  tenant: string;
  kind: string;
  event_id: string;
  lifecycle_rank: number;
  vehicle_id: string;
  event_time: number;
  accepted_at: number;
  version: number;
  deleted: 0 | 1;
  doc: string;
}

/** Where a live version sits in otm_events. */
interface Placement {
  vehicle_id: string;
  event_time: number;
}

const MAX_DATETIME = 4_294_967_295;
const toSeconds = (ms: number) => Math.min(MAX_DATETIME, Math.max(0, Math.floor(ms / 1000)));

const EMPTY_COLUMNS: EventColumns = {
  lifecycle: '',
  event_type: '',
  event_time_ms: 0,
  vehicle_id: '',
  trip_id: '',
  sensor_id: '',
  transport_equipment_id: '',
  lat: null,
  lon: null,
  speed: null,
  speed_unit: '',
  speed_kmh: null,
  heading: null,
  heading_unit: '',
  sensor_value: null,
  sensor_unit: '',
  amount: null,
  amount_unit: '',
  amount_normalised: null,
  amount_normalised_unit: '',
  fuel_type: '',
  emission_method: '',
  weight: null,
  weight_unit: '',
  weight_kg: null,
  weighing_type: '',
};

export class ClickHouseEventStore implements EventStore {
  readonly database: string;
  private readonly client: ClickHouseClient;
  private readonly lookupChunk: number;
  private lastVersion = 0;

  constructor(opts: ClickHouseEventStoreOptions) {
    this.database = opts.database ?? 'otm';
    if (!IDENT.test(this.database)) throw new Error(`bad ClickHouse database name: ${this.database}`);
    this.lookupChunk = opts.lookupChunk ?? 1000;
    this.client = createClient({
      url: opts.url,
      ...(opts.username === undefined ? {} : { username: opts.username }),
      ...(opts.password === undefined ? {} : { password: opts.password }),
      request_timeout: opts.requestTimeoutMs ?? 30_000,
      // The client logs server errors to the console otherwise; errors reach the caller anyway.
      log: { level: ClickHouseLogLevel.OFF },
    });
  }

  private get events() {
    return `${this.database}.otm_events`;
  }
  private get ids() {
    return `${this.database}.otm_event_ids`;
  }

  /** Strictly increasing write time in µs (the ReplacingMergeTree version). */
  private nextVersion(): number {
    const v = Math.max(Date.now() * 1000, this.lastVersion + 1);
    this.lastVersion = v;
    return v;
  }

  /** Creates the database and tables when missing. */
  async migrate(): Promise<void> {
    for (const sql of eventStoreDdl(this.database)) await this.run(() => this.client.command({ query: sql }));
  }

  /** I/O failures become retryable 503s at this edge (the worker retries, then the batch is replayed). */
  private async run<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (e) {
      throw unavailable(`clickhouse: ${e instanceof Error ? e.message : String(e)}`, 5, e);
    }
  }

  private async select<T>(query: string): Promise<T[]> {
    return this.run(async () => {
      const rs = await this.client.query({ query, format: 'JSONEachRow' });
      return rs.json<T>();
    });
  }

  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const rankFilter = lifecycleRank === undefined ? '' : ` AND lifecycle_rank = ${sqlUInt(lifecycleRank)}`;
    const rows = await this.select<{ lifecycle_rank: number; doc: string; deleted: number }>(
      `SELECT lifecycle_rank, argMax(doc, version) AS doc, argMax(deleted, version) AS deleted
       FROM ${this.ids}
       WHERE tenant = ${sqlString(tenant)} AND kind = ${sqlString(kind)} AND event_id = ${sqlString(key)}${rankFilter}
       GROUP BY lifecycle_rank`,
    );
    let best: { lifecycle_rank: number; doc: string } | undefined;
    for (const r of rows) {
      if (Number(r.deleted) !== 0) continue;
      if (!best || Number(r.lifecycle_rank) > best.lifecycle_rank) best = { lifecycle_rank: Number(r.lifecycle_rank), doc: r.doc };
    }
    return best && { kind, key, lifecycleRank: best.lifecycle_rank, json: best.doc };
  }

  /** The live versions of the given ids: `tenant\0kind\0id` -> rank -> placement. */
  private async lookup(writes: readonly DocumentWrite[]): Promise<Map<string, Map<number, Placement>>> {
    const groups = new Map<string, { tenant: string; kind: string; ids: Set<string> }>();
    for (const w of writes) {
      const kind = w.op === 'put' ? w.doc.kind : w.kind;
      const key = w.op === 'put' ? w.doc.key : w.key;
      const g = groups.get(`${w.tenant}\0${kind}`) ?? { tenant: w.tenant, kind, ids: new Set<string>() };
      g.ids.add(key);
      groups.set(`${w.tenant}\0${kind}`, g);
    }
    const out = new Map<string, Map<number, Placement>>();
    const queries: Promise<void>[] = [];
    for (const g of groups.values()) {
      const ids = [...g.ids];
      for (let i = 0; i < ids.length; i += this.lookupChunk) {
        const list = ids.slice(i, i + this.lookupChunk).map(sqlString).join(',');
        queries.push(
          this.select<{ event_id: string; lifecycle_rank: number; vehicle_id: string; event_time: number; deleted: number }>(
            `SELECT event_id, lifecycle_rank, argMax(vehicle_id, version) AS vehicle_id,
                    toUInt32(argMax(event_time, version)) AS event_time, argMax(deleted, version) AS deleted
             FROM ${this.ids}
             WHERE tenant = ${sqlString(g.tenant)} AND kind = ${sqlString(g.kind)} AND event_id IN (${list})
             GROUP BY event_id, lifecycle_rank`,
          ).then((rows) => {
            for (const r of rows) {
              if (Number(r.deleted) !== 0) continue;
              const k = `${g.tenant}\0${g.kind}\0${r.event_id}`;
              const m = out.get(k) ?? new Map<number, Placement>();
              m.set(Number(r.lifecycle_rank), { vehicle_id: r.vehicle_id, event_time: Number(r.event_time) });
              out.set(k, m);
            }
          }),
        );
      }
    }
    await Promise.all(queries);
    return out;
  }

  async write(writes: readonly DocumentWrite[]): Promise<void> {
    if (writes.length === 0) return;
    const state = await this.lookup(writes);
    const now = Date.now();
    const eventRows: EventRow[] = [];
    const idRows: IdRow[] = [];
    const tombstone = (tenant: string, kind: string, id: string, rank: number, at: Placement) => {
      const version = this.nextVersion();
      if (kind === 'events') {
        eventRows.push({
          ...EMPTY_COLUMNS,
          tenant,
          event_id: id,
          lifecycle_rank: rank,
          vehicle_id: at.vehicle_id,
          event_time: at.event_time,
          event_time_ms: at.event_time * 1000,
          accepted_at: now,
          version,
          deleted: 1,
        });
      }
      idRows.push({ tenant, kind, event_id: id, lifecycle_rank: rank, ...at, accepted_at: now, version, deleted: 1, doc: '' });
    };
    for (const w of writes) {
      if (w.op === 'delete') {
        const k = `${w.tenant}\0${w.kind}\0${w.key}`;
        for (const [rank, at] of state.get(k) ?? []) tombstone(w.tenant, w.kind, w.key, rank, at);
        state.delete(k);
        continue;
      }
      const { doc, tenant } = w;
      const k = `${tenant}\0${doc.kind}\0${doc.key}`;
      const acceptedAt = doc.stamp?.acceptedAt ?? now;
      const value = doc.value ?? (JSON.parse(doc.json) as Record<string, unknown>);
      const cols = doc.kind === 'events' ? eventColumns(value, acceptedAt) : { ...EMPTY_COLUMNS, event_time_ms: acceptedAt };
      const at: Placement = { vehicle_id: cols.vehicle_id, event_time: toSeconds(cols.event_time_ms) };
      const versions = state.get(k) ?? new Map<number, Placement>();
      const before = versions.get(doc.lifecycleRank);
      // The event moved (another vehicle or time): its old row in otm_events must go.
      if (before && (before.vehicle_id !== at.vehicle_id || before.event_time !== at.event_time)) {
        tombstone(tenant, doc.kind, doc.key, doc.lifecycleRank, before);
      }
      const version = this.nextVersion();
      if (doc.kind === 'events') {
        eventRows.push({ ...cols, tenant, event_id: doc.key, lifecycle_rank: doc.lifecycleRank, event_time: at.event_time, accepted_at: acceptedAt, version, deleted: 0 });
      }
      idRows.push({ tenant, kind: doc.kind, event_id: doc.key, lifecycle_rank: doc.lifecycleRank, ...at, accepted_at: acceptedAt, version, deleted: 0, doc: doc.json });
      versions.set(doc.lifecycleRank, at);
      state.set(k, versions);
    }
    // otm_event_ids last: it is what the next lookup (and GET) trusts, so a failure between the
    // two inserts is repaired by the replay of the batch.
    if (eventRows.length > 0) await this.run(() => this.client.insert({ table: this.events, values: eventRows, format: 'JSONEachRow' }));
    if (idRows.length > 0) await this.run(() => this.client.insert({ table: this.ids, values: idRows, format: 'JSONEachRow' }));
  }

  /** Drops the database with its tables (tests, tear-down of a tenant-less scratch database). */
  async dropDatabase(): Promise<void> {
    await this.run(() => this.client.command({ query: `DROP DATABASE IF EXISTS ${this.database}` }));
  }

  /** Runs a SELECT and returns its rows (for tests and tools; the SQL is taken as written). */
  async query<T = Record<string, unknown>>(sql: string): Promise<T[]> {
    return this.select<T>(sql);
  }

  async ready(): Promise<boolean> {
    try {
      return (await this.client.ping()).success;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}
