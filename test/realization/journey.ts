/**
 * A replayed day of one vehicle with known ground truth, for the realization tests: stops at a
 * depot and three trip locations (A, B, C), a drive-by of a fourth location (D) on the way from A
 * to B, and a two-minute halt in traffic. Positions every `stepS` seconds, with GPS jitter of
 * ±`jitterM` metres (deterministic: a seeded generator). Driving is in straight lines at
 * `kmh`, so the true distance is the sum of the legs' great-circle lengths.
 */
import { greatCircleM } from '@otm/core';

const M_PER_DEG = 111_195;
const LAT0 = 52.09;
const LON0 = 5.12;
const COS = Math.cos((LAT0 * Math.PI) / 180);

/** A point `north` and `east` kilometres from the depot. */
export const place = (northKm: number, eastKm: number) => ({
  lat: LAT0 + (northKm * 1000) / M_PER_DEG,
  lon: LON0 + (eastKm * 1000) / (M_PER_DEG * COS),
});

export const PLACES = {
  depot: place(0, 0),
  A: place(6, 8),
  D: place(9, 14), // on the straight line from A to B: a drive-by
  B: place(12, 20),
  halt: place(12, 14), // the traffic halt, between B and C
  C: place(12, 8),
} as const;

export interface TruthStop {
  readonly place: keyof typeof PLACES;
  readonly start: number;
  readonly end: number;
}

export interface Journey {
  readonly fixes: readonly { time: number; lat: number; lon: number; speedKmh: number }[];
  readonly stops: readonly TruthStop[];
  /** Metres driven, the legs' great-circle lengths. */
  readonly distanceM: number;
  readonly from: number;
  readonly to: number;
}

export function journey(opts: { start: number; stepS?: number; jitterM?: number; kmh?: number; seed?: number }): Journey {
  const stepMs = (opts.stepS ?? 30) * 1000;
  const jitterM = opts.jitterM ?? 15;
  const mps = (opts.kmh ?? 60) / 3.6;
  let seed = opts.seed ?? 42;
  const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
  const jitter = (p: { lat: number; lon: number }, m: number) => ({
    lat: p.lat + (rnd() * m) / M_PER_DEG,
    lon: p.lon + (rnd() * m) / (M_PER_DEG * COS),
  });

  // The plan: where the vehicle is at each moment, as a list of segments.
  type Seg = { kind: 'park'; at: keyof typeof PLACES; ms: number } | { kind: 'drive'; to: keyof typeof PLACES };
  const plan: Seg[] = [
    { kind: 'park', at: 'depot', ms: 20 * 60_000 },
    { kind: 'drive', to: 'A' },
    { kind: 'park', at: 'A', ms: 30 * 60_000 },
    { kind: 'drive', to: 'D' },
    { kind: 'drive', to: 'B' },
    { kind: 'park', at: 'B', ms: 45 * 60_000 },
    { kind: 'drive', to: 'halt' },
    { kind: 'park', at: 'halt', ms: 2 * 60_000 },
    { kind: 'drive', to: 'C' },
    { kind: 'park', at: 'C', ms: 20 * 60_000 },
    { kind: 'drive', to: 'depot' },
  ];
  // Position as a function of time, piecewise.
  type Piece = { t0: number; t1: number; a: { lat: number; lon: number }; b: { lat: number; lon: number }; parked: boolean };
  const pieces: Piece[] = [];
  const stops: TruthStop[] = [];
  let t = opts.start;
  let here: keyof typeof PLACES = 'depot';
  let distanceM = 0;
  for (const seg of plan) {
    if (seg.kind === 'park') {
      pieces.push({ t0: t, t1: t + seg.ms, a: PLACES[seg.at], b: PLACES[seg.at], parked: true });
      if (seg.ms >= 5 * 60_000) stops.push({ place: seg.at, start: t, end: t + seg.ms });
      t += seg.ms;
    } else {
      const d = greatCircleM(PLACES[here].lat, PLACES[here].lon, PLACES[seg.to].lat, PLACES[seg.to].lon);
      const ms = Math.round((d / mps) * 1000);
      pieces.push({ t0: t, t1: t + ms, a: PLACES[here], b: PLACES[seg.to], parked: false });
      distanceM += d;
      t += ms;
      here = seg.to;
    }
  }
  const fixes: Journey['fixes'][number][] = [];
  for (let at = opts.start; at <= t; at += stepMs) {
    const p = pieces.find((x) => at >= x.t0 && at < x.t1) ?? pieces.at(-1)!;
    const f = p.t1 === p.t0 ? 1 : Math.min(1, (at - p.t0) / (p.t1 - p.t0));
    const pos = { lat: p.a.lat + (p.b.lat - p.a.lat) * f, lon: p.a.lon + (p.b.lon - p.a.lon) * f };
    fixes.push({ time: at, ...jitter(pos, p.parked ? jitterM : jitterM / 3), speedKmh: p.parked ? 0 : (opts.kmh ?? 60) });
  }
  return { fixes, stops, distanceM, from: opts.start, to: t + stepMs };
}

/** The journey's fixes as OTM location events of `vehicle`, ids from `idOf(i)`. */
export function locationEvents(j: Journey, vehicle: string, idOf: (i: number) => string): Record<string, unknown>[] {
  return j.fixes.map((f, i) => ({
    id: idOf(i),
    eventType: 'locationUpdateEvent',
    lifecycle: 'actual',
    creationDate: new Date(f.time).toISOString(),
    vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicle },
    geoReference: { type: 'latLonPointGeoReference', lat: f.lat, lon: f.lon, speed: { value: f.speedKmh, unit: 'km/h' } },
  }));
}
