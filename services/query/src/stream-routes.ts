/**
 * The stream's routes: `GET /api/v5/stream` (Server-Sent Events, stream.ts) and `POST
 * /api/v5/stream/tickets` (stream-tickets.ts).
 */
import { hash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { ErrorCode, OtmServiceError, storageKey, type Principal } from '@otm/core';
import { JSON_TYPE, clip, onlyQuery } from '@otm/http';
import { bad, kindsParam } from './find-params.js';
import type { OpenStream, StreamHub } from './stream-hub.js';
import type { StreamTickets } from './stream-tickets.js';

/** Longest Last-Event-ID taken. */
const CURSOR_MAX = 100;
/** Longest id of a vehicle or trip filter. */
const ID_MAX = 1_000;

/** Which token a request's principal came from (StreamTickets.ref). */
const ownerOf = (tickets: StreamTickets, principal: Principal, authorization: string | undefined): string =>
  tickets.ref(principal, hash('sha256', authorization ?? '', 'hex'));

/** A vehicle or trip id, as a storage key. */
function idParam(name: string, raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  if (raw === '' || raw.length > ID_MAX) throw bad(name, `must be an id of 1 to ${ID_MAX} characters`);
  return storageKey(raw);
}

/**
 * `GET /api/v5/stream?kinds=&vehicle=&trip=&snapshot=positions&lastEventId=` (and `?ticket=`
 * instead of the Authorization header). Closes its streams when the app closes.
 */
export function registerStreamRoutes(app: FastifyInstance, hub: StreamHub, tickets: StreamTickets): void {
  app.get(
    '/api/v5/stream',
    { config: { scope: 'read', ticket: (t: string) => tickets.verify(t) }, exposeHeadRoute: false },
    async (req, reply) => {
      const q = onlyQuery(req.query, ['kinds', 'vehicle', 'trip', 'snapshot', 'lastEventId', 'ticket']);
      const kinds = kindsParam(q.kinds);
      const vehicle = idParam('vehicle', q.vehicle);
      const trip = idParam('trip', q.trip);
      if (q.snapshot !== undefined && q.snapshot !== 'positions') throw bad('snapshot', `must be positions; got '${clip(q.snapshot)}'`);
      // The header wins: an EventSource that reconnects sends the id it got last, its URL the first.
      const header = req.headers['last-event-id'];
      const [from, field] = header !== undefined ? [String(header), 'Last-Event-ID'] : [q.lastEventId, 'lastEventId'];
      if (from !== undefined && (from === '' || from.length > CURSOR_MAX || !/^[\x21-\x7e]+$/.test(from))) {
        throw bad(field, 'is not an id this stream sent');
      }
      const principal = req.principal!;
      let stream: OpenStream;
      try {
        stream = await hub.open({
          tenant: principal.tenant,
          owner: ownerOf(tickets, principal, req.headers.authorization),
          filter: {
            ...(kinds === undefined ? {} : { kinds }),
            ...(vehicle === undefined ? {} : { vehicle }),
            ...(trip === undefined ? {} : { trip }),
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
  app.addHook('preClose', (done) => {
    hub.close();
    done();
  });
}

/**
 * `POST /api/v5/stream/tickets`: a ticket for `GET /api/v5/stream?ticket=`, good for a minute. Any
 * process with the deployment's configuration can give one (the ingress too: it takes the POSTs).
 */
export function registerStreamTicketRoute(app: FastifyInstance, tickets: StreamTickets): void {
  app.post('/api/v5/stream/tickets', { config: { scope: 'read', bodyless: true } }, async (req, reply) => {
    onlyQuery(req.query, []);
    const principal = req.principal!;
    const ticket = tickets.issue(principal, ownerOf(tickets, principal, req.headers.authorization));
    return reply.code(200).type(JSON_TYPE).send(JSON.stringify(ticket));
  });
}
