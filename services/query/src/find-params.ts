/**
 * The query parameters of the find extensions (lists, change feed, tracks, positions): each read
 * strictly, a bad value answered 400 in the model's error format naming the parameter.
 */
import { ACTION_TYPES, EVENT_TYPES, STATUS_VALUES, isKindSegment, type KindSegment } from '@otm/model';
import { LIFECYCLES, ID_FILTERS, LIST_FILTERS, invalidDocument, storageKey } from '@otm/core';
import { clip } from '@otm/http';

export const bad = (field: string, message: string) => invalidDocument([{ type: 'invalidField', field, message }]);

/** Longest text of a filter value (an external id, a licence plate). */
const VALUE_MAX = 1_000;

/** `limit`: a whole number from 1 to `max`, else `fallback`. */
export function limitParam(raw: string | undefined, fallback: number, max: number): number {
  if (raw === undefined) return fallback;
  if (!/^\d{1,7}$/.test(raw) || Number(raw) < 1 || Number(raw) > max) throw bad('limit', `must be a whole number from 1 to ${max}`);
  return Number(raw);
}

/** An RFC 3339 date-time (with a time zone), as ms since the epoch. */
export function timeParam(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const ms = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i.test(raw) ? Date.parse(raw) : NaN;
  if (!Number.isFinite(ms)) throw bad(name, `must be a date-time with a time zone, such as 2026-11-25T08:00:00Z; got '${clip(raw)}'`);
  return ms;
}

/** A duration: a number with s, m, h or d (`90s`, `15m`, `2h`, `7d`), in ms. */
export function durationParam(name: string, raw: string): number {
  const m = /^(\d{1,9})([smhd])$/.exec(raw);
  if (!m) throw bad(name, `must be a duration such as 90s, 15m, 2h or 1d; got '${clip(raw)}'`);
  return Number(m[1]) * { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's' | 'm' | 'h' | 'd'];
}

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

const ENUMS: Record<string, readonly string[]> = {
  status: STATUS_VALUES,
  lifecycle: LIFECYCLES,
  eventType: EVENT_TYPES,
  actionType: ACTION_TYPES,
};

/** A list's filters, checked against what the kind accepts; values of id filters as storage keys. */
export interface ListFilters {
  readonly facets: ReadonlyMap<string, string>;
  readonly updatedSince?: number;
  readonly updatedBefore?: number;
  /** Event time window (events). */
  readonly from?: number;
  readonly to?: number;
}

export const LIST_PARAMS = ['limit', 'cursor', 'updatedSince', 'updatedBefore'] as const;

export function listFilters(kind: KindSegment, q: Readonly<Record<string, string>>): ListFilters {
  const facets = new Map<string, string>();
  for (const name of LIST_FILTERS[kind]) {
    const v = q[name];
    if (v === undefined || name === 'from' || name === 'to') continue;
    if (v === '' || v.length > VALUE_MAX) throw bad(name, `must be a value of 1 to ${VALUE_MAX} characters`);
    const allowed = ENUMS[name];
    if (allowed && !allowed.includes(v)) throw bad(name, `must be one of ${allowed.join(', ')}; got '${clip(v)}'`);
    facets.set(name, ID_FILTERS.has(name) ? storageKey(v) : v);
  }
  const updatedSince = timeParam('updatedSince', q.updatedSince);
  const updatedBefore = timeParam('updatedBefore', q.updatedBefore);
  const from = timeParam('from', q.from);
  const to = timeParam('to', q.to);
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

/** `kinds`: comma-separated kind segments. */
export function kindsParam(raw: string | undefined): ReadonlySet<KindSegment> | undefined {
  if (raw === undefined) return undefined;
  const kinds = new Set<KindSegment>();
  for (const k of raw.split(',')) {
    if (!isKindSegment(k)) throw bad('kinds', `'${clip(k)}' is not a kind; use the path segments, e.g. trips,events`);
    kinds.add(k);
  }
  return kinds;
}

/** `bbox=minLon,minLat,maxLon,maxLat` (WGS 84 degrees). */
export function bboxParam(raw: string | undefined): [number, number, number, number] | undefined {
  if (raw === undefined) return undefined;
  const parts = raw.split(',');
  const n = parts.map((p) => (/^-?\d{1,3}(\.\d{1,15})?$/.test(p.trim()) ? Number(p) : NaN));
  const [minLon, minLat, maxLon, maxLat] = n as [number, number, number, number];
  if (
    parts.length !== 4 ||
    n.some((x) => !Number.isFinite(x)) ||
    minLon < -180 ||
    maxLon > 180 ||
    minLat < -90 ||
    maxLat > 90 ||
    minLat > maxLat ||
    minLon > maxLon
  ) {
    throw bad('bbox', 'must be minLon,minLat,maxLon,maxLat in degrees, min before max (lon -180..180, lat -90..90)');
  }
  return [minLon, minLat, maxLon, maxLat];
}
