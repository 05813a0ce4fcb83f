/**
 * The SQL the ClickHouse event store sends, and the escaping of values written into it.
 *
 * ClickHouse 18.16 (the tests' server) has no query parameters, so values are written into the
 * SQL: identifiers only if they are plain names (`sqlIdent`), numbers only if they are unsigned
 * integers (`sqlUInt`), strings always quoted and escaped (`sqlString`). A value that fails these
 * checks is a bug of the caller, not a ClickHouse failure: a non-retryable AdapterError. The SQL is
 * kept to what 18.16 and a current ClickHouse both accept (`scripts/check-current-clickhouse.mjs`
 * runs it on a current one).
 */
import { AdapterError } from '@otm/core';

const IDENT = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** `name` if it is a plain SQL identifier (a database or column name); else a non-retryable AdapterError. */
export function sqlIdent(name: string, what: string): string {
  if (!IDENT.test(name)) throw new AdapterError('clickhouse', `${what}: ${name}`, { retryable: false });
  return name;
}

/** A ClickHouse string literal (single quotes; backslash and quote escaped; NUL and newlines too). */
export function sqlString(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\0/g, '\\0').replace(/\n/g, '\\n').replace(/\r/g, '\\r')}'`;
}

/** A non-negative integer for SQL, or a non-retryable AdapterError. */
export function sqlUInt(n: number): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new AdapterError('clickhouse', `not an unsigned integer: ${n}`, { retryable: false });
  return String(n);
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
export function eventGetSql(database: string, tenant: string, keys: readonly string[], lifecycleRank?: number): string {
  sqlIdent(database, 'bad ClickHouse database name');
  if (keys.length === 0) throw new AdapterError('clickhouse', 'eventGetSql: no ids', { retryable: false });
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
 * element, an array literal as one value (bench/diag/clickhouse/clickhouse-lookup.mjs). The
 * primary key is used either way (`use_index_for_in_with_subqueries`, on by default).
 */
export function eventPlacementsSql(database: string, tenant: string, ids: readonly string[]): string {
  sqlIdent(database, 'bad ClickHouse database name');
  if (ids.length === 0) throw new AdapterError('clickhouse', 'eventPlacementsSql: no ids', { retryable: false });
  return `SELECT event_id, lifecycle_rank, argMax(vehicle_id, version) AS vehicle_id,
                 toUInt32(argMax(event_time, version)) AS event_time, argMax(deleted, version) AS deleted
          FROM ${database}.otm_event_ids
          WHERE tenant = ${sqlString(tenant)} AND kind = 'events' AND event_id IN (SELECT arrayJoin([${ids.map(sqlString).join(',')}]))
          GROUP BY event_id, lifecycle_rank`;
}
