/**
 * The event store of the distributed deployment on ClickHouse (@clickhouse/client).
 *
 * Two tables (DDL in `eventStoreDdl`, documented in docs/analytics.md):
 * - `otm_events`: one row per telemetry event version: typed columns for analysts and the
 *   document as the API answers it (`doc`), ReplacingMergeTree(version), monthly partitions,
 *   ORDER BY (tenant, vehicle_id, event_time, event_id, lifecycle_rank) for per-vehicle time
 *   ranges: a vehicle's track with its documents is one range read, with no join.
 * - `otm_event_ids`: a slim index, one row per (tenant, kind, event_id, lifecycle_rank) version,
 *   ORDER BY (tenant, kind, event_id, lifecycle_rank): where the event's row sits in `otm_events`
 *   (vehicle_id, event_time) and whether it is deleted. GET by id reads it through its primary
 *   index (a subquery), and the document from `otm_events` at that place (again through the
 *   primary index), in one query; GETs that arrive together share one query.
 *   A delete, or a new version that moved the event to another vehicle or time, writes a
 *   tombstone with the old sorting key there.
 *
 * Granules: ClickHouse reads whole granules (`index_granularity` rows) of each column a query
 * needs, in each part. With the default 8,192, a GET by id read ~8,000 rows of the id index and
 * ~8,000 documents for one event; otm_events uses 1,024 (a vehicle-day of positions at one a
 * minute is still one or two granules) and otm_event_ids 256 (it is only ever read by id).
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
import { Readable } from 'node:stream';
import DataLoader from 'dataloader';
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
  /** Most GETs by id answered by one query (`get`): 1 (each GET alone) to 256, the default. */
  readonly getBatch?: number;
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
    deleted UInt8,
    doc String
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(event_time)
ORDER BY (tenant, vehicle_id, event_time, event_id, lifecycle_rank)
SETTINGS index_granularity = 1024`,
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
    deleted UInt8
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant, kind, event_id, lifecycle_rank)
SETTINGS index_granularity = 256`,
  ];
}

/**
 * The SQL of GET by id for one or more events of a tenant, in one query: the id index says where
 * each event's versions sit (the subquery, read through its primary key), the primary index of
 * otm_events finds the rows at those places (vehicle, time and id are its sorting key after the
 * tenant). A place left by a version that moved holds that version's tombstone, so per event and
 * lifecycle only a row with `deleted = 0` counts. One query for many ids costs ClickHouse a fraction
 * of what as many queries cost (each query pays for every part of both tables), which is why the
 * store gathers the GETs that arrive together (`ClickHouseEventStore.get`).
 *
 * The tenant and ids filter otm_events in PREWHERE: ClickHouse reads `event_id` first and the other
 * columns (`doc` above all) only in the granules that hold one of the ids, where with WHERE alone it
 * read the documents of every granule the sorting key selected (a quarter to a third less of ClickHouse's
 * CPU for a query of 32 ids: `bench/diag/clickhouse-get.mjs`). It is not a FINAL query, so PREWHERE
 * drops only the rows of other events: every version and tombstone of an asked id stays for
 * `argMax`. (ClickHouse does not move these conditions to PREWHERE itself: they are on columns of
 * the sorting key.)
 */
export function eventGetSql(database: string, tenant: string, keys: readonly string[], lifecycleRank?: number): string {
  if (!IDENT.test(database)) throw new Error(`bad ClickHouse database name: ${database}`);
  if (keys.length === 0) throw new Error('eventGetSql: no ids');
  const rankFilter = lifecycleRank === undefined ? '' : ` AND lifecycle_rank = ${sqlUInt(lifecycleRank)}`;
  const ids = `tenant = ${sqlString(tenant)} AND event_id IN (${keys.map(sqlString).join(',')})${rankFilter}`;
  return `SELECT event_id, lifecycle_rank, argMax(doc, version) AS doc, argMax(deleted, version) AS deleted
       FROM ${database}.otm_events
       PREWHERE ${ids}
       WHERE (vehicle_id, event_time, event_id) IN (
         SELECT argMax(vehicle_id, version), argMax(event_time, version), event_id
         FROM ${database}.otm_event_ids WHERE ${ids} AND kind = 'events' GROUP BY event_id, lifecycle_rank)
       GROUP BY event_id, lifecycle_rank, vehicle_id, event_time`;
}

/**
 * The SQL that finds where each of `ids` (events of `tenant`) sits in otm_events, per lifecycle.
 * The ids are given as one array literal unrolled by a subquery (`IN (SELECT arrayJoin([...]))`),
 * not as an IN list of literals: ClickHouse 18.16 parses and analyses an IN list element by
 * element, an array literal as one value (bench/diag/clickhouse-lookup.mjs). The primary key is
 * used either way (`use_index_for_in_with_subqueries`, on by default).
 */
export function eventPlacementsSql(database: string, tenant: string, ids: readonly string[]): string {
  if (!IDENT.test(database)) throw new Error(`bad ClickHouse database name: ${database}`);
  if (ids.length === 0) throw new Error('eventPlacementsSql: no ids');
  return `SELECT event_id, lifecycle_rank, argMax(vehicle_id, version) AS vehicle_id,
                 toUInt32(argMax(event_time, version)) AS event_time, argMax(deleted, version) AS deleted
          FROM ${database}.otm_event_ids
          WHERE tenant = ${sqlString(tenant)} AND kind = 'events' AND event_id IN (SELECT arrayJoin([${ids.map(sqlString).join(',')}]))
          GROUP BY event_id, lifecycle_rank`;
}

/** Most ids in one GET query, and the default of `getBatch` (the list is in the SQL twice: ~20 KB at 256). */
const GET_BATCH = 256;

/** One GET by id (`ClickHouseEventStore.get`). */
interface GetKey {
  readonly tenant: string;
  readonly key: string;
  readonly rank: number | undefined;
}

const placeKey = (tenant: string, id: string) => `${tenant}\0${id}`;

type EventRow = EventColumns & {
  tenant: string;
  event_id: string;
  lifecycle_rank: number;
  event_time: number;
  accepted_at: number;
  version: number;
  deleted: 0 | 1;
  doc: string;
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

/** The columns of otm_events, in the order an insert sends them. */
export const EVENT_COLUMNS = [
  'tenant', 'event_id', 'lifecycle_rank', 'lifecycle', 'event_type', 'event_time', 'event_time_ms',
  'vehicle_id', 'trip_id', 'sensor_id', 'transport_equipment_id', 'lat', 'lon', 'speed', 'speed_unit',
  'speed_kmh', 'heading', 'heading_unit', 'sensor_value', 'sensor_unit', 'amount', 'amount_unit',
  'amount_normalised', 'amount_normalised_unit', 'fuel_type', 'emission_method', 'weight',
  'weight_unit', 'weight_kg', 'weighing_type', 'accepted_at', 'version', 'deleted', 'doc',
] as const satisfies readonly (keyof EventRow)[];
/** The columns of otm_event_ids, in the order an insert sends them. */
const ID_COLUMNS = [
  'tenant', 'kind', 'event_id', 'lifecycle_rank', 'vehicle_id', 'event_time', 'accepted_at', 'version', 'deleted',
] as const satisfies readonly (keyof IdRow)[];
// Every member of a row has its column (a compile error otherwise).
const everyEventColumn: Exclude<keyof EventRow, (typeof EVENT_COLUMNS)[number]> extends never ? true : never = true;
const everyIdColumn: Exclude<keyof IdRow, (typeof ID_COLUMNS)[number]> extends never ? true : never = true;
void everyEventColumn;
void everyIdColumn;

/** Characters that TabSeparated escapes in a string (its field and row separators, the escape itself). */
const TSV_SPECIAL = /[\\\t\n\r\0]/;
const TSV_SPECIAL_ALL = /[\\\t\n\r\0]/g;
const TSV_ESCAPE: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0' };

/**
 * One value as a TabSeparated field: NULL as `\N`, numbers as JavaScript writes them (finite, as
 * they come from JSON; `1e-7` style is read by ClickHouse too), strings with backslash escapes.
 * The document itself (JSON text) rarely holds a backslash, so it is mostly sent as it is, where
 * JSONEachRow escaped every quote in it.
 */
function tsvField(v: string | number | null): string {
  if (v === null) return '\\N';
  if (typeof v === 'number') return String(v);
  return TSV_SPECIAL.test(v) ? v.replace(TSV_SPECIAL_ALL, (c) => TSV_ESCAPE[c]!) : v;
}

/** One row as a TabSeparated line of `columns`. */
export function tsvLine<R>(row: R, columns: readonly (keyof R)[]): string {
  let line = tsvField(row[columns[0]!] as string | number | null);
  for (let i = 1; i < columns.length; i++) line += `\t${tsvField(row[columns[i]!] as string | number | null)}`;
  return `${line}\n`;
}

/**
 * `tsvLine` for one column list, made once as a function that reads each member by its name
 * (`f(r.tenant) + '\t' + f(r.event_id) + …`): V8 then loads the members of rows of one shape
 * directly instead of looking each name up: ~1.2 instead of ~1.75 µs an otm_events row
 * (bench/diag/clickhouse-row-json.mjs; the encoding was 16 % of the worker's busy time in bulk
 * ingest). The names are the store's own column
 * constants, checked to be plain identifiers.
 */
export function tsvEncoder<R>(columns: readonly (keyof R & string)[]): (row: R) => string {
  for (const c of columns) if (!IDENT.test(c)) throw new Error(`not a column name: ${c}`);
  const body = `return ${columns.map((c) => `f(r.${c})`).join(" + '\\t' + ")} + '\\n';`;
  return new Function('f', 'r', body).bind(null, tsvField) as (row: R) => string;
}

/** Rows per piece of a streamed insert: ~40 KB of events with their documents. */
const INSERT_PIECE_ROWS = 64;

/** TabSeparated text of `rows`, a piece of INSERT_PIECE_ROWS rows at a time. */
function* tsvPieces<R>(rows: readonly R[], line: (row: R) => string): Generator<string> {
  for (let i = 0; i < rows.length; i += INSERT_PIECE_ROWS) {
    let piece = '';
    const end = Math.min(rows.length, i + INSERT_PIECE_ROWS);
    for (let j = i; j < end; j++) piece += line(rows[j]!);
    yield piece;
  }
}

/** A table's columns, in the order an insert sends them, and the encoder of its rows. */
interface RowFormat<R> {
  readonly columns: readonly (keyof R & string)[];
  readonly line: (row: R) => string;
}
const EVENT_FORMAT: RowFormat<EventRow> = { columns: EVENT_COLUMNS, line: tsvEncoder<EventRow>(EVENT_COLUMNS) };
const ID_FORMAT: RowFormat<IdRow> = { columns: ID_COLUMNS, line: tsvEncoder<IdRow>(ID_COLUMNS) };

export class ClickHouseEventStore implements EventStore {
  readonly database: string;
  private readonly client: ClickHouseClient;
  private readonly lookupChunk: number;
  private lastVersion = 0;
  /** GETs by id waiting for the end of the event-loop turn, to share one query (`get`). */
  private readonly gets: DataLoader<GetKey, StoredDocument | undefined>;

  constructor(opts: ClickHouseEventStoreOptions) {
    this.database = opts.database ?? 'otm';
    if (!IDENT.test(this.database)) throw new Error(`bad ClickHouse database name: ${this.database}`);
    this.lookupChunk = opts.lookupChunk ?? 1000;
    this.gets = new DataLoader<GetKey, StoredDocument | undefined>((asked) => this.getMany(asked), {
      cache: false,
      maxBatchSize: Math.max(1, Math.min(GET_BATCH, opts.getBatch ?? GET_BATCH)),
      batchScheduleFn: (run) => setImmediate(run),
    });
    this.client = createClient({
      url: opts.url,
      ...(opts.username === undefined ? {} : { username: opts.username }),
      ...(opts.password === undefined ? {} : { password: opts.password }),
      request_timeout: opts.requestTimeoutMs ?? 30_000,
      // The client logs server errors to the console otherwise; errors reach the caller anyway.
      log: { level: ClickHouseLogLevel.OFF },
      // A socket the server already closed (its keep-alive timeout: 3 s before 23.11) answers the
      // next request with "socket hang up", and the whole batch is written again. Sockets idle for
      // 2 s are dropped, checked before each use, also after the event loop was busy for a while
      // (a worker encoding 20,000 rows) so that the idle timer could not fire in time.
      keep_alive: { idle_socket_ttl: 2000, eagerly_destroy_stale_sockets: true },
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

  /**
   * GET by id. The GETs that arrive in the same turn of the event loop (up to `getBatch`) are
   * answered by one query per tenant and lifecycle asked for (`eventGetSql`): each query costs
   * ClickHouse a few milliseconds of CPU for every part of the two tables, much more than the
   * rows it reads for one id, so 32 GETs in one query cost it a fraction of 32 queries
   * (`bench/diag/clickhouse-get.mjs`, docs/PERFORMANCE.md). A lone GET waits
   * for nothing: the batch runs at the end of the turn it arrived in. The highest live lifecycle
   * wins.
   */
  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    if (kind !== 'events') return undefined;
    return this.gets.load({ tenant, key, rank: lifecycleRank });
  }

  /** The answers to a batch of GETs, in their order: one query per tenant and rank asked for. */
  private async getMany(asked: readonly GetKey[]): Promise<Array<StoredDocument | undefined | Error>> {
    const groupOf = (a: GetKey) => `${a.tenant}\0${a.rank ?? ''}`;
    const groups = new Map<string, { tenant: string; rank: number | undefined; keys: Set<string> }>();
    for (const a of asked) {
      const g = groupOf(a);
      let group = groups.get(g);
      if (group === undefined) groups.set(g, (group = { tenant: a.tenant, rank: a.rank, keys: new Set() }));
      group.keys.add(a.key);
    }
    /** The live version of the highest lifecycle, by group and id; the error of each failed query, by group. */
    const found = new Map<string, StoredDocument>();
    const failed = new Map<string, Error>();
    await Promise.all(
      [...groups].map(async ([g, { tenant, rank, keys }]) => {
        let rows: Array<{ event_id: string; lifecycle_rank: number; doc: string; deleted: number }>;
        try {
          rows = await this.select(eventGetSql(this.database, tenant, [...keys], rank));
        } catch (e) {
          failed.set(g, e as Error);
          return;
        }
        for (const r of rows) {
          if (Number(r.deleted) !== 0) continue;
          const at = `${g}\0${r.event_id}`;
          const rowRank = Number(r.lifecycle_rank);
          const best = found.get(at);
          if (best === undefined || rowRank > best.lifecycleRank) found.set(at, { kind: 'events', key: r.event_id, lifecycleRank: rowRank, json: r.doc });
        }
      }),
    );
    return asked.map((a) => failed.get(groupOf(a)) ?? found.get(`${groupOf(a)}\0${a.key}`));
  }

  /** The live versions of the given events: `placeKey(tenant, id)` -> rank -> placement. */
  private async lookup(writes: readonly DocumentWrite[]): Promise<Map<string, Map<number, Placement>>> {
    const byTenant = new Map<string, Set<string>>();
    for (const w of writes) {
      const ids = byTenant.get(w.tenant) ?? new Set<string>();
      ids.add(w.op === 'put' ? w.doc.key : w.key);
      byTenant.set(w.tenant, ids);
    }
    const out = new Map<string, Map<number, Placement>>();
    const queries: Promise<void>[] = [];
    for (const [tenant, set] of byTenant) {
      const ids = [...set];
      for (let i = 0; i < ids.length; i += this.lookupChunk) {
        queries.push(
          this.select<{ event_id: string; lifecycle_rank: number; vehicle_id: string; event_time: number; deleted: number }>(
            eventPlacementsSql(this.database, tenant, ids.slice(i, i + this.lookupChunk)),
          ).then((rows) => {
            for (const r of rows) {
              if (Number(r.deleted) !== 0) continue;
              const k = placeKey(tenant, r.event_id);
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
    for (const w of writes) {
      const kind = w.op === 'put' ? w.doc.kind : w.kind;
      if (kind !== 'events') throw new Error(`the ClickHouse event store keeps events only, not ${kind}`);
    }
    const ids = new Set(writes.map((w) => placeKey(w.tenant, w.op === 'put' ? w.doc.key : w.key)));
    if (ids.size === writes.length && writes.every((w) => w.op === 'put')) return this.writeNew(writes);
    return this.writeInOrder(writes);
  }

  /** The otm_events row of a put, and where it sits. */
  private liveRow(w: DocumentWrite & { op: 'put' }, now: number): EventRow {
    const { doc, tenant } = w;
    const acceptedAt = doc.stamp?.acceptedAt ?? now;
    const cols = eventColumns(doc.value ?? (JSON.parse(doc.json) as Record<string, unknown>), acceptedAt);
    // Object.assign onto the fresh columns object: a spread ({ ...cols, ... }) of these 35 members
    // cost ~20 µs a row in V8 (measured), the main cost of the worker in bulk ingest.
    return Object.assign(cols, {
      tenant,
      event_id: doc.key,
      lifecycle_rank: doc.lifecycleRank,
      event_time: toSeconds(cols.event_time_ms),
      accepted_at: acceptedAt,
      version: this.nextVersion(),
      deleted: 0 as const,
      doc: doc.json,
    });
  }

  /** A row that hides the version of `id` at `rank` that sits at `at` in otm_events. */
  private tombstoneRow(tenant: string, id: string, rank: number, at: Placement, now: number): EventRow {
    return {
      ...EMPTY_COLUMNS,
      tenant,
      event_id: id,
      lifecycle_rank: rank,
      vehicle_id: at.vehicle_id,
      event_time: at.event_time,
      event_time_ms: at.event_time * 1000,
      accepted_at: now,
      version: this.nextVersion(),
      deleted: 1,
      doc: '',
    };
  }

  private idRow(r: EventRow): IdRow {
    const { tenant, event_id, lifecycle_rank, vehicle_id, event_time, accepted_at, version, deleted } = r;
    return { tenant, kind: 'events', event_id, lifecycle_rank, vehicle_id, event_time, accepted_at, version, deleted };
  }

  /**
   * `INSERT … FORMAT TabSeparated` with the rows streamed in pieces of INSERT_PIECE_ROWS. Given one
   * string, the client would hold the whole insert (about 24 MB for 20,000 events with their
   * documents) and copy it once more into a socket buffer: fresh memory the kernel has to zero page
   * by page, a fifth of the telemetry worker's CPU in bulk ingest (perf, docs/PERFORMANCE.md).
   * Pieces stay in V8's young generation. TabSeparated rather than JSONEachRow: no member names
   * and no escaping of every quote of the document (bench/diag/clickhouse-row-json.mjs).
   */
  private async insert<R>(table: string, format: RowFormat<R>, values: readonly R[]): Promise<void> {
    if (values.length === 0) return;
    await this.run(async () => {
      const query = `INSERT INTO ${table} (${format.columns.join(', ')}) FORMAT TabSeparated`;
      const { stream } = await this.client.exec({ query, values: Readable.from(tsvPieces(values, format.line)) });
      // The answer is empty; reading it to the end hands the socket back to the keep-alive pool.
      for await (const _ of stream) {
        // nothing to read
      }
    });
  }

  /**
   * The common case, puts of distinct ids: their otm_events rows are inserted while the lookup
   * runs (its answer is only needed for the rare event that moved to another vehicle or time,
   * whose old row then gets a tombstone); the id index is written last, as it is what GET and the
   * next lookup trust, so a failure before it is repaired by the replay of the batch.
   */
  private async writeNew(writes: readonly DocumentWrite[]): Promise<void> {
    const now = Date.now();
    const rows = writes.map((w) => this.liveRow(w as DocumentWrite & { op: 'put' }, now));
    const [state] = await Promise.all([this.lookup(writes), this.insert(this.events, EVENT_FORMAT, rows)]);
    const tombstones: EventRow[] = [];
    for (const r of rows) {
      const before = state.get(placeKey(r.tenant, r.event_id))?.get(r.lifecycle_rank);
      if (before && (before.vehicle_id !== r.vehicle_id || before.event_time !== r.event_time)) {
        tombstones.push(this.tombstoneRow(r.tenant, r.event_id, r.lifecycle_rank, before, now));
      }
    }
    await this.insert(this.events, EVENT_FORMAT, tombstones);
    await this.insert(this.ids, ID_FORMAT, rows.map((r) => this.idRow(r)));
  }

  /** Any mix of puts and deletes, also of one id several times: applied one after the other. */
  private async writeInOrder(writes: readonly DocumentWrite[]): Promise<void> {
    const state = await this.lookup(writes);
    const now = Date.now();
    const eventRows: EventRow[] = [];
    const idRows: IdRow[] = [];
    const tombstone = (tenant: string, id: string, rank: number, at: Placement) => {
      const row = this.tombstoneRow(tenant, id, rank, at, now);
      eventRows.push(row);
      return row;
    };
    for (const w of writes) {
      if (w.op === 'delete') {
        const k = placeKey(w.tenant, w.key);
        for (const [rank, at] of state.get(k) ?? []) idRows.push(this.idRow(tombstone(w.tenant, w.key, rank, at)));
        state.delete(k);
        continue;
      }
      const k = placeKey(w.tenant, w.doc.key);
      const versions = state.get(k) ?? new Map<number, Placement>();
      const before = versions.get(w.doc.lifecycleRank);
      const row = this.liveRow(w, now);
      // The event moved (another vehicle or time): its old row in otm_events must go. The id
      // index needs no tombstone: the new row's entry replaces the old one.
      if (before && (before.vehicle_id !== row.vehicle_id || before.event_time !== row.event_time)) {
        tombstone(w.tenant, w.doc.key, w.doc.lifecycleRank, before);
      }
      eventRows.push(row);
      idRows.push(this.idRow(row));
      versions.set(w.doc.lifecycleRank, { vehicle_id: row.vehicle_id, event_time: row.event_time });
      state.set(k, versions);
    }
    await this.insert(this.events, EVENT_FORMAT, eventRows);
    await this.insert(this.ids, ID_FORMAT, idRows);
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
