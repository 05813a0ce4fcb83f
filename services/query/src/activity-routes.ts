/**
 * A vehicle's activity (a fastify plugin): `GET /api/v5/vehicles/{UUID}/activity?from=&to=`, its
 * stops and drives in the window with their summary, from its location events
 * (packages/core/src/realization/activity.ts holds the rules; docs/realization.md says them for
 * users). Each stop names the tenant's location whose geofence holds it.
 */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import {
  activityOf,
  contextOf,
  loadGeofences,
  type Activity,
  type ActivitySettings,
  type DocumentReader,
  type Fix,
  type Geofences,
  type Lister,
} from '@otm/core';
import { JSON_TYPE, badRequest, query, timeParam, uuidParams } from '@otm/http';
import { bad, timeOf } from './find-params.js';
import type { Finder } from './find.js';

const DAY_MS = 86_400_000;

export interface ActivityOptions extends ActivitySettings {
  readonly finder: Finder;
  /** Where the tenant's locations are (the entity store). */
  readonly locations: Lister & DocumentReader;
  /** OTM_GEOFENCE_RADIUS_M */
  readonly geofenceRadiusM: number;
  /** Longest window, in days (OTM_TRACK_MAX_DAYS). */
  readonly maxDays: number;
  /** How long a tenant's geofences are kept before they are read again (default 10 s). */
  readonly geofenceTtlMs?: number;
}

/**
 * The tenants' geofences, read from their locations at most once every `ttlMs` a tenant (a new or
 * moved location counts within that), at most 1,000 tenants kept; concurrent reads share one load.
 */
export class GeofenceCache {
  private readonly kept = new Map<string, { at: number; fences: Promise<Geofences> }>();
  constructor(
    private readonly load: (tenant: string) => Promise<Geofences>,
    private readonly ttlMs: number,
  ) {}

  get(tenant: string): Promise<Geofences> {
    const now = Date.now();
    const hit = this.kept.get(tenant);
    if (hit !== undefined && now - hit.at < this.ttlMs) return hit.fences;
    const fences = this.load(tenant);
    this.kept.delete(tenant);
    if (this.kept.size >= 1_000) this.kept.delete(this.kept.keys().next().value!);
    this.kept.set(tenant, { at: now, fences });
    fences.catch(() => this.kept.get(tenant)?.fences === fences && this.kept.delete(tenant));
    return fences;
  }
}

const r1 = (v: number): number => Math.round(v * 10) / 10;
const r3 = (v: number): number => Math.round(v * 1000) / 1000;
const r6 = (v: number): number => Math.round(v * 1e6) / 1e6;
const iso = (ms: number): string => new Date(ms).toISOString();
const ref = (uuid: string) => ({ associationType: 'reference', entityType: 'location', uuid });

/** The answer's JSON value. */
function answerOf(vehicle: string, from: number, to: number, a: Activity, locate: (lat: number, lon: number) => string | undefined) {
  return {
    vehicle,
    from: iso(from),
    to: iso(to),
    summary: {
      distance: { value: r1(a.distanceM), unit: 'm' },
      movingSeconds: r3(a.movingSeconds),
      stoppedSeconds: r3(a.stoppedSeconds),
      stopCount: a.stops.length,
      maxSpeed: a.maxSpeedKmh === null ? null : { value: r1(a.maxSpeedKmh), unit: 'km/h' },
    },
    stops: a.stops.map((s) => {
      const location = locate(s.lat, s.lon);
      return { start: iso(s.start), end: iso(s.end), lat: r6(s.lat), lon: r6(s.lon), ...(location ? { location: ref(location) } : {}) };
    }),
    drives: a.drives.map((d) => ({ start: iso(d.start), end: iso(d.end), distance: { value: r1(d.distanceM), unit: 'm' } })),
  };
}

type Answer = ReturnType<typeof answerOf>;

/** CSV: one row a stop or drive, in time order. */
function csvOf(a: Answer): string {
  const rows: { start: string; line: string }[] = [
    ...a.stops.map((s) => ({ start: s.start, line: `stop,${s.start},${s.end},,${s.lat},${s.lon},${s.location?.uuid ?? ''}` })),
    ...a.drives.map((d) => ({ start: d.start, line: `drive,${d.start},${d.end},${d.distance.value},,,` })),
  ].sort((x, y) => (x.start < y.start ? -1 : x.start > y.start ? 1 : x.line < y.line ? 1 : -1));
  return `type,start,end,distance_m,lat,lon,location\r\n${rows.map((r) => `${r.line}\r\n`).join('')}`;
}

const MEASURE = (unit: string) => ({
  type: 'object',
  required: ['value', 'unit'],
  properties: { value: { type: 'number' }, unit: { type: 'string', enum: [unit] } },
});
const INTERVAL = { start: { type: 'string', format: 'date-time' }, end: { type: 'string', format: 'date-time' } };

/** The answer, as the OpenAPI document's `activity`. */
const ACTIVITY = {
  type: 'object',
  required: ['vehicle', 'from', 'to', 'summary', 'stops', 'drives'],
  properties: {
    vehicle: { type: 'string', format: 'uuid' },
    from: { type: 'string', format: 'date-time' },
    to: { type: 'string', format: 'date-time' },
    summary: {
      type: 'object',
      required: ['distance', 'movingSeconds', 'stoppedSeconds', 'stopCount', 'maxSpeed'],
      properties: {
        distance: MEASURE('m'),
        movingSeconds: { type: 'number' },
        stoppedSeconds: { type: 'number' },
        stopCount: { type: 'integer' },
        maxSpeed: { ...MEASURE('km/h'), type: ['object', 'null'], description: 'null without a reported or measurable speed' },
      },
    },
    stops: {
      type: 'array',
      items: {
        type: 'object',
        required: ['start', 'end', 'lat', 'lon'],
        properties: {
          ...INTERVAL,
          lat: { type: 'number' },
          lon: { type: 'number' },
          location: {
            type: 'object',
            required: ['associationType', 'entityType', 'uuid'],
            properties: {
              associationType: { type: 'string', enum: ['reference'] },
              entityType: { type: 'string', enum: ['location'] },
              uuid: { type: 'string' },
            },
          },
        },
      },
    },
    drives: {
      type: 'array',
      items: { type: 'object', required: ['start', 'end', 'distance'], properties: { ...INTERVAL, distance: MEASURE('m') } },
    },
  },
};

/** An answer (of the day in docs/realization.md, shortened). */
const ACTIVITY_EXAMPLE = {
  vehicle: 'a1000000-0000-4000-8000-000000000001',
  from: '2026-06-02T06:00:00.000Z',
  to: '2026-06-02T16:00:00.000Z',
  summary: {
    distance: { value: 49565.9, unit: 'm' },
    movingSeconds: 3150,
    stoppedSeconds: 6840,
    stopCount: 4,
    maxSpeed: { value: 60, unit: 'km/h' },
  },
  stops: [
    {
      start: '2026-06-02T06:30:00.000Z',
      end: '2026-06-02T07:00:00.000Z',
      lat: 52.143965,
      lon: 5.237074,
      location: { associationType: 'reference', entityType: 'location', uuid: 'a2000000-0000-4000-8000-000000000001' },
    },
  ],
  drives: [{ start: '2026-06-02T06:20:00.000Z', end: '2026-06-02T06:30:00.000Z', distance: { value: 10003.3, unit: 'm' } }],
};

/** Every point of the chunks an async iterable yields. */
async function all<T>(chunks: AsyncIterable<readonly T[]>): Promise<T[]> {
  const out: T[] = [];
  for await (const chunk of chunks) for (const v of chunk) out.push(v);
  return out;
}

// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const activity: FastifyPluginAsync<ActivityOptions> = async (app: FastifyInstance, opts) => {
  const settings: ActivitySettings = { radiusM: opts.radiusM, minSeconds: opts.minSeconds };
  const fences = new GeofenceCache((tenant) => loadGeofences(opts.locations, tenant, opts.geofenceRadiusM), opts.geofenceTtlMs ?? 10_000);
  app.addComponentSchemas({ activity: ACTIVITY });

  app.get<{ Params: { UUID: string }; Querystring: { from: string; to: string; format?: 'json' | 'csv' } }>(
    '/api/v5/vehicles/:UUID/activity',
    {
      config: { scope: 'read', kind: 'vehicles' },
      schema: {
        operationId: 'getVehicleActivity',
        summary: "Extension: a vehicle's stops and drives in a time window, from its location events",
        description:
          'A stop is the vehicle staying within OTM_STOP_RADIUS_M (default 100) metres for at least OTM_STOP_MIN_SECONDS (default 300); ' +
          'distance is the sum of great-circle steps outside stops. Every figure is of the window [from, to): a stop or drive that began ' +
          'before `from` is reported from `from`, so the reports of two adjacent windows add up to the report of both. ' +
          'The window is at most OTM_TRACK_MAX_DAYS (default 31) days. csv: one row a stop or drive.',
        tags: ['Vehicle', 'Extensions'],
        params: uuidParams(),
        querystring: query(
          {
            from: timeParam(),
            to: timeParam(),
            format: { type: 'string', enum: ['json', 'csv'], default: 'json' },
          },
          ['from', 'to'],
        ),
        response: {
          '200': {
            description: 'The activity',
            content: {
              'application/json': { schema: { $ref: '#/components/schemas/activity' }, example: ACTIVITY_EXAMPLE },
              'text/csv': { schema: { type: 'string', description: 'type,start,end,distance_m,lat,lon,location' } },
            },
          },
          '400': badRequest('A bad UUID, time or format, a missing from or to, or a window longer than allowed'),
        },
      },
    },
    async (req, reply) => {
      const vehicle = req.params.UUID.toLowerCase();
      const from = timeOf(req.query.from)!;
      const to = timeOf(req.query.to)!;
      if (to <= from) throw bad('to', 'must be later than from');
      if (to - from > opts.maxDays * DAY_MS)
        throw bad('to', `the window from 'from' to 'to' must be at most ${opts.maxDays} days (OTM_TRACK_MAX_DAYS)`);
      const tenant = req.principal!.tenant;
      const reach = opts.maxDays * DAY_MS;
      const scan = { tenant, vehicle };
      const [before] = await all(opts.finder.fixes({ ...scan, from: from - reach, to: from + 1, descending: true, limit: 1 }));
      const ctx = contextOf(from, to, settings, before?.time);
      const fixes: Fix[] = await all(opts.finder.fixes({ ...scan, from: ctx.from, to: ctx.to }));
      const [after] = await all(opts.finder.fixes({ ...scan, from: ctx.to, to: ctx.to + reach, limit: 1 }));
      if (after !== undefined) fixes.push(after);
      const result = activityOf(fixes, from, to, settings);
      const geofences = result.stops.length > 0 ? await fences.get(tenant) : undefined;
      const answer = answerOf(vehicle, from, to, result, (lat, lon) => geofences?.find(lat, lon)?.location);
      if (req.query.format === 'csv') {
        return reply
          .code(200)
          .type('text/csv; charset=utf-8')
          .header('content-disposition', `inline; filename="${vehicle}-activity.csv"`)
          .send(csvOf(answer));
      }
      return reply.code(200).type(JSON_TYPE).send(JSON.stringify(answer));
    },
  );
};
