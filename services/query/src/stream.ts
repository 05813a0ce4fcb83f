/**
 * Following the change feed as it happens: `GET /api/v5/stream`, Server-Sent Events, one event per
 * change of the feed (`id:` its cursor, `event: put|delete`, `data:` the item `GET /api/v5/changes`
 * answers), resumable with `Last-Event-ID`; and `POST /api/v5/stream/tickets`, short-lived tickets
 * for clients that cannot send an Authorization header (a browser's EventSource, stream-tickets.ts).
 *
 * One reading of the feed per tenant and process (`TenantReader`, stream-reader.ts): a loop,
 * running while the tenant has streams open here, that reads 1,000 changes at a time after its
 * cursor (waiting `pollMs` when there is nothing new) through core's shared reading of the feed
 * (shared-feed.ts, which the dispatcher reads through too: each change's document read once, its
 * event's text made once), and hands each change to the streams whose filters take it. Streams
 * that follow one vehicle (or one trip) are indexed by it, so a change costs the streams it
 * concerns, not all.
 *
 * A stream that resumes from an older cursor first reads the feed on its own (catching up), then
 * joins the shared reading exactly where it is, so that nothing is missed and nothing comes twice,
 * each stream's changes in feed order (`catchUp` says how). A stream whose client does not read
 * (more than `maxPendingBytes` waiting in its socket's buffer) is cut off: it resumes with its
 * Last-Event-ID, rather than holding up the others or growing memory. `otm_streams_open` counts the
 * streams open in the process (no tenant label: its values have no bound). The hub is
 * stream-hub.ts, a stream stream-client.ts, the routes stream-routes.ts.
 *
 * Each stream holds one of its token's OTM_STREAMS_PER_TOKEN slots (`StreamSlots`): in the process
 * (embedded `MemoryStreamSlots`), or in Redis, where every query process counts the same slots. A slot is
 * taken before the stream opens (429 beyond the limit), renewed on the heartbeat, held for three
 * heartbeats at a time (so the slots of a process that died free themselves), and released when
 * the stream closes. Should the slots' store fail when a stream opens, the stream opens anyway
 * (they fail open, like the quotas) and its slot is written at the next renewal that gets through.
 *
 * The stream follows the change feed, that is what is stored, not the bus: a client that receives
 * an event can GET what it names, and the same cursors resume the stream and `GET /api/v5/changes`.
 *
 * Recovery (issue 36; core health.ts and loops.ts). A tenant's reading runs for as long as the
 * tenant has streams here, whatever fails: a read of the feed or of the documents that fails (the
 * store unavailable), or anything else in a round, is tried again from the reading's position
 * (nothing handed out twice, nothing skipped) after a jittered pause doubling from 200 ms to
 * READER_RETRY_CAP_MS, and the reading is down until a round works: `stream reader <tenant>` in
 * /readyz (and /healthz once it stays down OTM_STALL_SECONDS), `otm_loop_up{loop="stream-reader"}`
 * 0 while any reading is down, `otm_loop_restarts_total{loop="stream-reader"}` for each retry. Its
 * streams stay open meanwhile (heartbeats go on) and get what they missed once it reads again. A
 * socket that fails ends its own stream only. Failures are logged once per 10 s per cause for all
 * readings, as are the failures that end a stream (catching up, its snapshot).
 */
export { READER_RETRY_CAP_MS } from './stream-reader.js';
export { StreamHub, type OpenStream, type StreamOptions, type StreamSource } from './stream-hub.js';
export type { StreamFilter, StreamSink } from './stream-client.js';
export { StreamTickets, TICKET_TTL_MS, streamTicketKey } from './stream-tickets.js';
