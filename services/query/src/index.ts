export { Query, type QueryDeps } from './query.js';
export { registerQueryRoutes } from './routes.js';
