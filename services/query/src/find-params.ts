/**
 * The query parameters of the find extensions (lists, change feed, tracks, positions): their
 * schemas, which the routes declare (fastify checks each parameter against them, a bad value
 * answered 400 in the model's error format naming it), and what is made of the values once
 * checked: times, durations, cursors, the list filters; a check that involves two parameters (a
 * window whose end is before its start) answers the same way.
 */
import { ACTION_TYPES, EVENT_TYPES, STATUS_VALUES, type KindSegment } from '@otm/model';
import { LIFECYCLES, ID_FILTERS, LIST_FILTERS, invalidDocument, storageKey } from '@otm/core';
import { KINDS_PARAM, limitParam, query, timeParam } from '@otm/http';

export const bad = (field: string, message: string) => invalidDocument([{ type: 'invalidField', field, message }]);

/** Longest text of a filter value (an external id, a licence plate). */
const VALUE_MAX = 1_000;

/** Default and largest page of a list and of the change feed. */
export const LIST_LIMIT = { fallback: 100, max: 1_000 } as const;
/** Default and largest page of a track in JSON (the other formats stream the whole window). */
export const TRACK_LIMIT = { fallback: 1_000, max: 10_000 } as const;

/** A date-time already checked (RFC 3339, with a time zone), as ms since the epoch. */
export const timeOf = (raw: string | undefined): number | undefined => (raw === undefined ? undefined : Date.parse(raw));

/** A duration already checked (`DURATION`: `90s`, `15m`, `2h`, `7d`), in ms. */
export function durationOf(raw: string): number {
  const unit = raw.at(-1) as 's' | 'm' | 'h' | 'd';
  return Number(raw.slice(0, -1)) * { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[unit];
}

/** A duration: a number with s, m, h or d. */
export const DURATION = {
  type: 'string',
  pattern: '^[0-9]{1,9}[smhd]$',
  'x-message': 'must be a duration such as 90s, 15m, 2h or 1d',
} as const;

/** Opaque cursors: base64url of a small JSON value. */
export function encodeCursor(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

export function decodeCursor<T>(raw: string, check: (v: unknown) => v is T): T {
  let v: unknown;
  try {
    v = raw.length <= 1_000 && /^[A-Za-z0-9_-]+$/.test(raw) ? JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) : undefined;
  } catch {
    v = undefined;
  }
  if (!check(v)) throw bad('cursor', 'is not a cursor this service gave out; start again without one');
  return v;
}

/** A list position in a cursor: `[at, key]`. */
export const isPosition = (v: unknown): v is [number, string] =>
  Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === 'string' && v[1].length <= 64;

/** What each list filter matches, for the OpenAPI document. */
const FILTER_TEXT: Record<string, string> = {
  status: 'the status',
  vehicle: 'the id of the vehicle it names',
  actor: 'the id of one of its actors',
  externalId: 'the id of one of its externalIdentifiers (any scheme)',
  licensePlate: 'the licence plate',
  eventType: 'the event type',
  actionType: 'the action type',
  lifecycle: 'has a version in this lifecycle (answered in it)',
  from: 'event time at or after',
  to: 'event time before',
};

const ENUMS: Record<string, readonly string[]> = {
  status: STATUS_VALUES,
  lifecycle: LIFECYCLES,
  eventType: EVENT_TYPES,
  actionType: ACTION_TYPES,
};

/** The schema of a list filter. */
function filterSchema(name: string): Record<string, unknown> {
  const description = FILTER_TEXT[name];
  if (name === 'from' || name === 'to') return timeParam(description);
  const allowed = ENUMS[name];
  if (allowed !== undefined) return { type: 'string', enum: allowed, description };
  return {
    type: 'string',
    minLength: 1,
    maxLength: VALUE_MAX,
    description,
    'x-message': `must be a value of 1 to ${VALUE_MAX} characters`,
  };
}

/** The query of a list of `kind`: a page, the times of the last change, the kind's filters. */
export const listQuery = (kind: KindSegment) =>
  query({
    limit: limitParam(LIST_LIMIT.max, LIST_LIMIT.fallback),
    cursor: { type: 'string', minLength: 1, maxLength: 1_000, description: 'from the `next` of the previous page' },
    updatedSince: timeParam('last changed at or after'),
    updatedBefore: timeParam('last changed before'),
    ...Object.fromEntries(LIST_FILTERS[kind].map((name) => [name, filterSchema(name)])),
  });

/** The query of the change feed. */
export const CHANGES_QUERY = query({
  cursor: {
    type: 'string',
    minLength: 1,
    maxLength: 100,
    description: 'from a `next` or an item; absent: from the oldest change kept',
    'x-message': 'is not a cursor of this feed',
  },
  kinds: KINDS_PARAM,
  limit: limitParam(LIST_LIMIT.max, LIST_LIMIT.fallback),
});

/** A list's filters, as checked by the list's query schema; values of id filters as storage keys. */
export interface ListFilters {
  readonly facets: ReadonlyMap<string, string>;
  readonly updatedSince?: number;
  readonly updatedBefore?: number;
  /** Event time window (events). */
  readonly from?: number;
  readonly to?: number;
}

/** The filters of a list query that its schema has checked; a window whose end is not after its start is a 400. */
export function listFilters(kind: KindSegment, q: Readonly<Record<string, string | undefined>>): ListFilters {
  const facets = new Map<string, string>();
  for (const name of LIST_FILTERS[kind]) {
    const v = q[name];
    if (v === undefined || name === 'from' || name === 'to') continue;
    facets.set(name, ID_FILTERS.has(name) ? storageKey(v) : v);
  }
  const updatedSince = timeOf(q.updatedSince);
  const updatedBefore = timeOf(q.updatedBefore);
  const from = timeOf(q.from);
  const to = timeOf(q.to);
  if (updatedSince !== undefined && updatedBefore !== undefined && updatedBefore <= updatedSince) {
    throw bad('updatedBefore', 'must be later than updatedSince');
  }
  if (from !== undefined && to !== undefined && to <= from) throw bad('to', 'must be later than from');
  return {
    facets,
    ...(updatedSince === undefined ? {} : { updatedSince }),
    ...(updatedBefore === undefined ? {} : { updatedBefore }),
    ...(from === undefined ? {} : { from }),
    ...(to === undefined ? {} : { to }),
  };
}

/** `kinds` as its schema (KINDS_PARAM) has checked it: comma-separated kind segments. */
export const kindsOf = (raw: string | undefined): ReadonlySet<KindSegment> | undefined =>
  raw === undefined ? undefined : new Set(raw.split(',') as KindSegment[]);

const DEGREES = '-?[0-9]{1,3}(\\.[0-9]{1,15})?';

/** `bbox=minLon,minLat,maxLon,maxLat` (WGS 84 degrees). */
export const BBOX = {
  type: 'string',
  pattern: `^${DEGREES},${DEGREES},${DEGREES},${DEGREES}$`,
  description: 'minLon,minLat,maxLon,maxLat',
  'x-message': 'must be minLon,minLat,maxLon,maxLat in degrees',
} as const;

/** A `bbox` its schema has checked, its ranges checked here: min before max, lon -180..180, lat -90..90. */
export function bboxOf(raw: string | undefined): [number, number, number, number] | undefined {
  if (raw === undefined) return undefined;
  const [minLon, minLat, maxLon, maxLat] = raw.split(',').map(Number) as [number, number, number, number];
  if (minLon < -180 || maxLon > 180 || minLat < -90 || maxLat > 90 || minLat > maxLat || minLon > maxLon) {
    throw bad('bbox', 'must be minLon,minLat,maxLon,maxLat in degrees, min before max (lon -180..180, lat -90..90)');
  }
  return [minLon, minLat, maxLon, maxLat];
}
