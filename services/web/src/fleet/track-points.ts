/**
 * A vehicle's track as the time slider reads it: its positions in time order, the one shown at a
 * time, the step of an arrow key, the details under the map. Pure: unit-tested in test/track-points.test.ts.
 */
import type { FeatureCollection } from 'geojson';
import { fmtSecond } from './format.js';

/** One position of a track (a Point feature of the GeoJSON answer). */
export interface TrackPoint {
  time: number;
  lat: number;
  lon: number;
  speedKmh?: number;
  heading?: number;
}

/** The positions of a track answer, in time order (the service answers them so); features that are no timed point are left out. */
export function pointsOf(fc: FeatureCollection): TrackPoint[] {
  const out: TrackPoint[] = [];
  for (const f of fc.features) {
    if (f.geometry.type !== 'Point') continue;
    const [lon, lat] = f.geometry.coordinates;
    const props = f.properties ?? {};
    const time = typeof props.time === 'string' ? Date.parse(props.time) : NaN;
    if (typeof lat !== 'number' || typeof lon !== 'number' || Number.isNaN(time)) continue;
    out.push({
      time,
      lat,
      lon,
      ...(typeof props.speedKmh === 'number' ? { speedKmh: props.speedKmh } : {}),
      ...(typeof props.heading === 'number' ? { heading: props.heading } : {}),
    });
  }
  return out;
}

/** The index of the last position at or before `time` (the first one when `time` is before all). */
export function indexAt(points: readonly TrackPoint[], time: number): number {
  let lo = 0;
  let hi = points.length; // the first index whose time is after `time`, by binary search
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid]!.time <= time) lo = mid + 1;
    else hi = mid;
  }
  return Math.max(0, lo - 1);
}

/** The arrow keys of the slider: a position forward or back (a step of the range would be a millisecond). */
export const ARROW_STEPS: ReadonlyMap<string, number> = new Map([
  ['ArrowRight', 1],
  ['ArrowUp', 1],
  ['ArrowLeft', -1],
  ['ArrowDown', -1],
]);

/**
 * The position an arrow key goes to from position `index` when the slider is at `chosen` (a
 * time): the next or the previous one, within the track; between two positions (after a drag or
 * Page Up), back goes to the position shown.
 */
export function stepTarget(points: readonly TrackPoint[], index: number, chosen: number, step: number): number {
  const at = points[index]!;
  return step < 0 && chosen > at.time ? index : Math.min(points.length - 1, Math.max(0, index + step));
}

/** What the slider says of a time for screen readers: `2026-11-26 06:18:27 UTC, position 3 of 6`. */
export function valueText(time: number, index: number, n: number): string {
  return `${fmtSecond(time)}, position ${index + 1} of ${n}`;
}

/** The details of position `index` of `n`, as terms and values. */
export function pointDetails(p: TrackPoint, index: number, n: number): [string, string][] {
  const details: [string, string][] = [
    ['Position', `${index + 1} of ${n}`],
    ['Reported at', fmtSecond(p.time)],
    ['Latitude, longitude', `${p.lat.toFixed(5)}, ${p.lon.toFixed(5)}`],
  ];
  if (p.speedKmh !== undefined) details.push(['Speed', `${Math.round(p.speedKmh * 10) / 10} km/h`]);
  if (p.heading !== undefined) details.push(['Heading', `${Math.round(p.heading)}°`]);
  return details;
}

/** The query of a track request for the period typed (`datetime-local` values, local time; '' for none). */
export function trackQuery(from: string, to: string): URLSearchParams {
  const q = new URLSearchParams({ format: 'geojson' });
  if (from !== '') q.set('from', new Date(from).toISOString());
  if (to !== '') q.set('to', new Date(to).toISOString());
  return q;
}

/** A stop of the vehicle's activity (GET /api/v5/vehicles/{id}/activity), as the map shows it. */
export interface TrackStop {
  start: number;
  end: number;
  lat: number;
  lon: number;
  /** The location whose geofence holds it. */
  location?: string;
}

/** The stops of an activity answer; items that are not a timed position are left out. */
export function stopsOf(answer: unknown): TrackStop[] {
  const stops = (answer as { stops?: unknown } | null)?.stops;
  if (!Array.isArray(stops)) return [];
  const out: TrackStop[] = [];
  for (const s of stops as Record<string, unknown>[]) {
    const start = typeof s.start === 'string' ? Date.parse(s.start) : NaN;
    const end = typeof s.end === 'string' ? Date.parse(s.end) : NaN;
    if (Number.isNaN(start) || Number.isNaN(end) || typeof s.lat !== 'number' || typeof s.lon !== 'number') continue;
    const location = (s.location as { uuid?: unknown } | undefined)?.uuid;
    out.push({ start, end, lat: s.lat, lon: s.lon, ...(typeof location === 'string' ? { location } : {}) });
  }
  return out;
}

/** The query of the activity over a track's positions: from the first to just after the last. */
export function activityQuery(points: readonly TrackPoint[]): URLSearchParams | undefined {
  const first = points[0];
  const last = points[points.length - 1];
  if (first === undefined || last === undefined || points.length < 2) return undefined;
  return new URLSearchParams({ from: new Date(first.time).toISOString(), to: new Date(last.time + 1).toISOString() });
}

/** A stop's tooltip: `Stop 06:30–07:00 UTC (30 min)`, and its location's id when it has one. */
export function stopLabel(s: TrackStop): string {
  const minutes = Math.round((s.end - s.start) / 60_000);
  const span = `${fmtSecond(s.start).slice(11, 16)}–${fmtSecond(s.end).slice(11, 16)} UTC`;
  return `Stop ${span} (${minutes} min)${s.location === undefined ? '' : ` at location ${s.location}`}`;
}
