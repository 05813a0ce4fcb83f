/** Prometheus metrics of a process (prom-client), served at GET /metrics. */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export const registry = new Registry();

/** Buckets of the histograms of seconds: 1 ms to 2.5 s. */
const SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
collectDefaultMetrics({ register: registry });

/** Update and association effects that could not be applied (the reason is also logged). */
export const droppedEffects = new Counter({
  name: 'otm_dropped_effects_total',
  help: 'Update and association effects dropped because they could not be applied',
  labelNames: ['reason'] as const,
  registers: [registry],
});

/** Effects kept until the entity they target arrives. */
export const pendingEffects = new Counter({
  name: 'otm_pending_effects_total',
  help: 'Update and association events kept until their target arrives',
  registers: [registry],
});

/** Messages applied by workers, by topic. */
export const appliedMessages = new Counter({
  name: 'otm_applied_messages_total',
  help: 'Bus messages applied to the stores',
  labelNames: ['topic'] as const,
  registers: [registry],
});

export const batchSeconds = new Histogram({
  name: 'otm_worker_batch_seconds',
  help: 'Time to apply one batch of bus messages, store commit included',
  labelNames: ['topic'] as const,
  buckets: SECONDS_BUCKETS,
  registers: [registry],
});

/** Bulk bodies parsed and checked (ingress): where, how long, and how many at once. */
export const bulkCheckSeconds = new Histogram({
  name: 'otm_bulk_check_seconds',
  help: 'Time to parse and check one bulk body, waiting for a free checking thread included',
  labelNames: ['where'] as const,
  buckets: SECONDS_BUCKETS,
  registers: [registry],
});

export const bulkChecksInFlight = new Gauge({
  name: 'otm_bulk_checks_in_flight',
  help: 'Bulk bodies being checked on a checking thread or waiting for one',
  registers: [registry],
});

/** The embedded event log (otm serve): how much it holds and how it writes. */
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
  help: '1 once a commit of the embedded event index failed in this process (the next start rebuilds it from the log)',
  registers: [registry],
});

/** The distributed entity store's cache of latest versions (Redis client-side caching). */
export const entityCacheReads = new Counter({
  name: 'otm_entity_cache_reads_total',
  help: 'GETs of an entity from the Redis entity store while its client-side cache was on: answered from memory (hit) or from Redis (miss)',
  labelNames: ['result'] as const,
  registers: [registry],
});

export const entityCacheTracking = new Gauge({
  name: 'otm_entity_cache_tracking',
  help: '1 while Redis tracks the keys this process caches (CLIENT TRACKING on and its invalidations heard); 0 while the cache is off',
  registers: [registry],
});
