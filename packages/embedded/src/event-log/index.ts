/**
 * The embedded event log, one module per job: record.ts (the record format), segments.ts (the
 * segment files), group-commit.ts (writes that share one durable write), index-writer.ts (the
 * LMDB index of events), recovery.ts (what a start does), compaction.ts, metrics.ts, and
 * store.ts (the EventStore that ties them). This file is its public API.
 */
export { LogEventStore, type EventLogOptions } from './store.js';
export { DEFAULT_SEGMENT_BYTES } from './segments.js';
export type { CompactionOptions, CompactionResult } from './compaction.js';
