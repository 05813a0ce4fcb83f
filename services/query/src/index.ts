export { Query, type QueryDeps } from './query.js';
export { Finder, type FindDeps } from './find.js';
export { registerQueryRoutes, type QueryRouteOptions } from './routes.js';
