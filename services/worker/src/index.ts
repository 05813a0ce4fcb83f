export { entityWorker, telemetryWorker, toWrite, type TelemetryBatching, type WorkerDeps } from './worker.js';
export { storeTelemetry, telemetryEffects, type FixingEventStore, type TenantFix } from './telemetry-effects.js';
export { TELEMETRY_PIPELINE, telemetryPipeline, telemetrySubscription } from './overlapped-writes.js';
export { EXPORTED_KINDS, EntityExporter, startEntityExport, type EntityExportOptions } from './entity-export.js';
