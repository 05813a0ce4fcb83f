/**
 * The track and positions group (a fastify plugin): a vehicle's track
 * (`GET /api/v5/vehicles/{UUID}/track`) and the latest positions (`GET /api/v5/vehicles/positions`).
 */
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply } from 'fastify';
import type { LatestPosition, TrackPoint } from '@otm/core';
import { JSON_TYPE, KIND_EXAMPLES, badRequest, jsonAnswer, limitParam, pageOf, query, ref, timeParam, uuidParams } from '@otm/http';
import { decodeCursor, encodeCursor, bad, bboxOf, durationOf, timeOf, BBOX, DURATION, TRACK_LIMIT } from './find-params.js';
import type { Finder } from './find.js';
import { nextPath } from './routes.js';
import { TRACK_CONTENT_TYPES, TRACK_FORMATS, trackBody, type TrackFormat, type TrackPoint as FormatPoint } from './track-formats.js';

const DAY_MS = 86_400_000;

/**
 * The JSON of a latest position as bytes, written by hand (ids are UUIDs, numbers finite) and kept
 * for as long as the position object lives: the embedded store answers the same objects until a
 * vehicle moves, so a map polling 10,000 vehicles pays for the text of the ones that moved only.
 */
const positionBytes = new WeakMap<LatestPosition, Buffer>();
export function positionJson(p: LatestPosition): Buffer {
  let bytes = positionBytes.get(p);
  if (bytes === undefined) {
    bytes = Buffer.from(
      `{"vehicle":"${p.vehicle}","time":"${new Date(p.time).toISOString()}","lat":${p.lat},"lon":${p.lon}` +
        `${p.speedKmh === null ? '' : `,"speedKmh":${p.speedKmh}`}${p.heading === null ? '' : `,"heading":${p.heading}`},"eventId":"${p.eventKey}"}`,
    );
    positionBytes.set(p, bytes);
  }
  return bytes;
}

const POSITIONS_HEAD = Buffer.from('{"items":[');
const POSITIONS_TAIL = Buffer.from('],"next":null}');

/**
 * The answer for a list of positions: the items' kept bytes copied into one buffer (for 10,000
 * items, 1.6 MB: ~0.5 ms, where joining texts and encoding them took ~3.5 ms), itself kept for as
 * long as the list lives (the embedded store answers the same list until a vehicle moves).
 */
const positionBodies = new WeakMap<readonly LatestPosition[], Buffer>();
function positionsBody(positions: readonly LatestPosition[]): Buffer {
  let body = positionBodies.get(positions);
  if (body === undefined) {
    const items = positions.map(positionJson);
    let size = POSITIONS_HEAD.length + POSITIONS_TAIL.length + Math.max(0, items.length - 1);
    for (const b of items) size += b.length;
    body = Buffer.allocUnsafe(size);
    let at = POSITIONS_HEAD.copy(body, 0);
    for (let i = 0; i < items.length; i++) {
      if (i > 0) body[at++] = 0x2c; // ','
      at += items[i]!.copy(body, at);
    }
    POSITIONS_TAIL.copy(body, at);
    positionBodies.set(positions, body);
  }
  return body;
}

const isTrackCursor = (v: unknown): v is [number, string] =>
  Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === 'string' && v[1].length <= 64;

/**
 * Sends a streamed body once its first chunk is made, so that a store that fails at once (down,
 * say) is answered with its error status rather than a cut-off 200.
 */
async function sendStream(reply: FastifyReply, type: string, body: AsyncGenerator<string | Buffer>): Promise<FastifyReply> {
  const first = await body.next();
  async function* rest(): AsyncGenerator<string | Buffer> {
    if (!first.done) yield first.value;
    yield* body;
  }
  return reply
    .code(200)
    .type(type)
    .send(Readable.from(rest(), { objectMode: false }));
}

/** A latest position, as the OpenAPI document's `position`. */
const POSITION = {
  type: 'object',
  required: ['vehicle', 'time', 'lat', 'lon', 'eventId'],
  properties: {
    vehicle: { type: 'string', format: 'uuid' },
    time: { type: 'string', format: 'date-time' },
    lat: { type: 'number' },
    lon: { type: 'number' },
    speedKmh: { type: 'number' },
    heading: { type: 'number' },
    eventId: { type: 'string', format: 'uuid' },
  },
};

export interface TrackOptions {
  readonly finder: Finder;
  /** Longest track window, in days (OTM_TRACK_MAX_DAYS). */
  readonly trackMaxDays: number;
}

interface TrackQuery {
  from?: string;
  to?: string;
  format?: TrackFormat;
  limit?: number;
  cursor?: string;
}

/** About vehicles, without a :kind in the path: `read:vehicles` is enough (docs/auth.md). */
const READ_VEHICLES = { scope: 'read', kind: 'vehicles' } as const;

// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const tracks: FastifyPluginAsync<TrackOptions> = async (app: FastifyInstance, opts) => {
  app.addComponentSchemas({ position: POSITION });
  app.get<{ Querystring: { bbox?: string; staleAfter?: string } }>(
    '/api/v5/vehicles/positions',
    {
      config: READ_VEHICLES,
      schema: {
        operationId: 'getLatestPositions',
        summary: "Extension: the newest position of each of the tenant's vehicles",
        description: 'Kept up to date as location events arrive (the newest by event time); an older event never moves a vehicle back.',
        tags: ['Vehicle', 'Extensions'],
        querystring: query({
          bbox: BBOX,
          staleAfter: { ...DURATION, description: 'leave out positions older than this: 90s, 15m, 2h, 1d' },
        }),
        response: {
          '200': jsonAnswer('The positions, by vehicle id', pageOf(ref('position'))),
          '400': badRequest('A bad bbox or staleAfter'),
        },
      },
    },
    async (req, reply) => {
      const bbox = bboxOf(req.query.bbox);
      const stale = req.query.staleAfter;
      const notBefore = stale === undefined ? undefined : Date.now() - durationOf(stale);
      const positions = await opts.finder.positions(req.principal!.tenant, bbox, notBefore);
      return reply.code(200).type(JSON_TYPE).send(positionsBody(positions));
    },
  );

  app.get<{ Params: { UUID: string }; Querystring: TrackQuery }>(
    '/api/v5/vehicles/:UUID/track',
    {
      config: READ_VEHICLES,
      schema: {
        operationId: 'getVehicleTrack',
        summary: "Extension: a vehicle's locationUpdateEvents in event time order",
        description:
          'The window is at most OTM_TRACK_MAX_DAYS (default 31) days; default: the day before `to` (default now). json pages with `limit` and `cursor`; ' +
          'the other formats stream the whole window. geojson: a FeatureCollection of one Point feature per position, then the LineString of all of them.',
        tags: ['Vehicle', 'Extensions'],
        params: uuidParams(),
        querystring: query({
          from: timeParam(),
          to: timeParam(),
          format: { type: 'string', enum: TRACK_FORMATS, default: 'json' },
          limit: limitParam(TRACK_LIMIT.max, TRACK_LIMIT.fallback, 'json only'),
          cursor: { type: 'string', minLength: 1, maxLength: 1_000, description: 'json only' },
        }),
        response: {
          '200': {
            description: 'The track',
            content: {
              'application/json': { schema: pageOf(ref('event')), example: { items: [KIND_EXAMPLES.events], next: null } },
              'application/geo+json': { schema: { type: 'object' } },
              'application/gpx+xml': { schema: { type: 'string' } },
              'text/csv': { schema: { type: 'string', description: 'time,lat,lon,speed_kmh,heading,event_id' } },
              'application/x-ndjson': { schema: { type: 'string', description: 'one event a line' } },
            },
          },
          '400': badRequest('A bad UUID, time, format or a window longer than allowed'),
        },
      },
    },
    async (req, reply) => {
      const vehicle = req.params.UUID.toLowerCase();
      const q = req.query;
      const format = q.format ?? 'json';
      const to = timeOf(q.to) ?? Date.now();
      const from = timeOf(q.from) ?? to - DAY_MS;
      if (to <= from) throw bad('to', 'must be later than from');
      if (to - from > opts.trackMaxDays * DAY_MS) {
        throw bad('to', `the window from 'from' to 'to' must be at most ${opts.trackMaxDays} days (OTM_TRACK_MAX_DAYS)`);
      }
      if (format !== 'json' && (q.limit !== undefined || q.cursor !== undefined)) {
        throw bad(q.limit !== undefined ? 'limit' : 'cursor', 'pages are for format=json; the other formats give the whole window');
      }
      const limit = format === 'json' ? (q.limit ?? TRACK_LIMIT.fallback) : undefined;
      const after = q.cursor === undefined ? undefined : (([time, key]) => ({ time, key }))(decodeCursor(q.cursor, isTrackCursor));
      const tenant = req.principal!.tenant;
      let count = 0;
      let last: TrackPoint | undefined;
      async function* counted(): AsyncGenerator<FormatPoint> {
        for await (const p of opts.finder.track(tenant, vehicle, from, to, after, limit)) {
          count++;
          last = p;
          yield { time: p.time, lat: p.lat, lon: p.lon, id: p.key, doc: p.doc, speedKmh: p.speedKmh, heading: p.heading };
        }
      }
      const path = `/api/v5/vehicles/${vehicle}/track`;
      const body = trackBody(format, counted(), {
        vehicle,
        from,
        to,
        next: () =>
          limit !== undefined && count === limit && last !== undefined
            ? nextPath(
                path,
                { ...q, from: new Date(from).toISOString(), to: new Date(to).toISOString() },
                encodeCursor([last.time, last.key]),
              )
            : null,
      });
      if (format !== 'json')
        void reply.header('content-disposition', `inline; filename="${vehicle}.${format === 'ndjson' ? 'ndjson' : format}"`);
      return sendStream(reply, TRACK_CONTENT_TYPES[format], body);
    },
  );
};
