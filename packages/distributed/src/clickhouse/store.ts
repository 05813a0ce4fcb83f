/**
 * The event store of the distributed deployment on ClickHouse (@clickhouse/client): the
 * `EventStore` port on the tables of `schema.ts`. Writes insert rows (TabSeparated, `tsv.ts`) into
 * `otm_events` and then `otm_event_ids`, with tombstones where a version moved or was deleted;
 * GETs by id that arrive together share one query (`sql.ts`). Lists of events and vehicles' tracks
 * are read from otm_events (`list`, `track`; `sql.ts` says how versions are told apart); a track is
 * streamed, one row after the other as ClickHouse sends them. Failures are classified at one edge
 * (`run`, `errors.ts`): a retryable 503 when ClickHouse cannot be reached or is busy, a
 * non-retryable AdapterError when it refuses the request as malformed.
 *
 * It also takes the rows of otm_entities from the telemetry worker's entity export
 * (`writeEntityChanges`, the `EntityChangeSink` port).
 *
 * The feed entries and latest positions of stored events are not kept here
 * (`keepsTelemetryEffects` is absent): the telemetry worker records them in the entity store once
 * a write resolved. It writes through `writeWithFixes`, which answers with the latest-position
 * fixes of the location events written, made from the columns each row needed anyway, so the
 * worker does not read the events a second time.
 */
import { Readable } from 'node:stream';
import DataLoader from 'dataloader';
import { ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';
import type { KindSegment } from '@otm/model';
import {
  AdapterError,
  WriteState,
  type Monitored,
  positionOfFix,
  LIFECYCLES,
  type DocumentWrite,
  type EntityChange,
  type EntityChangeSink,
  type EventStore,
  type LatestPosition,
  type ListPosition,
  type ListScan,
  type StoredDocument,
  type TrackPoint,
  type TrackScan,
  type FixScan,
  type TrackFixPoint,
} from '@otm/core';
import { columnsTrackFix } from './columns.js';
import { clickhouseFailure } from './errors.js';
import { entityRows } from './entity-columns.js';
import { ENTITY_FORMAT, EVENT_FORMAT, ID_FORMAT, idRow, liveRow, tombstoneRow, type Placement } from './rows.js';
import { eventStoreDdl, type EventRow, type IdRow } from './schema.js';
import { eventGetSql, eventListBounds, eventListFacet, eventListSql, eventPlacementsSql, sqlIdent, trackSql, type Sql } from './sql.js';
import { tsvFields, tsvPieces, type RowFormat } from './tsv.js';

/** A track point's position from the fields of a track query's row. */
const fixOf = (
  time: string,
  lat: string,
  lon: string,
  speed: string | null | undefined,
  heading: string | null | undefined,
): TrackFixPoint => ({
  time: Number(time),
  lat: Number(lat),
  lon: Number(lon),
  speedKmh: speed === null || speed === undefined ? null : Number(speed),
  heading: heading === null || heading === undefined ? null : Number(heading),
});

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

/** Most ids in one GET query, and the default of `getBatch` (the list of ids is in the SQL twice). */
const GET_BATCH = 256;

/** One GET by id (`ClickHouseEventStore.get`). */
interface GetKey {
  readonly tenant: string;
  readonly key: string;
  readonly rank: number | undefined;
}

const placeKey = (tenant: string, id: string) => `${tenant}\0${id}`;

export class ClickHouseEventStore implements EventStore, EntityChangeSink {
  readonly database: string;
  private readonly client: ClickHouseClient;
  private readonly lookupChunk: number;
  private lastVersion = 0;
  /** GETs by id waiting for the end of the event-loop turn, to share one query (`get`). */
  private readonly gets: DataLoader<GetKey, StoredDocument | undefined>;

  constructor(opts: ClickHouseEventStoreOptions) {
    this.database = opts.database ?? 'otm';
    sqlIdent(this.database, 'bad ClickHouse database name');
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
      // (a worker encoding a large batch) so that the idle timer could not fire in time.
      keep_alive: { idle_socket_ttl: 2000, eagerly_destroy_stale_sockets: true },
    });
  }

  private get events() {
    return `${this.database}.otm_events`;
  }
  private get ids() {
    return `${this.database}.otm_event_ids`;
  }
  private get entities() {
    return `${this.database}.otm_entities`;
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

  /**
   * Every request's failure is classified at this edge (errors.ts): I/O failures become retryable
   * 503s (the worker retries, then the batch is replayed), a request ClickHouse refuses as
   * malformed a non-retryable AdapterError.
   */
  private async run<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (e) {
      throw clickhouseFailure(e);
    }
  }

  private async select<T>({ query, params }: Sql): Promise<T[]> {
    return this.run(async () => {
      const rs = await this.client.query({ query, query_params: params, format: 'JSONEachRow' });
      return rs.json<T>();
    });
  }

  /**
   * GET by id. The GETs that arrive in the same turn of the event loop (up to `getBatch`) are
   * answered by one query per tenant and lifecycle asked for (`eventGetSql`): each query costs
   * ClickHouse CPU for every part of the two tables, much more than the rows it reads for one id,
   * so many GETs in one query cost it a fraction of as many queries
   * (`bench/diag/clickhouse/clickhouse-get.mjs` measures it). A lone GET waits
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
          if (best === undefined || rowRank > best.lifecycleRank)
            found.set(at, { kind: 'events', key: r.event_id, lifecycleRank: rowRank, json: r.doc });
        }
      }),
    );
    return asked.map((a) => failed.get(groupOf(a)) ?? found.get(`${groupOf(a)}\0${a.key}`));
  }

  /**
   * A page of the list of a tenant's telemetry events (kind `events`), each at the event time of its
   * highest live lifecycle (of those on the vehicle, with a `vehicle=` facet), in keyset order:
   * `eventListSql`. A scan with bounds (since, before, a cursor) reads only the rows within them,
   * so an event whose highest lifecycle (on the vehicle) lies outside them is seen with a lower one,
   * at that one's time: the id index (one query by the page's ids) tells of each candidate whether
   * a higher lifecycle is live (on the vehicle), and those are dropped; the page is then filled up
   * from after the last candidate. A lifecycle 5 (realized) candidate needs no look: none is higher.
   */
  async list(scan: ListScan): Promise<ListPosition[]> {
    if (scan.kind !== 'events' || !(scan.limit > 0)) return [];
    const limit = Math.floor(scan.limit);
    const { vehicle } = eventListFacet(scan.facet);
    const out: ListPosition[] = [];
    for (let after = scan.after; ;) {
      const page = { ...scan, limit, ...(after === undefined ? {} : { after }) };
      const rows = (
        await this.select<{ event_id: string; at: string | number; lifecycle_rank: string | number }>(eventListSql(this.database, page))
      ).map((r) => ({ at: Number(r.at), key: r.event_id, rank: Number(r.lifecycle_rank) }));
      const { from, to } = eventListBounds(page);
      const higher = from === undefined && to === undefined ? undefined : await this.higherLifecycles(scan.tenant, rows, vehicle);
      for (const r of rows) if (higher === undefined || !higher.has(r.key)) out.push({ at: r.at, key: r.key });
      if (out.length >= limit || rows.length < limit) return out.slice(0, limit);
      after = { at: rows[rows.length - 1]!.at, key: rows[rows.length - 1]!.key };
    }
  }

  /** Of the candidates, the ids that have a live version of a higher lifecycle (on `vehicle`, if given) in the id index. */
  private async higherLifecycles(
    tenant: string,
    candidates: ReadonlyArray<{ key: string; rank: number }>,
    vehicle: string | undefined,
  ): Promise<Set<string>> {
    const ranks = new Map<string, number>();
    for (const c of candidates) if (c.rank < LIFECYCLES.length) ranks.set(c.key, c.rank);
    const higher = new Set<string>();
    const ids = [...ranks.keys()];
    const queries: Promise<void>[] = [];
    for (let i = 0; i < ids.length; i += this.lookupChunk) {
      queries.push(
        this.select<{ event_id: string; lifecycle_rank: number; vehicle_id: string; deleted: number }>(
          eventPlacementsSql(this.database, tenant, ids.slice(i, i + this.lookupChunk)),
        ).then((rows) => {
          for (const r of rows) {
            if (Number(r.deleted) !== 0 || (vehicle !== undefined && r.vehicle_id !== vehicle)) continue;
            if (Number(r.lifecycle_rank) > ranks.get(r.event_id)!) higher.add(r.event_id);
          }
        }),
      );
    }
    await Promise.all(queries);
    return higher;
  }

  /**
   * A vehicle's track (`trackSql`), yielded row by row as ClickHouse sends them: the consumer's
   * pace is the stream's (nothing is read ahead beyond the socket's buffers), and a consumer that
   * stops early closes the response.
   */
  async *track(scan: TrackScan): AsyncGenerator<TrackPoint> {
    if (!(scan.to > scan.from) || (scan.limit !== undefined && !(scan.limit > 0))) return;
    for await (const [key, rank, time, lat, lon, speed, heading, doc] of this.trackRows(trackSql(this.database, scan))) {
      yield { ...fixOf(time!, lat!, lon!, speed, heading), key: key!, lifecycleRank: Number(rank), doc: doc! };
    }
  }

  /** The track's points without their documents (`trackSql` without the `doc` column), a chunk of ClickHouse's answer at a time. */
  async *fixes(scan: FixScan): AsyncGenerator<readonly TrackFixPoint[]> {
    if (!(scan.to > scan.from) || (scan.limit !== undefined && !(scan.limit > 0))) return;
    const { query, params } = trackSql(this.database, scan, { documents: false });
    const rs = await this.run(() => this.client.query({ query, query_params: params, format: 'TabSeparated' }));
    try {
      for await (const rows of rs.stream()) {
        yield rows.map((row) => {
          const [, , time, lat, lon, speed, heading] = tsvFields(row.text);
          return fixOf(time!, lat!, lon!, speed, heading);
        });
      }
    } catch (e) {
      throw clickhouseFailure(e);
    } finally {
      rs.close();
    }
  }

  /** The fields of each row of a track query, as ClickHouse sends them. */
  private async *trackRows({ query, params }: Sql): AsyncGenerator<(string | null)[]> {
    const rs = await this.run(() => this.client.query({ query, query_params: params, format: 'TabSeparated' }));
    try {
      for await (const rows of rs.stream()) for (const row of rows) yield tsvFields(row.text);
    } catch (e) {
      throw clickhouseFailure(e);
    } finally {
      rs.close();
    }
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
          this.select<{ event_id: string; lifecycle_rank: number; vehicle_id: string; event_time: string; deleted: number }>(
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
    await this.store(writes);
  }

  /**
   * `write`, answered with the latest-position fixes of the location events it stored, in the
   * order written (event-facts.ts `trackFix`, here read from the columns each row needed anyway:
   * `columnsTrackFix`). The telemetry worker calls it when it records the positions itself.
   */
  async writeWithFixes(writes: readonly DocumentWrite[]): Promise<Array<LatestPosition & { tenant: string }>> {
    const fixes: Array<LatestPosition & { tenant: string }> = [];
    for (const r of await this.store(writes)) {
      const fix = columnsTrackFix(r);
      if (fix !== undefined) fixes.push(positionOfFix(fix, r.tenant, r.event_id));
    }
    return fixes;
  }

  /** Stores the writes; resolves with the rows of the puts, in the order written. */
  private async store(writes: readonly DocumentWrite[]): Promise<EventRow[]> {
    if (writes.length === 0) return [];
    for (const w of writes) {
      const kind = w.op === 'put' ? w.doc.kind : w.kind;
      if (kind !== 'events')
        throw new AdapterError('clickhouse', `the ClickHouse event store keeps events only, not ${kind}`, { retryable: false });
    }
    const ids = new Set(writes.map((w) => placeKey(w.tenant, w.op === 'put' ? w.doc.key : w.key)));
    if (ids.size === writes.length && writes.every((w) => w.op === 'put')) return this.writeNew(writes);
    return this.writeInOrder(writes);
  }

  /**
   * `INSERT … FORMAT TabSeparated` (tsv.ts) with the rows streamed in small pieces. Given one
   * string, the client would hold the whole insert (tens of megabytes for a large batch of events
   * with their documents) and copy it once more into a socket buffer: fresh memory the kernel has
   * to zero page by page, a large share of the telemetry worker's CPU in bulk ingest
   * (docs/PERFORMANCE.md). Pieces stay in V8's young generation.
   */
  private async insert<R>(table: string, format: RowFormat<R>, values: readonly R[]): Promise<void> {
    if (values.length === 0) return;
    try {
      const query = `INSERT INTO ${table} (${format.columns.join(', ')}) FORMAT TabSeparated`;
      const { stream } = await this.client.exec({ query, values: Readable.from(tsvPieces(values, format.line)) });
      // The answer is empty; reading it to the end hands the socket back to the keep-alive pool.
      for await (const _ of stream) {
        // nothing to read
      }
    } catch (e) {
      // Out of space or parts: a StorageRefused, and the store's write state down (errors.ts).
      throw clickhouseFailure(e, this.writes);
    }
    this.writes.ok();
  }

  /** Whether ClickHouse takes inserts: down from one refused for lack of room until one succeeds (errors.ts). */
  readonly writes = new WriteState('clickhouse');

  /** The store's write state, for the process's /readyz (core/health.ts). */
  parts(): Monitored[] {
    return [this.writes.part];
  }

  /**
   * The common case, puts of distinct ids: their otm_events rows are inserted while the lookup
   * runs (its answer is only needed for the rare event that moved to another vehicle or time,
   * whose old row then gets a tombstone); the id index is written last, as it is what GET and the
   * next lookup trust, so a failure before it is repaired by the replay of the batch.
   */
  private async writeNew(writes: readonly DocumentWrite[]): Promise<EventRow[]> {
    const now = Date.now();
    const rows = writes.map((w) => liveRow(w as DocumentWrite & { op: 'put' }, now, this.nextVersion()));
    const [state] = await Promise.all([this.lookup(writes), this.insert(this.events, EVENT_FORMAT, rows)]);
    const tombstones: EventRow[] = [];
    for (const r of rows) {
      const before = state.get(placeKey(r.tenant, r.event_id))?.get(r.lifecycle_rank);
      if (before && (before.vehicle_id !== r.vehicle_id || before.event_time !== r.event_time)) {
        tombstones.push(tombstoneRow(r.tenant, r.event_id, r.lifecycle_rank, before, now, this.nextVersion()));
      }
    }
    await this.insert(this.events, EVENT_FORMAT, tombstones);
    await this.insert(this.ids, ID_FORMAT, rows.map(idRow));
    return rows;
  }

  /** Any mix of puts and deletes, also of one id several times: applied one after the other. */
  private async writeInOrder(writes: readonly DocumentWrite[]): Promise<EventRow[]> {
    const state = await this.lookup(writes);
    const now = Date.now();
    const eventRows: EventRow[] = [];
    const putRows: EventRow[] = [];
    const idRows: IdRow[] = [];
    const tombstone = (tenant: string, id: string, rank: number, at: Placement) => {
      const row = tombstoneRow(tenant, id, rank, at, now, this.nextVersion());
      eventRows.push(row);
      return row;
    };
    for (const w of writes) {
      if (w.op === 'delete') {
        const k = placeKey(w.tenant, w.key);
        for (const [rank, at] of state.get(k) ?? []) idRows.push(idRow(tombstone(w.tenant, w.key, rank, at)));
        state.delete(k);
        continue;
      }
      const k = placeKey(w.tenant, w.doc.key);
      const versions = state.get(k) ?? new Map<number, Placement>();
      const before = versions.get(w.doc.lifecycleRank);
      const row = liveRow(w, now, this.nextVersion());
      // The event moved (another vehicle or time): its old row in otm_events must go. The id
      // index needs no tombstone: the new row's entry replaces the old one.
      if (before && (before.vehicle_id !== row.vehicle_id || before.event_time !== row.event_time)) {
        tombstone(w.tenant, w.doc.key, w.doc.lifecycleRank, before);
      }
      eventRows.push(row);
      putRows.push(row);
      idRows.push(idRow(row));
      versions.set(w.doc.lifecycleRank, { vehicle_id: row.vehicle_id, event_time: row.event_time });
      state.set(k, versions);
    }
    await this.insert(this.events, EVENT_FORMAT, eventRows);
    await this.insert(this.ids, ID_FORMAT, idRows);
    return putRows;
  }

  /**
   * The entity export's write (`EntityChangeSink`): the rows of the changes (entity-columns.ts) in
   * one insert into otm_entities; resolves with their number once ClickHouse has them.
   */
  async writeEntityChanges(changes: readonly EntityChange[]): Promise<number> {
    const rows = changes.flatMap(entityRows);
    await this.insert(this.entities, ENTITY_FORMAT, rows);
    return rows.length;
  }

  /** Drops the database with its tables (tests, tear-down of a tenant-less scratch database). */
  async dropDatabase(): Promise<void> {
    await this.run(() => this.client.command({ query: `DROP DATABASE IF EXISTS ${this.database}` }));
  }

  /** Runs a SELECT and returns its rows (for tests and tools): SQL as written, with the values of its `{name:Type}` parameters. */
  async query<T = Record<string, unknown>>(query: string, params: Record<string, unknown> = {}): Promise<T[]> {
    return this.select<T>({ query, params });
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
