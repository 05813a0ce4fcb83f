/**
 * The SQL the ClickHouse event store sends. Values travel as query parameters (`{name:Type}` in
 * the SQL, their values beside it: @clickhouse/client's `query_params`, the `param_*` of
 * ClickHouse's HTTP interface), never in the SQL text; only the database name is written into it,
 * and only if it is a plain name (`sqlIdent`). A value the builders cannot use (no ids, a negative
 * rank) is a bug of the caller, not a ClickHouse failure: a non-retryable AdapterError.
 */
import { AdapterError, type FixScan, type ListScan, type TrackScan } from '@otm/core';
import { dateTime64 } from './time.js';

/** A statement and the values of its `{name:Type}` parameters. */
export interface Sql {
  readonly query: string;
  readonly params: Record<string, unknown>;
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** `name` if it is a plain SQL identifier (a database or column name); else a non-retryable AdapterError. */
export function sqlIdent(name: string, what: string): string {
  if (!IDENT.test(name)) throw new AdapterError('clickhouse', `${what}: ${name}`, { retryable: false });
  return name;
}

/** `n` if it is a non-negative safe integer, else a non-retryable AdapterError. */
function unsigned(n: number): number {
  if (!Number.isSafeInteger(n) || n < 0) throw new AdapterError('clickhouse', `not an unsigned integer: ${n}`, { retryable: false });
  return n;
}

/** `n` if it is a safe integer, else a non-retryable AdapterError. */
function integer(n: number): number {
  if (!Number.isSafeInteger(n)) throw new AdapterError('clickhouse', `not an integer: ${n}`, { retryable: false });
  return n;
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
 * read the documents of every granule the sorting key selected (clearly less of ClickHouse's CPU
 * for a query of many ids: `bench/diag/clickhouse/clickhouse-get.mjs` measures it). It is not a
 * FINAL query, so PREWHERE drops only the rows of other events: every version and tombstone of an
 * asked id stays for `argMax`. (ClickHouse does not move these conditions to PREWHERE itself: they
 * are on columns of the sorting key.)
 */
export function eventGetSql(database: string, tenant: string, keys: readonly string[], lifecycleRank?: number): Sql {
  sqlIdent(database, 'bad ClickHouse database name');
  if (keys.length === 0) throw new AdapterError('clickhouse', 'eventGetSql: no ids', { retryable: false });
  const params: Record<string, unknown> = { tenant, ids: keys };
  if (lifecycleRank !== undefined) params.rank = unsigned(lifecycleRank);
  const ids = `tenant = {tenant:String} AND event_id IN {ids:Array(String)}${lifecycleRank === undefined ? '' : ' AND lifecycle_rank = {rank:UInt8}'}`;
  return {
    query: `SELECT event_id, lifecycle_rank, argMax(doc, version) AS doc, argMax(deleted, version) AS deleted
       FROM ${database}.otm_events
       PREWHERE ${ids}
       WHERE (vehicle_id, event_time, event_id) IN (
         SELECT argMax(vehicle_id, version), argMax(event_time, version), event_id
         FROM ${database}.otm_event_ids WHERE ${ids} AND kind = 'events' GROUP BY event_id, lifecycle_rank)
       GROUP BY event_id, lifecycle_rank, vehicle_id, event_time`,
    params,
  };
}

/** The SQL that finds where each of `ids` (events of `tenant`) sits in otm_events, per lifecycle. */
export function eventPlacementsSql(database: string, tenant: string, ids: readonly string[]): Sql {
  sqlIdent(database, 'bad ClickHouse database name');
  if (ids.length === 0) throw new AdapterError('clickhouse', 'eventPlacementsSql: no ids', { retryable: false });
  return {
    query: `SELECT event_id, lifecycle_rank, argMax(vehicle_id, version) AS vehicle_id,
                 toUnixTimestamp64Milli(argMax(event_time, version)) AS event_time, argMax(deleted, version) AS deleted
          FROM ${database}.otm_event_ids
          WHERE tenant = {tenant:String} AND kind = 'events' AND event_id IN {ids:Array(String)}
          GROUP BY event_id, lifecycle_rank`,
    params: { tenant, ids },
  };
}

/** An instant (ms) as a DateTime64(3) parameter's value, clamped to the column's range. */
const instant = (ms: number): string => dateTime64(ms);

/** A facet value kept as its SHA-256 (facets.ts `facet`): no column can be compared with it. */
const HASHED_FACET = /^#[0-9a-f]{64}$/;

/**
 * What a list facet (facets.ts) asks of otm_events: a vehicle is a column of the sorting key, so
 * its filter selects a range of rows (`vehicle`, read through the primary index); an event type is
 * asked of the version each event is listed by (`eventType`). Any other facet (`lifecycle=`,
 * `externalId=`, `''`, a hashed value) is not looked at: every event is a candidate, and the query
 * checks its filters on the document.
 */
export function eventListFacet(facet: string): { vehicle?: string; eventType?: string } {
  const eq = facet.indexOf('=');
  if (eq < 0) return {};
  const name = facet.slice(0, eq);
  const value = facet.slice(eq + 1);
  if (HASHED_FACET.test(value)) return {};
  if (name === 'vehicle') return { vehicle: value };
  if (name === 'eventType') return { eventType: value };
  return {};
}

/**
 * The event times (ms) a list scan bounds: from `since` or just after the `after` position,
 * whichever is later, and before `before`. Rows outside them are not read (`eventListSql`).
 */
export function eventListBounds(scan: ListScan): { from?: number; to?: number } {
  let from = scan.since === undefined ? undefined : Math.ceil(scan.since);
  if (scan.after !== undefined && (from === undefined || scan.after.at > from)) from = scan.after.at;
  return {
    ...(from === undefined ? {} : { from }),
    ...(scan.before === undefined ? {} : { to: Math.ceil(scan.before) }),
  };
}

/**
 * The SQL of a page of the list of a tenant's telemetry events (`ClickHouseEventStore.list`): each
 * event with `at` = the event time (`event_time`, as ms) of the version it is listed by, and that
 * version's lifecycle rank, in keyset order (at, event_id).
 *
 * The version an event is listed by is chosen as the track chooses it: the newest row (highest
 * `version`) at each place (vehicle, time, id, lifecycle: the sorting key) tells whether the
 * version there is live (a tombstone only hides the rows at its own place, and a moved version's
 * tombstone may have a higher `version` than the moved row), and of the live ones the highest
 * lifecycle wins (then the newest row). `argMax` suits these columns: none is Nullable (an
 * aggregate skips the NULLs of a Nullable argument). An event type is then a filter on the chosen
 * version, never on the rows before the choice (that would choose another version).
 *
 * Rows are read through the primary index (tenant, vehicle, event_time): all of the tenant's, only
 * a vehicle's with a `vehicle=` facet (a range), and only those of the seconds within the scan's
 * bounds (`eventListBounds`; without a vehicle the bounds still skip other months' partitions).
 * The choice is made among the rows read: an event whose higher lifecycle lies outside the bounds
 * (or on another vehicle, with a `vehicle=` facet) is listed here by a lower one, and the store
 * drops such candidates by what the id index says of the event (`ClickHouseEventStore.list`). Each
 * page sorts the events of the rows read, from its cursor on: otm_events is sorted by vehicle and
 * time, not by time alone.
 */
export function eventListSql(database: string, scan: ListScan): Sql {
  sqlIdent(database, 'bad ClickHouse database name');
  const { vehicle, eventType } = eventListFacet(scan.facet);
  const { from, to } = eventListBounds(scan);
  const params: Record<string, unknown> = { tenant: scan.tenant, limit: unsigned(Math.floor(scan.limit)) };
  const place = ['tenant = {tenant:String}'];
  if (vehicle !== undefined) {
    place.push('vehicle_id = {vehicle:String}');
    params.vehicle = vehicle;
  }
  if (from !== undefined) {
    place.push("event_time >= {fromT:DateTime64(3, 'UTC')}");
    params.fromT = instant(from);
  }
  if (to !== undefined) {
    place.push("event_time < {toT:DateTime64(3, 'UTC')}");
    params.toT = instant(to);
  }
  const where: string[] = [];
  if (eventType !== undefined) {
    where.push('event_type = {eventType:String}');
    params.eventType = eventType;
  }
  if (scan.since !== undefined) {
    where.push('at >= {since:Int64}');
    params.since = integer(Math.ceil(scan.since));
  }
  if (scan.before !== undefined) {
    where.push('at < {before:Int64}');
    params.before = integer(Math.ceil(scan.before));
  }
  if (scan.after !== undefined) {
    where.push('(at > {afterAt:Int64} OR (at = {afterAt:Int64} AND event_id > {afterKey:String}))');
    params.afterAt = integer(scan.after.at);
    params.afterKey = scan.after.key;
  }
  const query = `SELECT event_id, at, lifecycle_rank
FROM (
  SELECT event_id, argMax(t, (r, v)) AS at, max(r) AS lifecycle_rank${eventType === undefined ? '' : ', argMax(ty, (r, v)) AS event_type'}
  FROM (
    SELECT event_id, lifecycle_rank AS r, max(version) AS v, toUnixTimestamp64Milli(argMax(event_time, version)) AS t, argMax(deleted, version) AS gone${
      eventType === undefined ? '' : ', argMax(event_type, version) AS ty'
    }
    FROM ${database}.otm_events
    PREWHERE ${place.join(' AND ')}
    GROUP BY event_id, lifecycle_rank, vehicle_id, event_time
  )
  WHERE gone = 0
  GROUP BY event_id
)${where.length > 0 ? `\nWHERE ${where.join(' AND ')}` : ''}
ORDER BY at, event_id
LIMIT {limit:UInt64}`;
  return { query, params };
}

/** The columns of a track point, in the order `trackSql` selects them. */
export const TRACK_COLUMNS = [
  'event_id',
  'lifecycle_rank',
  'toUnixTimestamp64Milli(event_time)',
  'lat',
  'lon',
  'speed_kmh',
  'heading',
  'doc',
] as const;

/**
 * The SQL of a vehicle's track (`ClickHouseEventStore.track`): its location events in the window,
 * each once, in event time order (newest first for a descending `FixScan`), with their documents
 * unless `shape.documents` is false.
 *
 * The rows are read through the primary index (tenant, vehicle, `event_time` in whole seconds
 * around the window). Which rows count is decided on slim columns in the subquery: the newest row
 * at each place (`LIMIT 1 BY` the place: a tombstone only hides the rows at its own place, and a
 * moved version's tombstone may have a higher `version` than the moved row), the live ones, then
 * per event the highest lifecycle (then the newest version), then only location events with a
 * position in the window, after the cursor, up to the limit. `LIMIT 1 BY` keeps whole rows, where
 * `argMax` would skip a NULL position of the newest row for an older one's. The documents are read
 * only for the rows chosen, and sorted once. An event whose versions lie at different times or
 * vehicles is seen with the highest version this vehicle and window hold.
 */
export function trackSql(database: string, scan: TrackScan | FixScan, shape: { documents: boolean } = { documents: true }): Sql {
  const descending = 'descending' in scan && scan.descending === true;
  const order = descending ? 'event_time DESC, event_id DESC' : 'event_time, event_id';
  const columns = shape.documents ? TRACK_COLUMNS : TRACK_COLUMNS.slice(0, -1);
  sqlIdent(database, 'bad ClickHouse database name');
  const params: Record<string, unknown> = {
    tenant: scan.tenant,
    vehicle: scan.vehicle,
    from: instant(Math.ceil(scan.from)),
    to: instant(Math.ceil(scan.to)),
  };
  const place = `tenant = {tenant:String} AND vehicle_id = {vehicle:String}
    AND event_time >= {from:DateTime64(3, 'UTC')} AND event_time < {to:DateTime64(3, 'UTC')}`;
  const conditions = [`event_type = 'locationUpdateEvent'`, 'located = 1'];
  if ('after' in scan && scan.after !== undefined) {
    conditions.push(
      "(event_time > {afterTime:DateTime64(3, 'UTC')} OR (event_time = {afterTime:DateTime64(3, 'UTC')} AND event_id > {afterKey:String}))",
    );
    params.afterTime = instant(integer(scan.after.time));
    params.afterKey = scan.after.key;
  }
  if (scan.limit !== undefined) params.limit = unsigned(Math.floor(scan.limit));
  const limit = scan.limit === undefined ? '' : '\nLIMIT {limit:UInt64}';
  const query = `SELECT ${columns.join(', ')}
FROM ${database}.otm_events
PREWHERE ${place}
WHERE (event_id, lifecycle_rank, event_time, version) IN (
  SELECT event_id, lifecycle_rank, event_time, version
  FROM (
    SELECT event_id, lifecycle_rank, event_time, version, event_type, located
    FROM (
      SELECT event_id, lifecycle_rank, event_time, version, deleted, event_type,
             isNotNull(lat) AND isNotNull(lon) AS located
      FROM ${database}.otm_events
      PREWHERE ${place}
      ORDER BY event_id, lifecycle_rank, event_time, version DESC
      LIMIT 1 BY event_id, lifecycle_rank, event_time
    )
    WHERE deleted = 0
    ORDER BY event_id, lifecycle_rank DESC, version DESC
    LIMIT 1 BY event_id
  )
  WHERE ${conditions.join(' AND ')}
  ORDER BY ${order}${limit}
)
ORDER BY ${order}
LIMIT 1 BY event_id${limit}`;
  return { query, params };
}
