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

/** The entity export (the telemetry worker's copy of entity changes into ClickHouse's otm_entities). */
export const entityExportRows = new Counter({
  name: 'otm_entity_export_rows_total',
  help: 'Rows the entity export inserted into otm_entities (versions and tombstones)',
  registers: [registry],
});

export const entityExportLag = new Gauge({
  name: 'otm_entity_export_lag_seconds',
  help: 'Age of the oldest entity change the export had still to copy when it last read a feed (largest over tenants; 0 once every feed is copied)',
  registers: [registry],
});

export const entityExportFailures = new Counter({
  name: 'otm_entity_export_failures_total',
  help: 'Passes of the entity export that failed (Redis or ClickHouse unavailable); the next pass starts again from the saved cursors',
  registers: [registry],
});

/** Webhook deliveries (the dispatcher: services/dispatcher). */
export const webhookAttempts = new Counter({
  name: 'otm_webhook_attempts_total',
  help: 'Attempts at delivering a batch of changes to a webhook, by outcome: delivered (2xx), failed (another answer, a timeout, a connection error) or refused (the target address is not allowed)',
  labelNames: ['outcome'] as const,
  registers: [registry],
});

export const webhookChanges = new Counter({
  name: 'otm_webhook_changes_total',
  help: 'Changes delivered to webhooks (counted once per delivered batch; a batch delivered again after a replay counts again)',
  registers: [registry],
});

export const webhookAttemptSeconds = new Histogram({
  name: 'otm_webhook_attempt_seconds',
  help: 'Time of one delivery attempt, from connecting to the end of the answer (or the failure)',
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  registers: [registry],
});

export const webhookSubscriptionsHeld = new Gauge({
  name: 'otm_webhook_subscriptions_held',
  help: 'Active webhook subscriptions this process delivers (holds the lease of)',
  registers: [registry],
});

export const webhookLag = new Gauge({
  name: 'otm_webhook_lag_seconds',
  help: 'Age of the oldest change a subscription of this process had still to deliver when it last read the feed (largest over its subscriptions)',
  registers: [registry],
});

export const webhookSubscriptions = new Gauge({
  name: 'otm_webhook_subscriptions',
  help: 'Webhook subscriptions of every tenant by state (active, paused), as the dispatcher of this process last counted them (every few seconds; each dispatcher counts them all: aggregate with max, not sum)',
  labelNames: ['state'] as const,
  registers: [registry],
});

/** Server-Sent Events streams (query's stream.ts); no tenant label, whose values have no bound. */
export const streamsOpen = new Gauge({
  name: 'otm_streams_open',
  help: 'Server-Sent Events streams (GET /api/v5/stream) open in this process, over all tenants',
  registers: [registry],
});

/** The caches of latest versions of this process (the entity stores' `latest`), for the gauges below. */
const latestCaches = new Set<{ readonly size: number; readonly calculatedSize: number }>();

/**
 * Counts `cache` (an lru-cache with a `sizeCalculation`) in `otm_entity_cache_entries` and
 * `otm_entity_cache_bytes` from now on; the answer stops counting it (a store's close).
 */
export function watchLatestCache(cache: { readonly size: number; readonly calculatedSize: number }): () => void {
  latestCaches.add(cache);
  return () => latestCaches.delete(cache);
}

/** A gauge of the caches of latest versions: the sum of `what` over them, read at each scrape. */
const cacheGauge = (name: string, help: string, what: 'size' | 'calculatedSize') =>
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      let n = 0;
      for (const c of latestCaches) n += c[what];
      this.set(n);
    },
  });

export const entityCacheEntries = cacheGauge(
  'otm_entity_cache_entries',
  'Documents in the caches of latest versions of this process (at most 10,000 a store)',
  'size',
);

export const entityCacheBytes = cacheGauge(
  'otm_entity_cache_bytes',
  "Bytes those documents count against their cache's bound (their UTF-8 bytes and 100 each; at most 16 MiB a store)",
  'calculatedSize',
);

/** Bus consumers and background loops (core/health.ts): whether each runs, and how often it restarted. */
export const consumerUp = new Gauge({
  name: 'otm_consumer_up',
  help: 'Whether the bus consumer of a group and topic is joined and consuming (1) or not (0)',
  labelNames: ['group', 'topic'] as const,
  registers: [registry],
});

export const consumerLag = new Gauge({
  name: 'otm_consumer_lag',
  help: "Records of a partition after the group's committed offset (the end of the partition minus the commit), read every few seconds",
  labelNames: ['group', 'topic', 'partition'] as const,
  registers: [registry],
});

export const consumerRestarts = new Counter({
  name: 'otm_consumer_restarts_total',
  help: 'Times a bus consumer was started again after it failed or crashed',
  labelNames: ['group', 'topic'] as const,
  registers: [registry],
});

export const loopUp = new Gauge({
  name: 'otm_loop_up',
  help: 'Whether a background loop (dispatcher, stream reader, entity export, compaction, ...) runs (1) or is waiting to restart after a failure (0)',
  labelNames: ['loop'] as const,
  registers: [registry],
});

export const loopRestarts = new Counter({
  name: 'otm_loop_restarts_total',
  help: 'Times a background loop was started again after it failed',
  labelNames: ['loop'] as const,
  registers: [registry],
});

export const partsDown = new Gauge({
  name: 'otm_parts_down',
  help: 'Parts of this process (consumers, loops, stores refusing writes) that are down now, by kind; /readyz is 503 while any is',
  labelNames: ['kind'] as const,
  registers: [registry],
});

/**
 * Writes a store refused for lack of room (core/storage.ts), by store and cause: `no-space`,
 * `quota`, `io`, `short-write`, `map-full` (the embedded stores), `out-of-memory` (Redis),
 * `no-space` and `too-many-parts` (ClickHouse), `no-space` (Kafka's produce).
 */
export const writesRefused = new Counter({
  name: 'otm_writes_refused_total',
  help: 'Writes a store refused for lack of room (a full disk or quota, an I/O error from a commit, Redis out of memory, ClickHouse out of space or parts), by store and cause',
  labelNames: ['store', 'cause'] as const,
  registers: [registry],
});

/** Where `otm_data_free_bytes` is read from (the embedded data folder), set by the embedded stores. */
let freeBytesSource: { readonly folder: string; readonly free: () => number | undefined } | undefined;

/** Makes `otm_data_free_bytes` read the free bytes of `folder` from `free` (undefined: no data folder, no sample). */
export function watchDataFree(source: { readonly folder: string; readonly free: () => number | undefined } | undefined): void {
  freeBytesSource = source;
}

export const dataFreeBytes = new Gauge({
  name: 'otm_data_free_bytes',
  help: 'Bytes free for this process on the file system of its data folder (OTM_DATA_DIR; embedded stores only: no sample elsewhere), read at each scrape',
  labelNames: ['folder'] as const,
  registers: [registry],
  collect() {
    this.reset();
    const free = freeBytesSource?.free();
    if (free !== undefined) this.set({ folder: freeBytesSource!.folder }, free);
  },
});
