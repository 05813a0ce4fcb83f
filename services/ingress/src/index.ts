export { Ingress, envelopesFor, telemetryKey, type Accepted, type BulkItem, type BulkResult, type IngressDeps } from './ingress.js';
export { registerIngressRoutes } from './routes.js';
