import { describe, expect, it } from 'vitest';
import { FenceTracker, type Crossing, type KeyedFix } from '../../src/realization/fence-tracker.js';
import { Geofences, geofenceOf } from '../../src/realization/geofences.js';

const M_PER_DEG = 111_195;
const COS52 = Math.cos((52 * Math.PI) / 180);
const T0 = Date.parse('2026-06-02T08:00:00Z');
/** A point `north` and `east` metres from (52, 5). */
const at = (north: number, east: number) => ({ lat: 52 + north / M_PER_DEG, lon: 5 + east / (M_PER_DEG * COS52) });
const SETTINGS = { dwellSeconds: 60, hysteresisM: 50 };

const circle = (key: string, north: number, east: number, radius = 150) =>
  geofenceOf(
    key,
    { geoReference: { type: 'latLonPointGeoReference', ...at(north, east) }, externalAttributes: { geofenceRadius: radius } },
    150,
  )!;

let n = 0;
const fix = (sec: number, north: number, east: number): KeyedFix => ({ time: T0 + sec * 1000, ...at(north, east), key: `e${n++}` });

/** Feeds the fixes; every crossing, in order. */
function run(fixes: KeyedFix[], fences: Geofences, tracker = new FenceTracker(SETTINGS)): Crossing[] {
  return fixes.flatMap((f) => tracker.next(f, fences));
}

/** Fixes every `stepS` from `fromS` for `forS` seconds, moving from (n0, e0) to (n1, e1). */
function drive(fromS: number, forS: number, stepS: number, [n0, e0]: [number, number], [n1, e1]: [number, number]): KeyedFix[] {
  const out: KeyedFix[] = [];
  for (let s = 0; s <= forS; s += stepS) {
    const f = forS === 0 ? 1 : s / forS;
    out.push(fix(fromS + s, n0 + (n1 - n0) * f, e0 + (e1 - e0) * f));
  }
  return out;
}

describe('entering and leaving geofences', () => {
  it('enters at the first fix inside once it stayed a dwell, and leaves at the last fix inside once out for a dwell', () => {
    const fences = new Geofences([circle('depot', 0, 0)]);
    const arrive = drive(0, 120, 10, [0, -1000], [0, 0]); // 1 km in 2 minutes, into the centre
    const stay = drive(130, 600, 10, [0, 0], [0, 0]);
    const leave = drive(740, 120, 10, [0, 0], [0, 1000]);
    const crossings = run([...arrive, ...stay, ...leave], fences);
    expect(crossings.map((c) => c.kind)).toEqual(['enter', 'exit']);
    const firstInside = arrive.find((f) => Math.abs((f.lon - 5) * M_PER_DEG * COS52) <= 150)!;
    expect(crossings[0]).toMatchObject({ location: 'depot', time: firstInside.time });
    const lastInside = leave.filter((f) => Math.abs((f.lon - 5) * M_PER_DEG * COS52) <= 150).at(-1)!;
    expect(crossings[1]).toMatchObject({ location: 'depot', time: lastInside.time });
    expect(crossings[1]!.fixes).toContain(lastInside.key);
    expect(new Set(crossings[0]!.fixes).size).toBe(crossings[0]!.fixes.length);
  });

  it('enters nothing on a drive-by shorter than the dwell', () => {
    const fences = new Geofences([circle('shop', 0, 0)]);
    // 50 km/h through a 300 m wide fence: about 22 s inside.
    expect(run(drive(0, 144, 5, [0, -1000], [0, 1000]), fences)).toEqual([]);
  });

  it('makes no enter and exit pairs for a vehicle parked at the edge with 50 m of jitter', () => {
    const fences = new Geofences([circle('gate', 0, 0)]);
    let seed = 3;
    const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
    const fixes: KeyedFix[] = [];
    for (let s = 0; s < 4 * 3600; s += 10) {
      // Within 50 m of a point on the fence's edge (150 m from the centre).
      const r = 50 * Math.sqrt(rnd());
      const a = 2 * Math.PI * rnd();
      fixes.push(fix(s, 150 + r * Math.cos(a), r * Math.sin(a)));
    }
    const crossings = run(fixes, fences);
    expect(crossings.filter((c) => c.kind === 'exit')).toEqual([]);
    expect(crossings.filter((c) => c.kind === 'enter').length).toBeLessThanOrEqual(1);
    // With a short dwell the jitter would flap without the band (the control), and does not with it.
    const short = { dwellSeconds: 20, hysteresisM: 0 };
    expect(run(fixes, fences, new FenceTracker(short)).filter((c) => c.kind === 'exit').length).toBeGreaterThan(5);
    expect(run(fixes, fences, new FenceTracker({ ...short, hysteresisM: 50 })).filter((c) => c.kind === 'exit')).toEqual([]);
  });

  it('comes back inside the band without leaving, and leaves a polygon too', () => {
    const square = [at(-100, -100), at(-100, 100), at(100, 100), at(100, -100)];
    const fences = new Geofences([geofenceOf('yard', { geoReference: { type: 'latLonArrayGeoReference', points: square } }, 150)!]);
    const fixes = [
      ...drive(0, 120, 10, [0, 0], [0, 0]),
      // Out by 80 m for 30 s (shorter than the dwell), then back.
      ...drive(130, 30, 10, [180, 0], [180, 0]),
      ...drive(170, 60, 10, [0, 0], [0, 0]),
      // Out for good.
      ...drive(240, 120, 10, [500, 0], [500, 0]),
    ];
    const crossings = run(fixes, fences);
    expect(crossings.map((c) => `${c.kind} ${(c.time - T0) / 1000}`)).toEqual(['enter 0', 'exit 230']);
  });

  it('follows overlapping fences each on its own, forgets a fence that is gone, and ignores an older fix', () => {
    const both = new Geofences([circle('site', 0, 0, 2000), circle('dock', 0, 0)]);
    const tracker = new FenceTracker(SETTINGS);
    const entered = run(drive(0, 120, 10, [0, 0], [0, 0]), both, tracker);
    expect(entered.map((c) => c.location).sort()).toEqual(['dock', 'site']);
    expect(tracker.inside().sort()).toEqual(['dock', 'site']);
    expect(tracker.next(fix(5, 5000, 5000), both)).toEqual([]);
    // The dock's location lost its fence: the vehicle leaves only the site, and no exit is made up for the dock.
    const siteOnly = new Geofences([circle('site', 0, 0, 2000)]);
    const left = run(drive(130, 120, 10, [5000, 0], [5000, 0]), siteOnly, tracker);
    expect(left.map((c) => `${c.kind} ${c.location}`)).toEqual(['exit site']);
    expect(tracker.inside()).toEqual([]);
  });
});
