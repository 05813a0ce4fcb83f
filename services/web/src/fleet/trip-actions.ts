/**
 * A trip's actions as the page lists them: in order, each followed by its own, with a location and
 * a time window. Pure (what is fetched is given): unit-tested in test/trip-actions.test.ts.
 */
import { fmtTime, str } from './format.js';

/** An association of the model: an entity inline, or a reference to one. */
export interface Association {
  associationType?: string;
  uuid?: string;
  entity?: Record<string, unknown>;
}

/** A location as the page shows it: its name or id, and its point when it has one. */
export interface Located {
  name?: string;
  id?: string;
  lat?: number;
  lon?: number;
}

/** A row of the actions table (and of the lifecycles table): an action, how deep it is nested, its location, its stop number. */
export interface ActionRow {
  depth: number;
  action: Record<string, unknown>;
  location?: Located;
  stop?: number;
}

/** The action types whose location is a stop of the trip on the map. */
export const LOCATED = new Set(['stop', 'load', 'unload']);

/** Actions in their order: by sequenceNr, unnumbered ones after, each kept in its place among equals. */
export function inSequence(actions: readonly Record<string, unknown>[]): Record<string, unknown>[] {
  const seq = (a: Record<string, unknown>) => (typeof a.sequenceNr === 'number' ? a.sequenceNr : Number.MAX_SAFE_INTEGER);
  return [...actions].sort((a, b) => seq(a) - seq(b)); // a stable sort
}

/** What the page shows of a location (`loc`, fetched or inline; undefined when it could not be) that `ref` names. */
export function located(loc: Record<string, unknown> | undefined, ref: Association): Located {
  if (loc === undefined) return { id: ref.uuid };
  const geo = loc.geoReference as { type?: string; lat?: number; lon?: number } | undefined;
  const point = geo?.type === 'latLonPointGeoReference' && typeof geo.lat === 'number' && typeof geo.lon === 'number';
  return {
    id: typeof loc.id === 'string' ? loc.id : ref.uuid,
    name: typeof loc.name === 'string' ? loc.name : undefined,
    ...(point ? { lat: geo.lat, lon: geo.lon } : {}),
  };
}

/** A location's label: its name, else its id, else ''. */
export const placeName = (loc: Located | undefined): string => (loc === undefined ? '' : (loc.name ?? loc.id ?? ''));

/** An action's times: `start – end`, and `window start – end` of a timeWindowConstraint it holds inline. */
export function timeWindow(action: Record<string, unknown>): string {
  const parts: string[] = [];
  if (action.startTime !== undefined || action.endTime !== undefined)
    parts.push(`${fmtTime(action.startTime)} – ${fmtTime(action.endTime)}`);
  const c = (action.constraint as Association | undefined)?.entity?.value as
    { type?: string; startTime?: unknown; endTime?: unknown } | undefined;
  if (c?.type === 'timeWindowConstraint') parts.push(`window ${fmtTime(c.startTime)} – ${fmtTime(c.endTime)}`);
  return parts.join('; ');
}

/**
 * Numbers the stops: each row of a `stop`, `load` or `unload` whose location has a point gets the
 * next number (1, 2, ...: `row.stop`); answers their points, in that order.
 */
export function numberStops(rows: ActionRow[]): [number, number][] {
  const points: [number, number][] = [];
  for (const row of rows) {
    const loc = row.location;
    if (!LOCATED.has(str(row.action.actionType)) || loc?.lat === undefined || loc.lon === undefined) continue;
    row.stop = points.length + 1;
    points.push([loc.lat, loc.lon]);
  }
  return points;
}

/** The cells of a row of the actions table: stop, action, lifecycle, location, time window. */
export function actionCells(row: ActionRow): string[] {
  const a = row.action;
  return [row.stop === undefined ? '' : String(row.stop), str(a.actionType), str(a.lifecycle), placeName(row.location), timeWindow(a)];
}
