import { describe, expect, it } from 'vitest';
import type { FeatureCollection } from 'geojson';
import {
  ARROW_STEPS,
  activityQuery,
  indexAt,
  pointDetails,
  pointsOf,
  stepTarget,
  stopLabel,
  stopsOf,
  trackQuery,
  valueText,
} from '../src/fleet/track-points.js';

const t0 = Date.UTC(2026, 10, 26, 6, 0, 0);
const point = (s: number, props: Record<string, unknown> = {}) => ({
  type: 'Feature' as const,
  geometry: { type: 'Point' as const, coordinates: [5 + s / 1000, 52] },
  properties: { time: new Date(t0 + s * 1000).toISOString(), ...props },
});

describe('pointsOf', () => {
  it("reads a track answer's timed points, with speed and heading when given", () => {
    const fc: FeatureCollection = {
      type: 'FeatureCollection',
      features: [
        {
          type: 'Feature',
          geometry: {
            type: 'LineString',
            coordinates: [
              [5, 52],
              [5.1, 52],
            ],
          },
          properties: {},
        },
        point(0, { speedKmh: 42.25, heading: 90 }),
        point(10, { time: 'not a time' }),
        point(20),
      ],
    };
    expect(pointsOf(fc)).toEqual([
      { time: t0, lat: 52, lon: 5, speedKmh: 42.25, heading: 90 },
      { time: t0 + 20_000, lat: 52, lon: 5.02 },
    ]);
  });
});

describe('the time slider', () => {
  const points = [0, 10, 30, 60].map((s) => ({ time: t0 + s * 1000, lat: 52, lon: 5 }));

  it('shows the last position at or before a time, the first before all', () => {
    expect(indexAt(points, t0 - 1)).toBe(0);
    expect(indexAt(points, t0)).toBe(0);
    expect(indexAt(points, t0 + 29_999)).toBe(1);
    expect(indexAt(points, t0 + 30_000)).toBe(2);
    expect(indexAt(points, t0 + 3_600_000)).toBe(3);
    expect(indexAt([], t0)).toBe(0);
  });

  it('steps from position to position with the arrows, within the track; back from between two goes to the one shown', () => {
    const right = ARROW_STEPS.get('ArrowRight')!;
    const left = ARROW_STEPS.get('ArrowLeft')!;
    expect([ARROW_STEPS.get('ArrowUp'), ARROW_STEPS.get('ArrowDown'), ARROW_STEPS.get('PageUp')]).toEqual([1, -1, undefined]);
    expect(stepTarget(points, 1, points[1]!.time, right)).toBe(2);
    expect(stepTarget(points, 1, points[1]!.time, left)).toBe(0);
    expect(stepTarget(points, 3, points[3]!.time, right)).toBe(3);
    expect(stepTarget(points, 0, points[0]!.time, left)).toBe(0);
    // The slider dragged to 20 s shows position 1 (10 s): Left goes back to it, Right on to 30 s.
    expect(stepTarget(points, 1, t0 + 20_000, left)).toBe(1);
    expect(stepTarget(points, 1, t0 + 20_000, right)).toBe(2);
  });

  it('says the time and the position, and the details of a position', () => {
    expect(valueText(t0 + 1000, 2, 6)).toBe('2026-11-26 06:00:01 UTC, position 3 of 6');
    expect(pointDetails({ time: t0, lat: 52.1234567, lon: -5.5 }, 0, 1)).toEqual([
      ['Position', '1 of 1'],
      ['Reported at', '2026-11-26 06:00:00 UTC'],
      ['Latitude, longitude', '52.12346, -5.50000'],
    ]);
    expect(pointDetails({ time: t0, lat: 0, lon: 0, speedKmh: 42.25, heading: 359.6 }, 4, 6).slice(3)).toEqual([
      ['Speed', '42.3 km/h'],
      ['Heading', '360°'],
    ]);
  });

  it('asks the track of the period typed, in GeoJSON', () => {
    expect(trackQuery('', '').toString()).toBe('format=geojson');
    const q = trackQuery('2026-11-26T06:00', '2026-11-26T07:30');
    expect(q.get('from')).toBe(new Date('2026-11-26T06:00').toISOString());
    expect(q.get('to')).toBe(new Date('2026-11-26T07:30').toISOString());
  });
});

describe('stops on the track', () => {
  it('reads the stops of an activity answer, leaving out what is no timed position', () => {
    const answer = {
      stops: [
        {
          start: '2026-11-26T06:30:00.000Z',
          end: '2026-11-26T07:00:00.000Z',
          lat: 52.1,
          lon: 5.2,
          location: { associationType: 'reference', entityType: 'location', uuid: 'L1' },
        },
        { start: '2026-11-26T08:00:00.000Z', end: '2026-11-26T08:06:00.000Z', lat: 52.2, lon: 5.3 },
        { start: 'soon', end: '2026-11-26T08:06:00.000Z', lat: 52.2, lon: 5.3 },
        { start: '2026-11-26T08:00:00.000Z', end: '2026-11-26T08:06:00.000Z', lat: '52.2', lon: 5.3 },
      ],
    };
    const stops = stopsOf(answer);
    expect(stops).toEqual([
      { start: Date.parse('2026-11-26T06:30:00Z'), end: Date.parse('2026-11-26T07:00:00Z'), lat: 52.1, lon: 5.2, location: 'L1' },
      { start: Date.parse('2026-11-26T08:00:00Z'), end: Date.parse('2026-11-26T08:06:00Z'), lat: 52.2, lon: 5.3 },
    ]);
    expect(stopsOf(null)).toEqual([]);
    expect(stopsOf({ stops: 'none' })).toEqual([]);
    expect(stopLabel(stops[0]!)).toBe('Stop 06:30–07:00 UTC (30 min) at location L1');
    expect(stopLabel(stops[1]!)).toBe('Stop 08:00–08:06 UTC (6 min)');
  });

  it('asks for the activity from the first position to just after the last', () => {
    const points = [0, 60, 120].map((s) => ({ time: t0 + s * 1000, lat: 52, lon: 5 }));
    expect(Object.fromEntries(activityQuery(points)!)).toEqual({
      from: new Date(t0).toISOString(),
      to: new Date(t0 + 120_001).toISOString(),
    });
    expect(activityQuery(points.slice(0, 1))).toBeUndefined();
  });
});
