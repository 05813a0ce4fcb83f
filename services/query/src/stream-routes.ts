/**
 * The stream group (a fastify plugin): `GET /api/v5/stream` (Server-Sent Events) and
 * `POST /api/v5/stream/tickets`. The hub that serves the streams is closed by its owner
 * (services/otm/src/service.ts) when the app closes.
 */
import { hash } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { ErrorCode, OtmServiceError, storageKey, type Principal } from '@otm/core';
import { JSON_TYPE, KINDS_PARAM, NO_QUERY, QUOTA_429, badRequest, errorAnswer, jsonAnswer, query, tooManyRequests } from '@otm/http';
import { bad, kindsOf } from './find-params.js';
import type { OpenStream, StreamHub, StreamTickets } from './stream.js';

/** Longest Last-Event-ID taken. */
const CURSOR_MAX = 100;
/** Longest id of a vehicle or trip filter. */
const ID_MAX = 1_000;

/** Which token a request's principal came from (StreamTickets.ref). */
const ownerOf = (tickets: StreamTickets, principal: Principal, authorization: string | undefined): string =>
  tickets.ref(principal, hash('sha256', authorization ?? '', 'hex'));

const idParam = (description: string) => ({
  type: 'string',
  minLength: 1,
  maxLength: ID_MAX,
  description,
  'x-message': `must be an id of 1 to ${ID_MAX} characters`,
});

/** A cursor of the feed the stream sent as an event's id. */
const EVENT_ID = {
  type: 'string',
  minLength: 1,
  maxLength: CURSOR_MAX,
  pattern: '^[\\x21-\\x7e]+$',
  'x-message': 'is not an id this stream sent',
};

interface StreamQuery {
  kinds?: string;
  vehicle?: string;
  trip?: string;
  snapshot?: 'positions';
  lastEventId?: string;
  ticket?: string;
}

export interface StreamRouteOptions {
  readonly hub: StreamHub;
  readonly tickets: StreamTickets;
}

/**
 * `GET /api/v5/stream?kinds=&vehicle=&trip=&snapshot=positions&lastEventId=` (and `?ticket=`
 * instead of the Authorization header).
 */
// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const stream: FastifyPluginAsync<StreamRouteOptions> = async (app: FastifyInstance, opts) => {
  app.get<{ Querystring: StreamQuery }>(
    '/api/v5/stream',
    {
      config: { scope: 'read', ticket: (t: string) => opts.tickets.verify(t) },
      exposeHeadRoute: false,
      schema: {
        operationId: 'streamChanges',
        summary: "Extension: the tenant's changes as they happen, as Server-Sent Events",
        description:
          'One event per change of the feed (GET /api/v5/changes): `id:` its cursor, `event: put` or `delete`, `data:` the item /changes answers. ' +
          'A comment at least every 15 s. Starts at the end of the feed (only new changes), or after `Last-Event-ID` (header; else `lastEventId`), ' +
          'within OTM_FEED_RETENTION, with nothing missed. `snapshot=positions` first sends the latest positions of the matching vehicles ' +
          '(event `position`, no id). Authenticate with the Authorization header, or with `ticket` from POST /api/v5/stream/tickets; never a token in the URL. ' +
          'Filters combine: `vehicle` takes the vehicle itself, trips with it as their vehicle and events linked to it; `trip` the trip itself and events linked to it ' +
          '(a delete, having no document left, only when it deletes that vehicle or trip).',
        tags: ['Extensions'],
        querystring: query({
          kinds: KINDS_PARAM,
          vehicle: idParam('the id of a vehicle'),
          trip: idParam('the id of a trip'),
          snapshot: { type: 'string', enum: ['positions'] },
          lastEventId: { ...EVENT_ID, description: 'as Last-Event-ID, for clients that cannot set it (the header wins)' },
          ticket: { type: 'string', description: 'a stream ticket, instead of the Authorization header' },
        }),
        headers: {
          type: 'object',
          properties: { 'Last-Event-ID': { ...EVENT_ID, description: 'the id of the last event received: resume after it' } },
        },
        response: {
          '200': {
            description: 'The stream, until the client or the service closes it',
            content: {
              'text/event-stream': {
                schema: { type: 'string', description: 'events whose data is a change (see the `change` schema) or a position' },
              },
            },
          },
          '400': badRequest(
            'An unknown parameter, a bad value, a Last-Event-ID that is not a cursor of the feed, or a token in the URL (`token`, `access_token`), named in `field`',
          ),
          '401': errorAnswer(
            'No bearer token and no ticket, or an unknown token, or a ticket not valid or expired (with WWW-Authenticate: Bearer)',
          ),
          '410': errorAnswer('The Last-Event-ID is older than the feed keeps (OTM_FEED_RETENTION): start again without one'),
          '429': tooManyRequests(
            `The token has OTM_STREAMS_PER_TOKEN streams open (in every process, with Redis) (\`tooManyStreams\`, with Retry-After); or ${QUOTA_429}`,
          ),
        },
        security: [{ BearerToken: [] }, { StreamTicket: [] }],
      },
    },
    async (req, reply) => {
      const q = req.query;
      // The header wins: an EventSource that reconnects sends the id it got last, its URL the first.
      const header = req.headers['last-event-id'];
      const [from, field] = header !== undefined ? [String(header), 'Last-Event-ID'] : [q.lastEventId, 'lastEventId'];
      const kinds = kindsOf(q.kinds);
      const principal = req.principal!;
      let stream: OpenStream;
      try {
        stream = await opts.hub.open({
          tenant: principal.tenant,
          owner: ownerOf(opts.tickets, principal, req.headers.authorization),
          filter: {
            ...(kinds === undefined ? {} : { kinds }),
            ...(q.vehicle === undefined ? {} : { vehicle: storageKey(q.vehicle) }),
            ...(q.trip === undefined ? {} : { trip: storageKey(q.trip) }),
          },
          ...(from === undefined ? {} : { from }),
          snapshot: q.snapshot === 'positions',
          sink: reply.raw,
        });
      } catch (e) {
        if (e instanceof OtmServiceError && e.code === ErrorCode.invalidDocument) throw bad(field, 'is not an id this stream sent');
        throw e;
      }
      const res = reply.raw;
      if (res.destroyed || req.raw.socket.destroyed) {
        stream.close();
        return reply.hijack();
      }
      reply.hijack();
      res.on('close', () => stream.close());
      res.on('error', () => stream.close());
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store',
        // nginx and other proxies: pass each event on as it comes.
        'x-accel-buffering': 'no',
      });
      stream.start();
    },
  );
};

/**
 * `POST /api/v5/stream/tickets`: a ticket for `GET /api/v5/stream?ticket=`, good for a minute. Any
 * process with the deployment's configuration can give one (the ingress too: it takes the POSTs).
 */
// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const streamTickets: FastifyPluginAsync<{ tickets: StreamTickets }> = async (app: FastifyInstance, opts) => {
  app.post(
    '/api/v5/stream/tickets',
    {
      config: { scope: 'read', bodyless: true },
      schema: {
        operationId: 'createStreamTicket',
        summary: 'Extension: a short-lived ticket for GET /api/v5/stream?ticket=, for clients that cannot send headers (EventSource)',
        description:
          'Good for 60 seconds, for GET /api/v5/stream only, with the tenant and scopes of the token; counts as the token against OTM_STREAMS_PER_TOKEN. ' +
          'A stream opened with it stays open after it expires; to resume, get a new one.',
        tags: ['Extensions'],
        querystring: NO_QUERY,
        response: {
          '200': jsonAnswer('The ticket', {
            type: 'object',
            required: ['ticket', 'expiresAt'],
            properties: { ticket: { type: 'string' }, expiresAt: { type: 'string', format: 'date-time' } },
          }),
          '400': badRequest('A query parameter'),
        },
      },
    },
    async (req, reply) => {
      const principal = req.principal!;
      const ticket = opts.tickets.issue(principal, ownerOf(opts.tickets, principal, req.headers.authorization));
      return reply.code(200).type(JSON_TYPE).send(JSON.stringify(ticket));
    },
  );
};
