export { entityWorker, telemetryWorker, toWrite, type TelemetryBatching, type WorkerDeps } from './worker.js';
