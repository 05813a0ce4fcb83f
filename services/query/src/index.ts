export { Query, type QueryDeps } from './query.js';
export { Finder, type FindDeps } from './find.js';
export { registerQueryRoutes, type QueryRouteOptions } from './routes.js';
export {
  StreamHub,
  StreamTickets,
  TICKET_TTL_MS,
  registerStreamRoutes,
  registerStreamTicketRoute,
  streamTicketKey,
  type OpenStream,
  type StreamFilter,
  type StreamOptions,
  type StreamSink,
  type StreamSource,
} from './stream.js';
