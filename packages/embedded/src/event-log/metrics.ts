/**
 * Metrics of the embedded event log (`otm serve`): how much it holds, how it writes, how far its
 * index is behind. Registered on the process's shared registry (`registry` of @otm/core), so that
 * GET /metrics shows them beside the others once the embedded stores are loaded.
 */
import { Counter, Gauge } from 'prom-client';
import { registry } from '@otm/core';

export const eventLogBytes = new Gauge({
  name: 'otm_event_log_bytes',
  help: 'Bytes in the segment files of the embedded event log (replaced and deleted events included until their segment is compacted)',
  registers: [registry],
});

export const eventLogWrites = new Counter({
  name: 'otm_event_log_writes_total',
  help: 'Durable writes to the embedded event log; each holds every event that arrived while the one before was being written',
  registers: [registry],
});

export const eventLogRecords = new Counter({
  name: 'otm_event_log_records_total',
  help: 'Records (event versions and deletions) written to the embedded event log',
  registers: [registry],
});

export const eventLogCompactions = new Counter({
  name: 'otm_event_log_compactions_total',
  help: 'Segments of the embedded event log rewritten without their replaced and deleted events (or removed when nothing in them was live)',
  registers: [registry],
});

export const eventLogReclaimedBytes = new Counter({
  name: 'otm_event_log_reclaimed_bytes_total',
  help: 'Bytes of replaced and deleted events that compaction removed from the embedded event log',
  registers: [registry],
});

export const eventIndexBehind = new Gauge({
  name: 'otm_event_index_behind',
  help: 'Event log changes durable in the log but not yet committed to its LMDB index (read from memory until then)',
  registers: [registry],
});

export const eventIndexFailed = new Gauge({
  name: 'otm_event_index_failed',
  help: '1 while a commit of the embedded event index failed and waits to be tried again (its events are read from memory until then)',
  registers: [registry],
});
