/**
 * The rows the ClickHouse event store inserts (`store.ts`), made from the writes it is given: an
 * event version's row of otm_events, the tombstone that hides a version at its old place, the row
 * of the id index, and their TabSeparated formats (tsv.ts). Pure functions, no I/O.
 */
import { AdapterError, type DocumentWrite } from '@otm/core';
import { eventColumns, type EventColumns } from './columns.js';
import { errorText } from '../error-text.js';
import { ENTITY_COLUMNS, EVENT_COLUMNS, ID_COLUMNS, type EntityRow, type EventRow, type IdRow } from './schema.js';
import { clampDateTime64 } from './time.js';
import { rowFormat } from './tsv.js';

/** Where a live version sits in otm_events: its vehicle and event time (ms). */
export interface Placement {
  vehicle_id: string;
  event_time: number;
}

export const EVENT_FORMAT = rowFormat<EventRow>(EVENT_COLUMNS, ['event_time']);
export const ID_FORMAT = rowFormat<IdRow>(ID_COLUMNS, ['event_time']);
export const ENTITY_FORMAT = rowFormat<EntityRow>(ENTITY_COLUMNS, ['changed_at']);

const EMPTY_COLUMNS: EventColumns = {
  lifecycle: '',
  event_type: '',
  event_time: 0,
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

/** A document's JSON text as an object; a text that is not JSON can never be stored (not retryable). */
function parseDocument(json: string): Record<string, unknown> {
  try {
    return JSON.parse(json) as Record<string, unknown>;
  } catch (e) {
    throw new AdapterError('clickhouse', `the document is not JSON: ${errorText(e)}`, { retryable: false, cause: e });
  }
}

/**
 * The otm_events row of a put, at `version`. Its event time is clamped to what a DateTime64
 * holds, as ClickHouse stores it, so that where the row sits compares equal to what the id index
 * says of it later.
 */
export function liveRow(w: DocumentWrite & { op: 'put' }, now: number, version: number): EventRow {
  const { doc, tenant } = w;
  const acceptedAt = doc.stamp?.acceptedAt ?? now;
  const cols = eventColumns(doc.value ?? parseDocument(doc.json), acceptedAt);
  // Object.assign onto the fresh columns object: in V8 a spread ({ ...cols, ... }) of this many
  // members is far slower, and it was the main cost of the worker in bulk ingest.
  return Object.assign(cols, {
    tenant,
    event_id: doc.key,
    lifecycle_rank: doc.lifecycleRank,
    event_time: clampDateTime64(cols.event_time),
    accepted_at: acceptedAt,
    version,
    deleted: 0 as const,
    doc: doc.json,
  });
}

/** A row, at `version`, that hides the version of `id` at `rank` that sits at `at` in otm_events. */
export function tombstoneRow(tenant: string, id: string, rank: number, at: Placement, now: number, version: number): EventRow {
  // Object.assign, not a spread followed by members (about a µs a member in V8).
  return Object.assign({}, EMPTY_COLUMNS, {
    tenant,
    event_id: id,
    lifecycle_rank: rank,
    vehicle_id: at.vehicle_id,
    event_time: at.event_time,
    accepted_at: now,
    version,
    deleted: 1 as const,
    doc: '',
  });
}

/** The id index's row of an otm_events row. */
export function idRow(r: EventRow): IdRow {
  const { tenant, event_id, lifecycle_rank, vehicle_id, event_time, accepted_at, version, deleted } = r;
  return { tenant, kind: 'events', event_id, lifecycle_rank, vehicle_id, event_time, accepted_at, version, deleted };
}
