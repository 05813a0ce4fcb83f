/**
 * The Redis entity store's metrics, on core's shared `registry` (served at GET /metrics by every
 * process that uses the store): its cache of latest versions (tracked-cache.ts).
 */
import { Counter, Gauge } from 'prom-client';
import { registry } from '@otm/core';

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

/**
 * Calls to the stream slots in Redis (stream-slots.ts) that failed or timed out, by `op`:
 * `acquire` (the stream opened without being counted: query's stream.ts lets it through),
 * `renew` (tried again at the next heartbeat), `release` (the slot expires by itself).
 */
export const streamSlotFailures = new Counter({
  name: 'otm_stream_slot_failures_total',
  help: 'Stream slot calls to Redis (OTM_STREAMS_PER_TOKEN) that failed: acquire (the stream opened uncounted), renew (retried at the next heartbeat), release (the slot expires by itself)',
  labelNames: ['op'] as const,
  registers: [registry],
});
