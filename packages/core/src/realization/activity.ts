/**
 * A vehicle's activity in a time window: its stops and drives, how far it drove and how long it
 * moved and stood, from its location events alone (docs/realization.md says it for users).
 *
 * **A stop** is the vehicle staying within `radiusM` of a fix for at least `minSeconds`. A fix i
 * *dwells* when every fix from it up to and including the first one at least `minSeconds` later
 * lies within `radiusM` of it; the steps from i to that later fix are then stopped, and a stop is
 * a run of consecutive stopped steps. A halt shorter than `minSeconds` (traffic) makes no stop;
 * a fix after a gap of any length counts when it is still within the radius (a device asleep
 * while parked), not when it is elsewhere (one asleep while driving: that time is moving).
 *
 * **Window invariance.** Whether a step is stopped depends only on the fixes up to `minSeconds`
 * before it and up to the first one `minSeconds` after it (the caller reads that context around
 * the window: `contextOf`), never on where the window starts. Each step between two fixes counts towards the
 * window in proportion to the part of its time inside `[from, to)`: its distance (zero inside a
 * stop, so that GPS jitter while parked is not driven distance) and its seconds, as moving or
 * stopped. So distance and seconds over `[a, c)` are those over `[a, b)` plus `[b, c)` for any `b`,
 * and a day's report adds up to the week's. Stops and drives are clipped to the window the same
 * way: one that began before `from` is reported from `from`.
 */
import { greatCircleM, nearM } from './geo.js';

/** One position of the vehicle, in event time order (then key). */
export interface Fix {
  /** Event time, ms since the epoch. */
  readonly time: number;
  readonly lat: number;
  readonly lon: number;
  /** The speed the device reported, km/h. */
  readonly speedKmh: number | null;
}

export interface ActivitySettings {
  /** OTM_STOP_RADIUS_M */
  readonly radiusM: number;
  /** OTM_STOP_MIN_SECONDS */
  readonly minSeconds: number;
}

export interface Stop {
  /** Clipped to the window, ms. */
  readonly start: number;
  readonly end: number;
  /** The mean of the stop's fixes (all of them, inside the window or not). */
  readonly lat: number;
  readonly lon: number;
}

export interface Drive {
  readonly start: number;
  readonly end: number;
  /** Metres driven inside the window. */
  readonly distanceM: number;
}

export interface Activity {
  readonly distanceM: number;
  readonly movingSeconds: number;
  readonly stoppedSeconds: number;
  /** The highest speed reported by a fix in the window; else the highest between two fixes a second or more apart inside it; null without either. */
  readonly maxSpeedKmh: number | null;
  readonly stops: Stop[];
  readonly drives: Drive[];
}

/**
 * The time range of fixes `activityOf` needs for the window `[from, to)`, given the time of the
 * vehicle's last fix at or before `from` (undefined: none): read the fixes in `[from, to)` of the
 * result, and add the first fix at or after its end. Whether a step is stopped depends on the
 * fixes up to `minSeconds` before it and the first one `minSeconds` after it.
 */
export function contextOf(from: number, to: number, settings: ActivitySettings, lastAtOrBeforeFrom?: number): { from: number; to: number } {
  const ms = settings.minSeconds * 1000;
  return { from: Math.min(from, lastAtOrBeforeFrom ?? from) - ms, to: to + ms };
}

/**
 * The index of the first fix at least `minMs` after fix i when fix i dwells (every fix up to and
 * including that one within the radius), else -1.
 */
function dwellEnd(fixes: readonly Fix[], i: number, radiusM: number, minMs: number): number {
  const a = fixes[i]!;
  const until = a.time + minMs;
  for (let j = i + 1; j < fixes.length; j++) {
    const f = fixes[j]!;
    if (nearM(a.lat, a.lon, f.lat, f.lon) > radiusM) return -1;
    if (f.time >= until) return j;
  }
  return -1;
}

/** The part of [s, e] inside [from, to), ms. */
const overlap = (s: number, e: number, from: number, to: number): number => Math.max(0, Math.min(e, to) - Math.max(s, from));

/**
 * The activity in `[from, to)` from the vehicle's fixes in time order, read over `contextOf`'s
 * range and the first fix after it (fewer only where the vehicle has none).
 */
export function activityOf(fixes: readonly Fix[], from: number, to: number, settings: ActivitySettings): Activity {
  const n = fixes.length;
  const minMs = settings.minSeconds * 1000;
  // stopped[k]: the step from fix k to fix k + 1 is inside a stop.
  const stopped = new Uint8Array(Math.max(0, n - 1));
  let coveredTo = -1;
  for (let k = 0; k < n - 1; k++) {
    const end = dwellEnd(fixes, k, settings.radiusM, minMs);
    if (end > coveredTo) coveredTo = end;
    stopped[k] = k + 1 <= coveredTo ? 1 : 0;
  }

  let distanceM = 0;
  let movingMs = 0;
  let stoppedMs = 0;
  let maxReported = -Infinity;
  let maxDerived = -Infinity;
  const stops: Stop[] = [];
  const drives: Drive[] = [];
  for (const f of fixes) if (f.time >= from && f.time < to && f.speedKmh !== null && f.speedKmh > maxReported) maxReported = f.speedKmh;

  // Runs of steps of the same kind: fixes a..b.
  let a = 0;
  while (a < n - 1) {
    const kind = stopped[a]!;
    let b = a + 1;
    while (b < n - 1 && stopped[b] === kind) b++;
    const s = fixes[a]!.time;
    const e = fixes[b]!.time;
    const inside = overlap(s, e, from, to);
    if (kind === 1) {
      if (inside > 0) {
        let lat = 0;
        let lon = 0;
        for (let i = a; i <= b; i++) {
          lat += fixes[i]!.lat;
          lon += fixes[i]!.lon;
        }
        const count = b - a + 1;
        stops.push({ start: Math.max(s, from), end: Math.min(e, to), lat: lat / count, lon: lon / count });
        stoppedMs += inside;
      }
    } else {
      let driven = 0;
      let counted = false;
      for (let k = a; k < b; k++) {
        const p = fixes[k]!;
        const q = fixes[k + 1]!;
        const span = q.time - p.time;
        const d = greatCircleM(p.lat, p.lon, q.lat, q.lon);
        if (span === 0) {
          if (p.time >= from && p.time < to) {
            driven += d;
            counted = true;
          }
          continue;
        }
        const part = overlap(p.time, q.time, from, to);
        if (part === 0) continue;
        counted = true;
        driven += (d * part) / span;
        if (part === span && span >= 1000) maxDerived = Math.max(maxDerived, (d / span) * 3600);
      }
      if (counted) {
        drives.push({ start: Math.max(s, from), end: Math.min(e, to), distanceM: driven });
        distanceM += driven;
        movingMs += inside;
      }
    }
    a = b;
  }
  const maxSpeedKmh = maxReported > -Infinity ? maxReported : maxDerived > -Infinity ? maxDerived : null;
  return { distanceM, movingSeconds: movingMs / 1000, stoppedSeconds: stoppedMs / 1000, maxSpeedKmh, stops, drives };
}
