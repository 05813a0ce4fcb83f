export { Ingress, envelopesFor, telemetryKey, type Accepted, type BulkResult, type IngressDeps } from './ingress.js';
export { checkBulk, OUTCOME, type BulkCheckTask, type BulkFormat, type CheckedBulk, type RefusedBulk } from './bulk/check-body.js';
export { BulkChecker, type BulkCheckerOptions } from './bulk/thread-pool.js';
export { checkDocument } from './check-document.js';
export { bulkWrites, entityWrites, type BulkWriteOptions, type EntityWriteOptions } from './routes.js';
export { validateRoute } from './validate-route.js';
