/**
 * The query role's route groups, each a fastify plugin: the model's `GET /api/v5/<kind>/{UUID}`
 * (`entityReads`), the lists (`GET /api/v5/<kind>`, `lists`) and the change feed
 * (`GET /api/v5/changes`, `changes`). Tracks and positions: track-routes.ts; the stream: stream-routes.ts.
 */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { KINDS, type KindSegment } from '@otm/model';
import { LIFECYCLES, lifecycleRank, type Lifecycle } from '@otm/core';
import {
  JSON_TYPE,
  KIND_EXAMPLES,
  KIND_SEGMENTS,
  badRequest,
  capital,
  errorAnswer,
  jsonAnswer,
  pageOf,
  query,
  ref,
  uuidParams,
} from '@otm/http';
import type { Query } from './query.js';
import { pageBody, type Finder } from './find.js';
import { CHANGES_QUERY, LIST_LIMIT, kindsOf, listFilters, listQuery } from './find-params.js';

/** The path and query of the next page: the request's own query with the new cursor. */
export function nextPath(
  path: string,
  q: Readonly<Record<string, string | number | boolean | undefined>>,
  cursor: string | undefined,
): string {
  const { cursor: _given, ...rest } = q;
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(rest)) if (value !== undefined) params.set(name, String(value));
  if (cursor !== undefined) params.set('cursor', cursor);
  const text = params.toString();
  return text === '' ? path : `${path}?${text}`;
}

/** `GET /api/v5/<kind>/{UUID}[?lifecycle=<lifecycle>]` of each kind. */
// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const entityReads: FastifyPluginAsync<{ query: Query }> = async (app: FastifyInstance, opts) => {
  for (const k of KINDS) {
    const kind: KindSegment = k.segment;
    app.get<{ Params: { UUID: string }; Querystring: { lifecycle?: Lifecycle } }>(
      `/api/v5/${kind}/:UUID`,
      {
        // `kind`: a per-kind scope (read:<kind>) is enough.
        config: { scope: 'read', kind },
        schema: {
          operationId: `get${capital(k.entityType)}ByUuid`,
          tags: [k.label],
          params: uuidParams(),
          querystring: query({
            lifecycle: { type: 'string', enum: LIFECYCLES, description: 'that lifecycle version instead of the latest' },
          }),
          response: {
            '200': jsonAnswer('The entity (its latest lifecycle unless asked)', ref(k.schema), KIND_EXAMPLES[kind]),
            '400': badRequest('A malformed UUID or query'),
            '404': errorAnswer('No such entity for this tenant'),
          },
        },
      },
      async (req, reply) => {
        const rank = req.query.lifecycle === undefined ? undefined : lifecycleRank(req.query.lifecycle);
        const doc = await opts.query.get(req.principal!.tenant, kind, req.params.UUID.toLowerCase(), rank);
        // The stored bytes when the store has them (its cache, Redis), else the text.
        return reply
          .code(200)
          .type(JSON_TYPE)
          .send(doc.bytes ?? doc.json);
      },
    );
  }
};

/** `GET /api/v5/<kind>?<filters>&limit=&cursor=` of each kind. */
// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const lists: FastifyPluginAsync<{ finder: Finder }> = async (app: FastifyInstance, opts) => {
  for (const k of KINDS) {
    const kind: KindSegment = k.segment;
    app.get<{ Querystring: Record<string, string | undefined> & { limit?: number } }>(
      `/api/v5/${kind}`,
      {
        config: { scope: 'read', kind },
        schema: {
          operationId: `list${capital(k.entityType)}s`,
          summary: `Extension: the tenant's ${kind}, a page at a time`,
          description:
            'Keyset order: the time of the last change, then the id; never offsets, so a client walking every page while others write sees ' +
            'each entity that did not change during the walk exactly once (one that changed moves to the end). Filters combine; each item is ' +
            'the document as GET answers it (the asked lifecycle with `lifecycle`, else the latest).',
          tags: [k.label, 'Extensions'],
          querystring: listQuery(kind),
          response: {
            '200': jsonAnswer('A page, and the path of the next one (null on the last page)', pageOf(ref(k.schema)), {
              items: [KIND_EXAMPLES[kind]],
              next: null,
            }),
            '400': badRequest('An unknown query parameter or a bad value, named in `field`'),
          },
        },
      },
      async (req, reply) => {
        const q = req.query;
        const filters = listFilters(kind, q);
        const page = await opts.finder.list(req.principal!.tenant, kind, filters, q.limit ?? LIST_LIMIT.fallback, q.cursor);
        const next = page.next === undefined ? null : nextPath(`/api/v5/${kind}`, q, page.next);
        return reply.code(200).type(JSON_TYPE).send(pageBody(page.items, next));
      },
    );
  }
};

/** An item of the change feed, as the OpenAPI document's `change`. */
const CHANGE = {
  type: 'object',
  required: ['cursor', 'op', 'kind', 'id'],
  properties: {
    cursor: { type: 'string' },
    op: { type: 'string', enum: ['put', 'delete'] },
    kind: { type: 'string', enum: KIND_SEGMENTS },
    id: { type: 'string', format: 'uuid' },
    lifecycle: ref('lifecycle'),
    document: {
      type: 'object',
      description: 'the document put (a put; absent if deleted since, for a version read when the change is read)',
    },
  },
};

/** `GET /api/v5/changes?cursor=&kinds=&limit=`: the change feed. */
// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const changes: FastifyPluginAsync<{ finder: Finder }> = async (app: FastifyInstance, opts) => {
  app.addComponentSchemas({ change: CHANGE });
  app.get<{ Querystring: { cursor?: string; kinds?: string; limit?: number } }>(
    '/api/v5/changes',
    {
      config: { scope: 'read' },
      schema: {
        operationId: 'listChanges',
        summary: "Extension: the change feed, every put and delete of the tenant's data in the order applied",
        description:
          'Resumable from any cursor within OTM_FEED_RETENTION (default 7 days). `next` is always given: at the end it is where to ask again later. ' +
          'A put carries the document written (or, for telemetry events in the distributed deployment, and in the embedded one for an event whose part of the log was compacted since, the version as stored when read).',
        tags: ['Extensions'],
        querystring: CHANGES_QUERY,
        response: {
          '200': jsonAnswer('A page of changes', pageOf(ref('change'))),
          '400': badRequest('A bad cursor, kind or limit, named in `field`'),
          '410': errorAnswer('The cursor is older than the feed keeps (OTM_FEED_RETENTION): start again without one'),
        },
      },
    },
    async (req, reply) => {
      const q = req.query;
      const page = await opts.finder.changes(req.principal!.tenant, kindsOf(q.kinds), q.limit ?? LIST_LIMIT.fallback, q.cursor);
      // The feed has no last page: `next` is where to ask again, now or later.
      return reply
        .code(200)
        .type(JSON_TYPE)
        .send(pageBody(page.items, nextPath('/api/v5/changes', q, page.next)));
    },
  );
};
