/**
 * The three ports of the architecture. Each has an embedded adapter (one process, data folder)
 * and a distributed one (Kafka, Redis, ClickHouse); one contract test suite runs against both.
 */
import type { KindSegment } from '@otm/model';
import type { Envelope, Topic } from './messages.js';

export interface Bus {
  /**
   * Publishes messages; resolves once the bus has durably accepted all of them (Kafka: acks from
   * all in-sync replicas; in-process: the subscribed worker has applied them). Rejects with a
   * retryable OtmServiceError when the bus cannot take them.
   */
  publish(envelopes: readonly Envelope[]): Promise<void>;
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

export interface Subscription {
  /** Stops taking messages, lets the batch in hand finish, commits, leaves. */
  close(): Promise<void>;
}

/**
 * What decides which of two versions of an entity is newer: its `lastModified` (else its
 * `creationDate`, else 0), then the time the ingress accepted it.
 */
export interface VersionStamp {
  /** `lastModified`, else `creationDate`, as ms since the epoch; 0 when neither is given. */
  readonly modified: number;
  /** When the ingress accepted the change that wrote this version (ms since the epoch). */
  readonly acceptedAt: number;
}

/**
 * Bounds of a store's in-process cache of latest versions (the embedded LMDB store's and the Redis
 * store's): at most this many documents, this many bytes of them, none larger than the last.
 */
export const LATEST_CACHE_BOUNDS = { max: 10_000, maxSize: 16 * 1024 * 1024, maxEntrySize: 256 * 1024 } as const;

/** One stored version of a document: an entity, or one lifecycle of an action or event. */
export interface StoredDocument {
  readonly kind: KindSegment;
  readonly key: string;
  /** 0 when the document has no lifecycle, else 1 (requested) to 5 (realized). */
  readonly lifecycleRank: number;
  /** The document as JSON text, exactly as it will be answered. */
  readonly json: string;
  /** The same text as UTF-8 bytes, when at hand (read as bytes, kept in a cache, or received as bytes): answered or written as they are. */
  readonly bytes?: Buffer;
  /** The same document as a value, for adapters that index its fields (not kept by them). */
  readonly value?: Readonly<Record<string, unknown>>;
  /** Present on versions read from or written to the entity store. */
  readonly stamp?: VersionStamp;
}

/** An entity that holds another inline (at any depth), so that changes to the other reach it. */
export interface HolderRef {
  readonly kind: KindSegment;
  readonly key: string;
  readonly lifecycleRank: number;
}

/** A change waiting for the entity it targets (an update or association event that came first). */
export interface PendingEffect {
  /** Order of application: the ingress acceptance time, then the event's key. */
  readonly acceptedAt: number;
  readonly eventKey: string;
  /** The event document. */
  readonly event: Readonly<Record<string, unknown>>;
}

/**
 * A unit of work on the entity store: reads see the unit's own earlier writes; all writes are
 * committed together, durably, when the unit's function resolves (and not at all if it throws).
 */
export interface EntityTx {
  get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined>;
  put(tenant: string, doc: StoredDocument & { readonly stamp: VersionStamp }): void;
  /** Removes every lifecycle version of the entity. */
  delete(tenant: string, kind: KindSegment, key: string): void;
  holders(tenant: string, kind: KindSegment, key: string): Promise<HolderRef[]>;
  addHolder(tenant: string, child: { kind: KindSegment; key: string }, holder: HolderRef): void;
  removeHolder(tenant: string, child: { kind: KindSegment; key: string }, holder: HolderRef): void;
  pending(tenant: string, kind: KindSegment, key: string): Promise<PendingEffect[]>;
  addPending(tenant: string, kind: KindSegment, key: string, effect: PendingEffect): void;
  removePending(tenant: string, kind: KindSegment, key: string, effect: PendingEffect): void;
}

export type DocumentWrite =
  | { readonly op: 'put'; readonly tenant: string; readonly doc: StoredDocument }
  | { readonly op: 'delete'; readonly tenant: string; readonly kind: KindSegment; readonly key: string };

export interface DocumentReader {
  /** The version of the given lifecycle rank, or else the latest (highest rank) version. */
  get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined>;
}

/** Static entities, update and association events, actions (every version by lifecycle). */
export interface EntityStore extends DocumentReader {
  /** Runs `work` as one unit (see EntityTx); resolves with its result once the writes are durable. */
  unit<T>(work: (tx: EntityTx) => Promise<T>): Promise<T>;
  ready(): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * High-volume telemetry events (location, sensor, emission, fuel, weigh, start/stop): the design's
 * "event store" holds these only. Events that change entities (updateEvent, association events)
 * are kept by the EntityStore beside the entities they change, since applying them needs those
 * entities in the same unit of work (`messages.ts` TELEMETRY_EVENT_TYPES draws the line).
 */
export interface EventStore extends DocumentReader {
  /** Stores the events (deduplicated by tenant, id and lifecycle); resolves when durable. */
  write(writes: readonly DocumentWrite[]): Promise<void>;
  /**
   * True when writes are applied in the order `write` was called, also when it is called again
   * before earlier calls resolved (the next write may start while the last one is still being
   * made durable). The telemetry worker is then handed the next batches of a partition early.
   */
  readonly appliesInCallOrder?: boolean;
  ready(): Promise<boolean>;
  close(): Promise<void>;
}
