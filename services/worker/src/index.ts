export { entityWorker, telemetryWorker, toWrite, type WorkerDeps } from './worker.js';
