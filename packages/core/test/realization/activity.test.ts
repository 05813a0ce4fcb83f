import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { activityOf, contextOf, type Fix } from '../../src/realization/activity.js';
import { greatCircleM } from '../../src/realization/geo.js';

const SETTINGS = { radiusM: 100, minSeconds: 300 };
const T0 = Date.parse('2026-03-02T06:00:00Z');
const MIN = 60_000;
/** Metres in one degree of latitude. */
const M_PER_DEG = 111_195;

/** A point `east` and `north` metres from (52, 5). */
const at = (north: number, east: number): { lat: number; lon: number } => ({
  lat: 52 + north / M_PER_DEG,
  lon: 5 + east / (M_PER_DEG * Math.cos((52 * Math.PI) / 180)),
});

const fix = (ms: number, north: number, east: number, speedKmh: number | null = null): Fix => ({
  time: T0 + ms,
  ...at(north, east),
  speedKmh,
});

/** Fixes every `stepMs` from `startMs`, `count` of them, each `stepM` further east from `east0`. */
function line(startMs: number, count: number, stepMs: number, east0: number, stepM: number): Fix[] {
  return Array.from({ length: count }, (_, i) => fix(startMs + i * stepMs, 0, east0 + i * stepM));
}

/** Fixes within `jitterM` of (0, east), every `stepMs` for `count`. */
function parked(startMs: number, count: number, stepMs: number, east: number, jitterM: number, seed = 1): Fix[] {
  let s = seed;
  const rnd = () => ((s = (s * 16807) % 2147483647) / 2147483647) * 2 - 1;
  return Array.from({ length: count }, (_, i) => fix(startMs + i * stepMs, rnd() * jitterM, east + rnd() * jitterM));
}

describe('activityOf', () => {
  it('finds a stop of ten minutes between two drives, and not the jitter inside it as distance', () => {
    const fixes = [
      ...line(0, 10, MIN, 0, 1000), // 10 km in 9 minutes, last fix at 9,000 m
      ...parked(10 * MIN, 10, MIN, 9000, 30), // 10 minutes at 9,000 m, ±30 m
      ...line(20 * MIN, 10, MIN, 10_000, 1000),
    ];
    const a = activityOf(fixes, T0, T0 + 30 * MIN, SETTINGS);
    expect(a.stops).toHaveLength(1);
    const stop = a.stops[0]!;
    // The stop runs from the last fix of the first drive (it is within 100 m of the first parked fix? no: 0-30 m away) ...
    expect(stop.start).toBeGreaterThanOrEqual(T0 + 9 * MIN);
    expect(stop.start).toBeLessThanOrEqual(T0 + 10 * MIN);
    expect(stop.end).toBeGreaterThanOrEqual(T0 + 19 * MIN);
    expect(greatCircleM(stop.lat, stop.lon, at(0, 9000).lat, at(0, 9000).lon)).toBeLessThan(30);
    expect(a.drives).toHaveLength(2);
    // 9 km, then 1 km to the second drive's start and 9 km more: 19 km, none of the jitter.
    expect(a.distanceM).toBeGreaterThan(18_900);
    expect(a.distanceM).toBeLessThan(19_100);
    expect(a.movingSeconds + a.stoppedSeconds).toBeCloseTo(29 * 60, 6);
  });

  it('makes no stop of a two-minute halt in traffic', () => {
    const fixes = [...line(0, 10, MIN, 0, 1000), ...parked(10 * MIN, 3, MIN, 9000, 10), ...line(13 * MIN, 10, MIN, 10_000, 1000)];
    const a = activityOf(fixes, T0, T0 + 30 * MIN, SETTINGS);
    expect(a.stops).toEqual([]);
    expect(a.drives).toHaveLength(1);
    expect(a.stoppedSeconds).toBe(0);
  });

  it('takes a gap at the same place for a stop, and a gap elsewhere for driving', () => {
    const sleptParked = [fix(0, 0, 0), fix(5 * MIN, 0, 200), fix(2 * 60 * MIN, 10, 210), fix(2 * 60 * MIN + MIN, 0, 1200)];
    const a = activityOf(sleptParked, T0, T0 + 3 * 60 * MIN, SETTINGS);
    expect(a.stops).toHaveLength(1);
    expect(a.stops[0]!.start).toBe(T0 + 5 * MIN);
    expect(a.stops[0]!.end).toBe(T0 + 120 * MIN);

    const sleptDriving = [fix(0, 0, 0), fix(60 * MIN, 0, 50_000)];
    const b = activityOf(sleptDriving, T0, T0 + 2 * 60 * MIN, SETTINGS);
    expect(b.stops).toEqual([]);
    expect(b.movingSeconds).toBe(3600);
    expect(b.distanceM).toBeCloseTo(50_000, -1);
  });

  it('does not end a stop at the edge of its radius while the jitter stays inside it', () => {
    // Parked an hour with ±45 m of jitter: every fix within 100 m of every other (at most 90 m apart).
    const a = activityOf(parked(0, 60, MIN, 0, 45, 7), T0, T0 + 60 * MIN, SETTINGS);
    expect(a.stops).toHaveLength(1);
    expect(a.drives).toEqual([]);
    expect(a.distanceM).toBe(0);
  });

  it('reports the highest speed a fix in the window gave, else the highest between fixes', () => {
    const reported = [fix(0, 0, 0, 50), fix(MIN, 0, 1000, 80), fix(2 * MIN, 0, 2000, 120)];
    expect(activityOf(reported, T0, T0 + 2 * MIN, SETTINGS).maxSpeedKmh).toBe(80);
    const derived = line(0, 3, MIN, 0, 1000);
    expect(activityOf(derived, T0, T0 + 3 * MIN, SETTINGS).maxSpeedKmh).toBeCloseTo(60, 1);
    expect(activityOf([], T0, T0 + MIN, SETTINGS).maxSpeedKmh).toBeNull();
  });

  it('clips stops and drives to the window', () => {
    const fixes = [...line(0, 10, MIN, 0, 1000), ...parked(10 * MIN, 20, MIN, 9000, 20)];
    const a = activityOf(fixes, T0 + 5 * MIN, T0 + 15 * MIN, SETTINGS);
    expect(a.drives[0]!.start).toBe(T0 + 5 * MIN);
    expect(a.stops[0]!.end).toBe(T0 + 15 * MIN);
    expect(a.movingSeconds + a.stoppedSeconds).toBeCloseTo(600, 6);
  });

  /** A random day of driving and parking, at a random rate. */
  const journeys = fc
    .record({
      seed: fc.integer({ min: 1, max: 2 ** 30 }),
      stepS: fc.constantFrom(1, 5, 30, 60),
      legs: fc.array(
        fc.record({
          parkedS: fc.integer({ min: 0, max: 1800 }),
          driveS: fc.integer({ min: 0, max: 1800 }),
          kmh: fc.integer({ min: 0, max: 110 }),
        }),
        { minLength: 1, maxLength: 6 },
      ),
      gapAt: fc.option(fc.integer({ min: 0, max: 1000 }), { nil: undefined }),
    })
    .map(({ seed, stepS, legs, gapAt }) => {
      const fixes: Fix[] = [];
      let t = 0;
      let east = 0;
      let s = seed;
      const rnd = () => ((s = (s * 16807) % 2147483647) / 2147483647) * 2 - 1;
      for (const leg of legs) {
        for (let e = 0; e < leg.parkedS; e += stepS, t += stepS * 1000) fixes.push(fix(t, rnd() * 25, east + rnd() * 25));
        for (let e = 0; e < leg.driveS; e += stepS, t += stepS * 1000) {
          east += (leg.kmh / 3.6) * stepS;
          fixes.push(fix(t, rnd() * 5, east));
        }
      }
      if (gapAt !== undefined && fixes.length > 2) {
        // The device asleep for a while: the fixes after it come an hour later.
        const i = gapAt % fixes.length;
        for (let j = i; j < fixes.length; j++) fixes[j] = { ...fixes[j]!, time: fixes[j]!.time + 3_600_000 };
      }
      return fixes;
    });

  /** The activity of [from, to) computed as the service does: only the fixes of its context. */
  function windowed(all: readonly Fix[], from: number, to: number) {
    const before = all.filter((f) => f.time <= from).at(-1);
    const ctx = contextOf(from, to, SETTINGS, before?.time);
    const inCtx = all.filter((f) => f.time >= ctx.from && f.time < ctx.to);
    const after = all.find((f) => f.time >= ctx.to);
    return activityOf(after ? [...inCtx, after] : inCtx, from, to, SETTINGS);
  }

  it('gives over [a, c) the distance and seconds of [a, b) plus [b, c), for any b (property)', () => {
    fc.assert(
      fc.property(journeys, fc.uniqueArray(fc.integer({ min: 0, max: 1_000_000 }), { minLength: 3, maxLength: 3 }), (fixes, cuts) => {
        // Three times from 10 minutes before the first fix to 10 minutes after the last, in order.
        const end = (fixes.at(-1)?.time ?? T0) + 600_000;
        const [p, q, r] = cuts.sort((m, n) => m - n).map((v) => Math.round(T0 - 600_000 + (v / 1_000_000) * (end - T0 + 600_000)));
        if (!(p! < q! && q! < r!)) return;
        const whole = windowed(fixes, p!, r!);
        const left = windowed(fixes, p!, q!);
        const right = windowed(fixes, q!, r!);
        expect(left.distanceM + right.distanceM).toBeCloseTo(whole.distanceM, 6);
        expect(left.movingSeconds + right.movingSeconds).toBeCloseTo(whole.movingSeconds, 6);
        expect(left.stoppedSeconds + right.stoppedSeconds).toBeCloseTo(whole.stoppedSeconds, 6);
        // And the context gives what the whole track gives.
        const full = activityOf(fixes, p!, r!, SETTINGS);
        expect(whole.distanceM).toBeCloseTo(full.distanceM, 6);
        expect(whole.stoppedSeconds).toBeCloseTo(full.stoppedSeconds, 6);
      }),
      { numRuns: 100 },
    );
  });
});
