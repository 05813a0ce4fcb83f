export { Query, type QueryDeps } from './query.js';
export { Finder, type FindDeps } from './find.js';
export { changes, entityReads, lists } from './routes.js';
export { tracks, positionJson, type TrackOptions } from './track-routes.js';
export { activity, GeofenceCache, type ActivityOptions } from './activity-routes.js';
export { stream, streamTickets, type StreamRouteOptions } from './stream-routes.js';
export {
  StreamHub,
  StreamTickets,
  TICKET_TTL_MS,
  streamTicketKey,
  type OpenStream,
  type StreamFilter,
  type StreamOptions,
  type StreamSink,
  type StreamSource,
} from './stream.js';
