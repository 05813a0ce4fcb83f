/**
 * Overlapped telemetry writes: the bus hands the telemetry worker the next batches of a partition
 * while the store write holding the last ones is still being made durable, so that they go into
 * the next write at once. Only for an event store that applies its writes in the order they were
 * called, also when called again before earlier calls resolved (`EventStore.appliesInCallOrder`:
 * the embedded event log, whose LMDB transactions commit in the order they were started); a batch
 * is still acknowledged only once the write that holds it is durable.
 *
 * What it saves: the wait for each write's flush to disk before the next batch is taken, which
 * bounds ingest by the disk's latency rather than its throughput.
 */
import type { EventStore, SubscribeOptions } from '@otm/core';

/** Batches of one partition the telemetry worker may hold at once when its store keeps write order. */
export const TELEMETRY_PIPELINE = 64;

/** How many batches of a partition the telemetry worker may hold at once on `store` (`SubscribeOptions.pipeline`). */
export function telemetryPipeline(store: EventStore): number {
  return store.appliesInCallOrder === true ? TELEMETRY_PIPELINE : 1;
}

/** The telemetry worker's subscription on `store`: `concurrency` partitions at once, fetched ahead, overlapped where it can. */
export function telemetrySubscription(store: EventStore, concurrency = 1): SubscribeOptions {
  return { concurrency, fetchAhead: true, pipeline: telemetryPipeline(store) };
}
