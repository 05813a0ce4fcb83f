/**
 * The tables of the ClickHouse event store: their DDL (`eventStoreDdl`, run by `otm migrate`;
 * documented in docs/analytics.md) and their rows as the store inserts them.
 *
 * - `otm_events`: one row per telemetry event version: typed columns for analysts and the
 *   document as the API answers it (`doc`), ReplacingMergeTree(version), monthly partitions,
 *   ORDER BY (tenant, vehicle_id, event_time, event_id, lifecycle_rank) for per-vehicle time
 *   ranges: a vehicle's track with its documents is one range read, with no join, and so is a
 *   vehicle's list of events in a time window (lists are in event time order).
 * - `otm_event_ids`: a slim index, one row per (tenant, kind, event_id, lifecycle_rank) version,
 *   ORDER BY (tenant, kind, event_id, lifecycle_rank): where the event's row sits in `otm_events`
 *   (vehicle_id, event_time) and whether it is deleted. GET by id reads it through its primary
 *   index (a subquery), and the document from `otm_events` at that place (again through the
 *   primary index), in one query; GETs that arrive together share one query.
 *   A delete, or a new version that moved the event to another vehicle or time, writes a
 *   tombstone with the old sorting key there.
 * - `otm_entities`: one row per version of an entity of the Redis entity store (trips,
 *   consignments, vehicles, actions, ...; not events), copied from the tenants' change feeds by the
 *   telemetry worker's entity export (services/worker/src/entity-export.ts; columns in
 *   entity-columns.ts): a few typed columns, the entities the document names (`linked_kinds`,
 *   `linked_ids`, for joins), the document. ORDER BY (tenant, kind, entity_id, lifecycle_rank):
 *   one row per version once merged. Its `version` comes from the feed's order (a later change
 *   wins, however often a change is copied); a delete writes tombstones.
 *
 * Granules: ClickHouse reads whole granules (`index_granularity` rows) of each column a query
 * needs, in each part. With the default 8,192, a GET by id would read some 8,000 rows of the id
 * index and as many documents for one event; otm_events uses 1,024 (a vehicle-day of positions at
 * one a minute is still one or two granules) and otm_event_ids 256 (it is only ever read by id).
 *
 * Deduplication: ReplacingMergeTree merges rows with the same sorting key in the background,
 * keeping the highest `version`; until then reads deduplicate themselves: GET uses
 * `argMax(..., version)`; analysts use `FINAL` with `WHERE deleted = 0` (WHERE, not PREWHERE, so it
 * filters after the FINAL merge).
 * `version` is the write time in microseconds, strictly increasing within a process, so a replay of
 * a batch (at-least-once delivery) writes the same rows again with higher versions: same answer.
 * Deletes write tombstones (`deleted = 1`): GET answers 404 at once.
 *
 * Types: event and change times are DateTime64(3, 'UTC') (milliseconds; inserted as their text,
 * tsv.ts `dateTime64`), Nullable(Float64) for absent measurements. The store needs ClickHouse
 * 24.8 or later (query parameters in every clause, DateTime64; docs/deployment.md).
 *
 * Durability: an INSERT is answered after the part is written to the server's filesystem (not
 * fsynced by default). Production should use ReplicatedReplacingMergeTree on a cluster (and
 * `insert_quorum` if acknowledged rows must survive the loss of a replica).
 */
import type { EventColumns } from './columns.js';
import { sqlIdent } from './sql.js';

/** CREATE statements for the tables (idempotent), in the order to run them; `otm migrate` runs them. */
export function eventStoreDdl(database: string): string[] {
  sqlIdent(database, 'bad ClickHouse database name');
  return [
    `CREATE DATABASE IF NOT EXISTS ${database}`,
    `CREATE TABLE IF NOT EXISTS ${database}.otm_events
(
    tenant String,
    event_id String,
    lifecycle_rank UInt8,
    lifecycle String,
    event_type String,
    event_time DateTime64(3, 'UTC'),
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
    event_time DateTime64(3, 'UTC'),
    accepted_at Int64,
    version UInt64,
    deleted UInt8
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant, kind, event_id, lifecycle_rank)
SETTINGS index_granularity = 256`,
    `CREATE TABLE IF NOT EXISTS ${database}.otm_entities
(
    tenant String,
    kind String,
    entity_id String,
    lifecycle_rank UInt8,
    lifecycle String,
    subtype String,
    name String,
    status String,
    external_ids Array(String),
    vehicle_ids Array(String),
    actor_ids Array(String),
    linked_kinds Array(String),
    linked_ids Array(String),
    changed_at DateTime64(3, 'UTC'),
    version UInt64,
    deleted UInt8,
    doc String
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant, kind, entity_id, lifecycle_rank)
SETTINGS index_granularity = 1024`,
  ];
}

/** A row of otm_events. */
export type EventRow = EventColumns & {
  tenant: string;
  event_id: string;
  lifecycle_rank: number;
  accepted_at: number;
  version: number;
  deleted: 0 | 1;
  doc: string;
};

/** A row of otm_event_ids. */
export interface IdRow {
  tenant: string;
  kind: string;
  event_id: string;
  lifecycle_rank: number;
  vehicle_id: string;
  /** ms since the epoch (a DateTime64(3) column). */
  event_time: number;
  accepted_at: number;
  version: number;
  deleted: 0 | 1;
}

/** A row of otm_entities (entity-columns.ts makes them). */
export interface EntityRow {
  tenant: string;
  kind: string;
  entity_id: string;
  lifecycle_rank: number;
  lifecycle: string;
  subtype: string;
  name: string;
  status: string;
  external_ids: readonly string[];
  vehicle_ids: readonly string[];
  actor_ids: readonly string[];
  linked_kinds: readonly string[];
  linked_ids: readonly string[];
  /** ms since the epoch (a DateTime64(3) column). */
  changed_at: number;
  /** A UInt64 in decimal (it may not fit a JavaScript number exactly). */
  version: string;
  deleted: 0 | 1;
  doc: string;
}

/** The columns of otm_events, in the order an insert sends them. */
export const EVENT_COLUMNS = [
  'tenant',
  'event_id',
  'lifecycle_rank',
  'lifecycle',
  'event_type',
  'event_time',
  'vehicle_id',
  'trip_id',
  'sensor_id',
  'transport_equipment_id',
  'lat',
  'lon',
  'speed',
  'speed_unit',
  'speed_kmh',
  'heading',
  'heading_unit',
  'sensor_value',
  'sensor_unit',
  'amount',
  'amount_unit',
  'amount_normalised',
  'amount_normalised_unit',
  'fuel_type',
  'emission_method',
  'weight',
  'weight_unit',
  'weight_kg',
  'weighing_type',
  'accepted_at',
  'version',
  'deleted',
  'doc',
] as const satisfies readonly (keyof EventRow)[];
/** The columns of otm_event_ids, in the order an insert sends them. */
export const ID_COLUMNS = [
  'tenant',
  'kind',
  'event_id',
  'lifecycle_rank',
  'vehicle_id',
  'event_time',
  'accepted_at',
  'version',
  'deleted',
] as const satisfies readonly (keyof IdRow)[];
/** The columns of otm_entities, in the order an insert sends them. */
export const ENTITY_COLUMNS = [
  'tenant',
  'kind',
  'entity_id',
  'lifecycle_rank',
  'lifecycle',
  'subtype',
  'name',
  'status',
  'external_ids',
  'vehicle_ids',
  'actor_ids',
  'linked_kinds',
  'linked_ids',
  'changed_at',
  'version',
  'deleted',
  'doc',
] as const satisfies readonly (keyof EntityRow)[];
// Every member of a row has its column (a compile error otherwise).
const everyEventColumn: Exclude<keyof EventRow, (typeof EVENT_COLUMNS)[number]> extends never ? true : never = true;
const everyIdColumn: Exclude<keyof IdRow, (typeof ID_COLUMNS)[number]> extends never ? true : never = true;
const everyEntityColumn: Exclude<keyof EntityRow, (typeof ENTITY_COLUMNS)[number]> extends never ? true : never = true;
void everyEventColumn;
void everyIdColumn;
void everyEntityColumn;
