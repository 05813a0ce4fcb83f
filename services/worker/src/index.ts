export { entityWorker, telemetryWorker, toWrite, type TelemetryBatching, type WorkerDeps } from './worker.js';
export { EXPORTED_KINDS, EntityExporter, startEntityExport, type EntityExportOptions } from './entity-export.js';
