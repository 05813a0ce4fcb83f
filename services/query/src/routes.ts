import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { LIFECYCLES, LIST_FILTERS, invalidDocument, isLifecycle, lifecycleRank, type LatestPosition, type TrackPoint } from '@otm/core';
import { JSON_TYPE, kindParam, onlyQuery, uuidParam } from '@otm/http';
import type { Query } from './query.js';
import { pageBody, type Finder } from './find.js';
import {
  LIST_PARAMS,
  bad,
  bboxParam,
  decodeCursor,
  durationParam,
  encodeCursor,
  kindsParam,
  limitParam,
  listFilters,
  timeParam,
} from './find-params.js';
import { TRACK_CONTENT_TYPES, TRACK_FORMATS, trackBody, type TrackFormat, type TrackPoint as FormatPoint } from './track-formats.js';

interface EntityParams {
  kind: string;
  uuid: string;
}

/** Default and largest page of a list and of the change feed. */
const LIST_LIMIT = { fallback: 100, max: 1_000 } as const;
/** Default and largest page of a track in JSON (the other formats stream the whole window). */
const TRACK_LIMIT = { fallback: 1_000, max: 10_000 } as const;
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

export interface QueryRouteOptions {
  /** Longest track window, in days (OTM_TRACK_MAX_DAYS). */
  readonly trackMaxDays: number;
}

/** The path and query of the next page: the request's own query with the new cursor. */
function nextPath(path: string, q: Readonly<Record<string, string>>, cursor: string | undefined): string {
  const { cursor: _given, ...rest } = q;
  const params = new URLSearchParams(cursor === undefined ? rest : { ...rest, cursor });
  const text = params.toString();
  return text === '' ? path : `${path}?${text}`;
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

/**
 * `GET /api/v5/<kind>/{UUID}[?lifecycle=<lifecycle>]`, and the find extensions: lists
 * (`GET /api/v5/<kind>`), the change feed (`GET /api/v5/changes`), a vehicle's track
 * (`GET /api/v5/vehicles/{UUID}/track`) and latest positions (`GET /api/v5/vehicles/positions`).
 */
export function registerQueryRoutes(app: FastifyInstance, query: Query, finder: Finder, opts: QueryRouteOptions): void {
  const read = { config: { scope: 'read' } } as const;
  // About vehicles, without a :kind in the path: `read:vehicles` is enough (docs/auth.md).
  const readVehicles = { config: { scope: 'read', kind: 'vehicles' } } as const;

  app.get('/api/v5/changes', read, async (req, reply) => {
    const q = onlyQuery(req.query, ['cursor', 'kinds', 'limit']);
    const limit = limitParam(q.limit, LIST_LIMIT.fallback, LIST_LIMIT.max);
    const kinds = kindsParam(q.kinds);
    if (q.cursor !== undefined && (q.cursor === '' || q.cursor.length > 100)) throw bad('cursor', 'is not a cursor of this feed');
    const page = await finder.changes(req.principal!.tenant, kinds, limit, q.cursor);
    // The feed has no last page: `next` is where to ask again, now or later.
    const next = nextPath('/api/v5/changes', q, page.next);
    return reply.code(200).type(JSON_TYPE).send(pageBody(page.items, next));
  });

  app.get('/api/v5/vehicles/positions', readVehicles, async (req, reply) => {
    const q = onlyQuery(req.query, ['bbox', 'staleAfter']);
    const bbox = bboxParam(q.bbox);
    const notBefore = q.staleAfter === undefined ? undefined : Date.now() - durationParam('staleAfter', q.staleAfter);
    const positions = await finder.positions(req.principal!.tenant, bbox, notBefore);
    return reply.code(200).type(JSON_TYPE).send(positionsBody(positions));
  });

  app.get<{ Params: { uuid: string } }>('/api/v5/vehicles/:uuid/track', readVehicles, async (req, reply) => {
    const vehicle = uuidParam(req.params.uuid);
    const q = onlyQuery(req.query, ['from', 'to', 'format', 'limit', 'cursor']);
    const format = (q.format ?? 'json') as TrackFormat;
    if (!TRACK_FORMATS.includes(format)) throw bad('format', `must be one of ${TRACK_FORMATS.join(', ')}`);
    const to = timeParam('to', q.to) ?? Date.now();
    const from = timeParam('from', q.from) ?? to - DAY_MS;
    if (to <= from) throw bad('to', 'must be later than from');
    if (to - from > opts.trackMaxDays * DAY_MS) {
      throw bad('to', `the window from 'from' to 'to' must be at most ${opts.trackMaxDays} days (OTM_TRACK_MAX_DAYS)`);
    }
    if (format !== 'json' && (q.limit !== undefined || q.cursor !== undefined)) {
      throw bad(q.limit !== undefined ? 'limit' : 'cursor', 'pages are for format=json; the other formats give the whole window');
    }
    const limit = format === 'json' ? limitParam(q.limit, TRACK_LIMIT.fallback, TRACK_LIMIT.max) : undefined;
    const after = q.cursor === undefined ? undefined : (([time, key]) => ({ time, key }))(decodeCursor(q.cursor, isTrackCursor));
    const tenant = req.principal!.tenant;
    let count = 0;
    let last: TrackPoint | undefined;
    async function* counted(): AsyncGenerator<FormatPoint> {
      for await (const p of finder.track(tenant, vehicle, from, to, after, limit)) {
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
  });

  app.get<{ Params: { kind: string } }>('/api/v5/:kind', read, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    const q = onlyQuery(req.query, [...LIST_PARAMS, ...LIST_FILTERS[kind]]);
    const limit = limitParam(q.limit, LIST_LIMIT.fallback, LIST_LIMIT.max);
    const filters = listFilters(kind, q);
    const page = await finder.list(req.principal!.tenant, kind, filters, limit, q.cursor);
    const next = page.next === undefined ? null : nextPath(`/api/v5/${kind}`, q, page.next);
    return reply.code(200).type(JSON_TYPE).send(pageBody(page.items, next));
  });

  app.get<{ Params: EntityParams }>('/api/v5/:kind/:uuid', read, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    const key = uuidParam(req.params.uuid);
    const q = onlyQuery(req.query, ['lifecycle']);
    let rank: number | undefined;
    if (q.lifecycle !== undefined) {
      if (!isLifecycle(q.lifecycle)) {
        throw invalidDocument([{ type: 'invalidField', field: 'lifecycle', message: `must be one of ${LIFECYCLES.join(', ')}` }]);
      }
      rank = lifecycleRank(q.lifecycle);
    }
    const doc = await query.get(req.principal!.tenant, kind, key, rank);
    // The stored bytes when the store has them (its cache, Redis), else the text.
    return reply
      .code(200)
      .type(JSON_TYPE)
      .send(doc.bytes ?? doc.json);
  });
}
