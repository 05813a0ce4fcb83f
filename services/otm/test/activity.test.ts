/**
 * A vehicle's activity over HTTP (`GET /api/v5/vehicles/{id}/activity`): a replayed day with known
 * ground truth (test/realization/journey.ts) gives its stops at the right locations within 60 s,
 * no stop for a drive-by or a traffic halt, the distance within 2 %, reports of adjacent windows
 * that add up, CSV, and the model's errors. Run against the embedded service here and against the
 * distributed deployment by test/distributed/activity.dist.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseCsv } from 'csv-parse/sync';
import { journey, locationEvents, PLACES } from '../../../test/realization/journey.js';
import { auth, json, startService, type TestService } from './helpers.js';

const uuid = (prefix: string, i: number) => `${prefix}-0000-4000-8000-${String(i).padStart(12, '0')}`;
const VEHICLE = uuid('a1000000', 1);
const LOCATIONS = { A: uuid('a2000000', 1), B: uuid('a2000000', 2), C: uuid('a2000000', 3), D: uuid('a2000000', 4) } as const;
const START = Date.parse('2026-06-02T06:00:00Z');
const DAY = journey({ start: START });
const iso = (ms: number) => new Date(ms).toISOString();

interface ActivityAnswer {
  vehicle: string;
  from: string;
  to: string;
  summary: {
    distance: { value: number; unit: string };
    movingSeconds: number;
    stoppedSeconds: number;
    stopCount: number;
    maxSpeed: { value: number; unit: string } | null;
  };
  stops: { start: string; end: string; lat: number; lon: number; location?: { uuid: string } }[];
  drives: { start: string; end: string; distance: { value: number } }[];
}

describe('a vehicle activity: stops and drives from positions', () => {
  let svc: TestService;
  const get = (url: string, token?: string) => svc.app.inject({ method: 'GET', url, headers: auth(token) });
  const activity = async (from: number, to: number, token?: string): Promise<ActivityAnswer> => {
    const res = await get(`/api/v5/vehicles/${VEHICLE}/activity?from=${iso(from)}&to=${iso(to)}`, token);
    expect(res.statusCode, res.body).toBe(200);
    return res.json<ActivityAnswer>();
  };

  beforeAll(async () => {
    svc = await startService();
    // The trip's locations A, B and C as points (a 150 m fence); D as a polygon the route crosses.
    for (const [name, id] of Object.entries(LOCATIONS)) {
      const p = PLACES[name as keyof typeof PLACES];
      const geoReference =
        name === 'D'
          ? {
              type: 'latLonArrayGeoReference',
              points: [-1, 1, 1, -1].map((s, i) => ({ lat: p.lat + (i < 2 ? -0.002 : 0.002), lon: p.lon + s * 0.003 })),
            }
          : { type: 'latLonPointGeoReference', lat: p.lat, lon: p.lon };
      const res = await svc.app.inject({
        method: 'PUT',
        url: `/api/v5/locations`,
        headers: { ...auth(), ...json },
        payload: JSON.stringify({ id, name, geoReference }),
      });
      expect(res.statusCode, res.body).toBe(200);
    }
    const events = locationEvents(DAY, VEHICLE, (i) => uuid('a3000000', i));
    const res = await svc.app.inject({
      method: 'POST',
      url: '/api/v5/bulk/events',
      headers: { ...auth(), ...json },
      payload: JSON.stringify(events),
    });
    expect(res.statusCode, res.body).toBe(200);
    // Every position stored (the distributed deployment stores them a moment after the answer).
    const until = Date.now() + 30_000;
    for (;;) {
      const track = await get(`/api/v5/vehicles/${VEHICLE}/track?from=${iso(DAY.from)}&to=${iso(DAY.to)}&format=ndjson`);
      const lines = track.body.split('\n').filter((l) => l !== '').length;
      if (lines >= events.length || Date.now() > until) break;
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 120_000);
  afterAll(async () => svc?.close());

  it('finds the stops of the day at their locations within a minute of the truth, and the distance within 2 %', async () => {
    const a = await activity(DAY.from, DAY.to);
    expect(a.vehicle).toBe(VEHICLE);
    // The depot has no location: its stop names none. The drive-by of D and the halt make no stop.
    expect(a.stops.map((s) => s.location?.uuid ?? 'none')).toEqual(['none', LOCATIONS.A, LOCATIONS.B, LOCATIONS.C]);
    DAY.stops.forEach((truth, i) => {
      const stop = a.stops[i]!;
      expect(Math.abs(Date.parse(stop.start) - Math.max(truth.start, DAY.from)), `start of ${truth.place}`).toBeLessThanOrEqual(60_000);
      expect(Math.abs(Date.parse(stop.end) - truth.end), `end of ${truth.place}`).toBeLessThanOrEqual(60_000);
    });
    expect(a.summary.stopCount).toBe(4);
    expect(Math.abs(a.summary.distance.value - DAY.distanceM) / DAY.distanceM).toBeLessThan(0.02);
    expect(a.summary.distance.unit).toBe('m');
    expect(a.summary.maxSpeed).toEqual({ value: 60, unit: 'km/h' });
    expect(a.drives).toHaveLength(4);
    // Every second of the day between the first and the last position is either moving or stopped.
    const span = (DAY.fixes.at(-1)!.time - DAY.fixes[0]!.time) / 1000;
    expect(a.summary.movingSeconds + a.summary.stoppedSeconds).toBeCloseTo(span, 1);
    expect(a.summary.stoppedSeconds).toBeGreaterThan((20 + 30 + 45 + 20 - 4) * 60);
  });

  it('gives reports of adjacent windows that add up to the report of both', async () => {
    const whole = await activity(DAY.from, DAY.to);
    // Cuts in the middle of a drive, of a stop (B), and at a fix's exact time.
    for (const cut of [DAY.from + 37 * 60_000 + 7_000, DAY.stops[2]!.start + 10 * 60_000, DAY.fixes[100]!.time]) {
      const left = await activity(DAY.from, cut);
      const right = await activity(cut, DAY.to);
      expect(left.summary.distance.value + right.summary.distance.value).toBeCloseTo(whole.summary.distance.value, 0);
      expect(left.summary.movingSeconds + right.summary.movingSeconds).toBeCloseTo(whole.summary.movingSeconds, 1);
      expect(left.summary.stoppedSeconds + right.summary.stoppedSeconds).toBeCloseTo(whole.summary.stoppedSeconds, 1);
    }
  });

  it('answers CSV, one row a stop or drive in time order', async () => {
    const res = await get(`/api/v5/vehicles/${VEHICLE}/activity?from=${iso(DAY.from)}&to=${iso(DAY.to)}&format=csv`);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/csv/);
    const rows: Record<string, string>[] = parseCsv(res.body, { columns: true });
    expect(rows.map((r) => r.type)).toEqual(['stop', 'drive', 'stop', 'drive', 'stop', 'drive', 'stop', 'drive']);
    expect(rows.filter((r) => r.type === 'stop').map((r) => r.location)).toEqual(['', LOCATIONS.A, LOCATIONS.B, LOCATIONS.C]);
    const driven = rows.filter((r) => r.type === 'drive').reduce((s, r) => s + Number(r.distance_m), 0);
    expect(Math.abs(driven - DAY.distanceM) / DAY.distanceM).toBeLessThan(0.02);
  });

  it("sees nothing of another tenant's vehicle, and an empty window is all zeros", async () => {
    const other = await activity(DAY.from, DAY.to, 'writer-token-globex');
    expect(other).toMatchObject({ summary: { distance: { value: 0 }, stopCount: 0, maxSpeed: null }, stops: [], drives: [] });
    const before = await activity(DAY.from - 86_400_000, DAY.from - 3_600_000);
    expect(before).toMatchObject({ summary: { movingSeconds: 0, stoppedSeconds: 0 }, stops: [], drives: [] });
  });

  it('refuses a missing or bad window, format or id in the model error format', async () => {
    const url = `/api/v5/vehicles/${VEHICLE}/activity`;
    const fields = async (u: string) => {
      const res = await get(u);
      expect(res.statusCode, res.body).toBe(400);
      return res.json<{ field?: string; type: string }[]>().map((e) => e.field);
    };
    expect(await fields(`${url}?to=${iso(DAY.to)}`)).toContain('from');
    expect(await fields(`${url}?from=${iso(DAY.from)}`)).toContain('to');
    expect(await fields(`${url}?from=${iso(DAY.to)}&to=${iso(DAY.from)}`)).toContain('to');
    expect(await fields(`${url}?from=${iso(DAY.from - 40 * 86_400_000)}&to=${iso(DAY.from)}`)).toContain('to');
    expect(await fields(`${url}?from=yesterday&to=${iso(DAY.to)}`)).toContain('from');
    expect(await fields(`${url}?from=${iso(DAY.from)}&to=${iso(DAY.to)}&format=kml`)).toContain('format');
    expect(await fields(`${url}?from=${iso(DAY.from)}&to=${iso(DAY.to)}&limit=3`)).toContain('limit');
    expect((await get(`/api/v5/vehicles/not-a-uuid/activity?from=${iso(DAY.from)}&to=${iso(DAY.to)}`)).statusCode).toBe(400);
    expect((await svc.app.inject({ method: 'GET', url: `${url}?from=${iso(DAY.from)}&to=${iso(DAY.to)}` })).statusCode).toBe(401);
  });
});
