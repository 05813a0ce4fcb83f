export { Ingress, envelopesFor, telemetryKey, type Accepted, type IngressDeps } from './ingress.js';
export { registerIngressRoutes } from './routes.js';
