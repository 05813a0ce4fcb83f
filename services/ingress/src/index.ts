export { Ingress, envelopesFor, telemetryKey, type Accepted, type BulkResult, type IngressDeps } from './ingress.js';
export { checkBulk, OUTCOME, type BulkCheckTask, type BulkFormat, type CheckedBulk, type RefusedBulk } from './bulk-check.js';
export { BulkChecker, type BulkCheckerOptions } from './bulk-checker.js';
export { checkDocument } from './check.js';
export { registerIngressRoutes } from './routes.js';
