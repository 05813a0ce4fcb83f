import { describe, expect, it } from 'vitest';
import { Geofences, geofenceOf, inFence } from '../../src/realization/geofences.js';
import { greatCircleM, nearM } from '../../src/realization/geo.js';

const M_PER_DEG = 111_195;
const COS52 = Math.cos((52 * Math.PI) / 180);
/** A point `north` and `east` metres from (52, 5). */
const at = (north: number, east: number) => ({ lat: 52 + north / M_PER_DEG, lon: 5 + east / (M_PER_DEG * COS52) });

const point = (lat: number, lon: number, extra: Record<string, unknown> = {}) => ({
  name: 'depot',
  geoReference: { type: 'latLonPointGeoReference', lat, lon },
  ...extra,
});

describe('geofences of OTM locations', () => {
  it('makes a point a circle of the default radius, or of the location own geofenceRadius', () => {
    const c = at(0, 0);
    const fence = geofenceOf('a', point(c.lat, c.lon), 150)!;
    expect(fence).toMatchObject({ shape: 'circle', radiusM: 150 });
    expect(inFence(fence, at(140, 0).lat, at(140, 0).lon)).toBe(true);
    expect(inFence(fence, at(160, 0).lat, at(160, 0).lon)).toBe(false);
    // Outside by 10 m: inside a band of 50 m (the hysteresis), not of 5.
    expect(inFence(fence, at(160, 0).lat, at(160, 0).lon, 50)).toBe(true);
    expect(inFence(fence, at(160, 0).lat, at(160, 0).lon, 5)).toBe(false);
    const own = geofenceOf('b', point(c.lat, c.lon, { externalAttributes: { geofenceRadius: 400 } }), 150)!;
    expect(own).toMatchObject({ radiusM: 400 });
    expect(geofenceOf('c', point(c.lat, c.lon, { externalAttributes: { geofenceRadius: 'big' } }), 150)).toMatchObject({ radiusM: 150 });
  });

  it('makes a latLonArrayGeoReference and a GeoJSON polygon (with a hole) polygons', () => {
    const square = [at(-100, -100), at(-100, 100), at(100, 100), at(100, -100)];
    const array = geofenceOf('a', { geoReference: { type: 'latLonArrayGeoReference', points: square } }, 150)!;
    expect(array.shape).toBe('polygon');
    expect(inFence(array, at(90, 90).lat, at(90, 90).lon)).toBe(true);
    expect(inFence(array, at(120, 0).lat, at(120, 0).lon)).toBe(false);
    expect(inFence(array, at(120, 0).lat, at(120, 0).lon, 30)).toBe(true);

    const ring = (half: number) =>
      [at(-half, -half), at(-half, half), at(half, half), at(half, -half), at(-half, -half)].map((p) => [p.lon, p.lat]);
    const feature = geofenceOf(
      'b',
      { geoReference: { type: 'Feature', geometry: { type: 'Polygon', coordinates: [ring(200), ring(50)] } } },
      150,
    )!;
    expect(inFence(feature, at(100, 100).lat, at(100, 100).lon)).toBe(true);
    expect(inFence(feature, at(0, 0).lat, at(0, 0).lon)).toBe(false);
    const multi = geofenceOf(
      'c',
      { geoReference: { type: 'Feature', geometry: { type: 'MultiPolygon', coordinates: [[ring(50)]] } } },
      150,
    )!;
    expect(inFence(multi, at(10, 10).lat, at(10, 10).lon)).toBe(true);
  });

  it('has no fence for an address, a line, or points out of range', () => {
    expect(geofenceOf('a', { geoReference: { type: 'addressGeoReference', city: 'Utrecht' } }, 150)).toBeUndefined();
    expect(
      geofenceOf(
        'a',
        {
          geoReference: {
            type: 'Feature',
            geometry: {
              type: 'LineString',
              coordinates: [
                [5, 52],
                [5.1, 52],
              ],
            },
          },
        },
        150,
      ),
    ).toBeUndefined();
    expect(geofenceOf('a', point(95, 5), 150)).toBeUndefined();
    expect(geofenceOf('a', { geoReference: { type: 'latLonArrayGeoReference', points: [at(0, 0), at(1, 1)] } }, 150)).toBeUndefined();
    expect(geofenceOf('a', {}, 150)).toBeUndefined();
  });

  it('finds the smallest fence that holds a point', () => {
    const c = at(0, 0);
    const fences = new Geofences([
      geofenceOf('site', point(c.lat, c.lon, { externalAttributes: { geofenceRadius: 2000 } }), 150)!,
      geofenceOf('gate', point(c.lat, c.lon), 150)!,
    ]);
    expect(fences.find(c.lat, c.lon)?.location).toBe('gate');
    expect(fences.find(at(1000, 0).lat, at(1000, 0).lon)?.location).toBe('site');
    expect(fences.find(at(3000, 0).lat, at(3000, 0).lon)).toBeUndefined();
  });

  it('measures short distances flat within 0.1 % of the great circle', () => {
    for (const [n, e] of [
      [100, 0],
      [0, 100],
      [700, -700],
      [-3000, 2000],
    ] as const) {
      const p = at(n, e);
      const c = at(0, 0);
      const gc = greatCircleM(c.lat, c.lon, p.lat, p.lon);
      expect(Math.abs(nearM(c.lat, c.lon, p.lat, p.lon) - gc) / gc).toBeLessThan(0.001);
      expect(gc).toBeCloseTo(Math.hypot(n, e), -1);
    }
  });
});
