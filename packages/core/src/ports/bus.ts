/** The bus between the ingress and the workers (in-process, or Kafka). */
import type { Envelope, Topic } from '../messages.js';
import type { Monitored } from '../health.js';

export interface Bus {
  /**
   * Publishes messages; resolves once the bus has durably accepted all of them (Kafka: acks from
   * all in-sync replicas; in-process: the subscribed worker has applied them). Rejects with a
   * retryable OtmServiceError when the bus cannot take them.
   */
  publish(envelopes: readonly Envelope[]): Promise<void>;
  /**
   * `publish`, answered message by message once every one is settled: undefined for a message
   * applied, the failure of one that was not (a bulk request then answers which documents were
   * stored). Only a bus that can tell (in-process); absent, a failure of `publish` counts for all.
   */
  publishEach?(envelopes: readonly Envelope[]): Promise<Array<unknown>>;
  /**
   * Calls `handler` with batches of messages of `topic`, in publish order per key. A batch is
   * committed only when `handler` resolves; when it rejects, the batch is handed back.
   */
  subscribe(
    topic: Topic,
    group: string,
    handler: (batch: readonly Envelope[]) => Promise<void>,
    options?: SubscribeOptions,
  ): Promise<Subscription>;
  ready(): Promise<boolean>;
  close(): Promise<void>;
}

export interface SubscribeOptions {
  /**
   * Batches of different partitions handed to the handler at once (default 1). Only for handlers
   * that are safe to run concurrently, such as the telemetry worker's.
   */
  readonly concurrency?: number;
  /**
   * Let the bus fetch the next batches of a partition while the handler still works on earlier
   * ones (still applied one after the other, and committed only once applied). For handlers whose
   * writes take long, such as the telemetry worker's ClickHouse inserts.
   */
  readonly fetchAhead?: boolean;
  /**
   * Batches of one partition the handler may hold at once (default 1: the next batch is handed
   * over once the previous call settled). More only for handlers that apply batches in the order
   * they were handed over even when called again before earlier calls settled, such as the
   * telemetry worker on the embedded event store, whose LMDB transactions commit in the order they
   * were started. A bus may hand over fewer (the Kafka bus: one at a time).
   */
  readonly pipeline?: number;
}

/**
 * A consumer of a topic for a group. Its status (core/health.ts) says whether it is consuming: a
 * consumer that failed is started again by the bus, and is down until it consumes again.
 */
export interface Subscription extends Monitored {
  /** Stops taking messages, lets the batch in hand finish, commits, leaves. */
  close(): Promise<void>;
}
