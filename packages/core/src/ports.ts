/**
 * The three ports of the architecture. Each has an embedded adapter (one process, data folder)
 * and a distributed one (Kafka, Redis, ClickHouse); one contract test suite runs against both.
 */
import type { KindSegment } from '@otm/model';
import type { EventFacts, TrackFix } from './event-facts.js';
import type { ListRecord } from './facets.js';
import type { Envelope, Topic } from './messages.js';
import type { Monitored } from './health.js';

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
  /**
   * An event's facts (event-facts.ts `eventFacts`), when read before it got here (by a bulk
   * request's checking thread): the event store lists it by them without parsing it.
   */
  readonly facts?: EventFacts;
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
  /** The list records (facets.ts) of these entities, in the same order; undefined where none. */
  listRecords(
    tenant: string,
    refs: ReadonlyArray<{ readonly kind: KindSegment; readonly key: string }>,
  ): Promise<Array<ListRecord | undefined>>;
  /**
   * Lists the entity under `next`'s facets at `next.at` (undefined: no longer listed) instead of
   * under `previous`'s (as `listRecords` gave it; undefined: not listed before), and keeps `next`.
   */
  setListRecord(tenant: string, kind: KindSegment, key: string, next: ListRecord | undefined, previous: ListRecord | undefined): void;
  /** A list as committed before this unit (Lister.list); the unit's own writes are not in it. */
  list(scan: ListScan): Promise<ListPosition[]>;
}

export type DocumentWrite =
  | { readonly op: 'put'; readonly tenant: string; readonly doc: StoredDocument }
  | { readonly op: 'delete'; readonly tenant: string; readonly kind: KindSegment; readonly key: string };

export interface DocumentReader {
  /** The version of the given lifecycle rank, or else the latest (highest rank) version. */
  get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined>;
}

/** Where an entry sits in a list: the time of the entity's last change (ms since the epoch), then its key. */
export interface ListPosition {
  readonly at: number;
  readonly key: string;
}

export interface ListScan {
  readonly tenant: string;
  readonly kind: KindSegment;
  /** The facet (facets.ts) every entry must have; `''`: every entity of the kind. */
  readonly facet: string;
  /** Only entries strictly after this position. */
  readonly after?: ListPosition;
  /** Only entries with `at >= since` (ms). */
  readonly since?: number;
  /** Only entries with `at < before` (ms). */
  readonly before?: number;
  readonly limit: number;
}

/** Lists of stored documents in keyset order (`at`, then key), by facet. */
export interface Lister {
  list(scan: ListScan): Promise<ListPosition[]>;
}

/** Static entities, update and association events, actions (every version by lifecycle). */
export interface EntityStore extends DocumentReader, Lister {
  /**
   * The tenant's change feed: every put and delete of a unit, written in the unit's own commit, and
   * the puts of telemetry events (recorded by the embedded event store in its own index commit, or
   * by the telemetry worker through `telemetry`).
   */
  readonly feed: ChangeFeed;
  /** Latest positions of vehicles. */
  readonly positions: PositionReader;
  /** Records the feed entries and positions of stored telemetry events (see EventStore.keepsTelemetryEffects). */
  readonly telemetry: TelemetrySideEffects;
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
export interface EventStore extends DocumentReader, Lister, TrackReader {
  /** Stores the events (deduplicated by tenant, id and lifecycle); resolves when durable. */
  write(writes: readonly DocumentWrite[]): Promise<void>;
  /**
   * True when writes are applied in the order `write` was called, also when it is called again
   * before earlier calls resolved (the next write may start while the last one is still being
   * made durable). The telemetry worker is then handed the next batches of a partition early.
   */
  readonly appliesInCallOrder?: boolean;
  /**
   * True when the store itself records the feed entries and latest positions of the events it
   * stores, in the entity store's feed (the embedded event log beside the embedded entity store,
   * in its index commit); else the telemetry worker records them through `EntityStore.telemetry`
   * once `write` resolved.
   */
  readonly keepsTelemetryEffects?: boolean;
  ready(): Promise<boolean>;
  close(): Promise<void>;
}

/** One change of the feed: a put of one version, or the delete of an entity (all its versions). */
export interface FeedEntry {
  /** Opaque to the query: where the feed is resumed after this change. */
  readonly cursor: string;
  /** When the change was applied (ms since the epoch). */
  readonly at: number;
  readonly op: 'put' | 'delete';
  readonly kind: KindSegment;
  readonly key: string;
  /** The version's lifecycle rank (a put). */
  readonly lifecycleRank?: number;
  /** The document written (a put), when the feed keeps it; else the query reads that version. */
  readonly doc?: string | Buffer;
  /**
   * Where the embedded event log wrote the put's document (its store's feed blocks keep it): the
   * query reads the document there, without looking the version up, while that file of the log is
   * current (`ManyDocumentsReader.documentsOf`).
   */
  readonly logged?: LogPosition;
}

/** A document's place in the embedded event log: segment, the generation of its file, byte offset and length. */
export interface LogPosition {
  readonly seg: number;
  readonly gen: number;
  readonly off: number;
  readonly len: number;
}

export interface FeedRead {
  readonly tenant: string;
  /** Resume after this cursor (a FeedEntry's or FeedPage's); absent: from the oldest change kept. */
  readonly after?: string;
  /** Only changes of these kinds; absent: all. */
  readonly kinds?: ReadonlySet<KindSegment>;
  readonly limit: number;
}

export interface FeedPage {
  readonly entries: FeedEntry[];
  /**
   * Where the next read starts: after the last change looked at (which may be past the last entry
   * returned, when changes of other kinds were skipped); absent when nothing was looked at.
   */
  readonly next?: string;
}

/**
 * The tenant's changes in the order they were applied, kept for a retention period. `read`
 * rejects with `cursorExpired` (410) when `after` names a change older than what is kept, and with
 * `invalidDocument` (400) naming `cursor` when it is not a cursor of this feed.
 */
export interface ChangeFeed {
  read(q: FeedRead): Promise<FeedPage>;
  /**
   * The tenant's end of the feed: a cursor after which `read` gives only the changes applied after
   * this call (every change answered before it is at or before it). The cursor of the newest
   * change kept; of an empty feed, its floor (the newest change retention removed), else the
   * start. One short read: what the stream (`GET /api/v5/stream`) starts "now" from.
   */
  head(tenant: string): Promise<string>;
}

/** One location event of a vehicle's track, with its document. */
export interface TrackPoint {
  /** Event time (ms since the epoch). */
  readonly time: number;
  readonly key: string;
  readonly lifecycleRank: number;
  readonly lat: number;
  readonly lon: number;
  readonly speedKmh: number | null;
  readonly heading: number | null;
  /** The event as GET answers it. */
  readonly doc: string | Buffer;
}

export interface TrackScan {
  readonly tenant: string;
  /** The vehicle's storage key. */
  readonly vehicle: string;
  /** Event time window, ms since the epoch: from inclusive, to exclusive. */
  readonly from: number;
  readonly to: number;
  /** Only points strictly after (time, key). */
  readonly after?: { readonly time: number; readonly key: string };
  /** At most this many points; absent: all of the window. */
  readonly limit?: number;
}

/**
 * Vehicles' tracks: their `locationUpdateEvent`s (event-facts.ts `trackFix`) in event time order
 * (then key), each event once, in its highest lifecycle version. Yielded as read, never gathered.
 */
export interface TrackReader {
  track(scan: TrackScan): AsyncIterable<TrackPoint>;
}

/** The newest position of a vehicle (by event time; the later key on a tie): its track fix and the event's key. */
export interface LatestPosition extends TrackFix {
  /** The location event's storage key. */
  readonly eventKey: string;
}

/** Latest positions, kept up to date as location events are stored; never computed from the events. */
export interface PositionReader {
  /**
   * The tenant's latest positions in vehicle key order. The array and its items may be shared with
   * later reads (an adapter keeps them in memory): callers must not change them.
   */
  positions(tenant: string): Promise<readonly LatestPosition[]>;
}

/**
 * Where the telemetry worker of the distributed deployment records what the event store does not
 * keep itself: the feed entries and latest positions of the events it stored (the embedded event
 * store keeps both in its own index).
 */
export interface TelemetrySideEffects {
  /** Appends puts of telemetry events to their tenants' feeds, in the order given. */
  appendFeed(
    entries: ReadonlyArray<{
      readonly tenant: string;
      readonly kind: KindSegment;
      readonly key: string;
      readonly lifecycleRank: number;
      readonly op: 'put' | 'delete';
    }>,
  ): Promise<void>;
  /** Moves each vehicle's latest position forward (a fix older than the one kept changes nothing). */
  updatePositions(fixes: ReadonlyArray<LatestPosition & { readonly tenant: string }>): Promise<void>;
}

/**
 * One change of an entity store's feed as the entity export hands it on to analytics (the
 * telemetry worker's exporter, services/worker/src/entity-export.ts): a put of a version, with its
 * document, or a delete of every version of an entity.
 */
export interface EntityChange {
  readonly tenant: string;
  readonly op: 'put' | 'delete';
  readonly kind: KindSegment;
  readonly key: string;
  /** A put's lifecycle rank; 0 for a delete (which removes every rank). */
  readonly lifecycleRank: number;
  /** When the change was applied (ms since the epoch). */
  readonly at: number;
  /** Orders the changes of one entity: a later change always has a higher version (fits UInt64). */
  readonly version: bigint;
  /** A put's document as GET answers it. */
  readonly json?: string;
}

/**
 * What an entity store offers the entity export beyond its change feed (the Redis store): the
 * tenants that have a feed, the export's own cursor per tenant, a number that orders feed cursors,
 * and a lease so that one exporter at a time works while several telemetry workers run.
 */
export interface FeedExport {
  /** The tenants whose change feed may hold changes of entities. */
  tenants(): Promise<string[]>;
  /** The cursor saved after the last change exported; undefined when none was saved. */
  cursor(tenant: string): Promise<string | undefined>;
  /** Saves the cursor; undefined forgets it (the next read starts at the oldest change kept). */
  saveCursor(tenant: string, cursor: string | undefined): Promise<void>;
  /** A number that grows with the feed's order (a later cursor, a higher number). */
  versionOf(cursor: string): bigint;
  /** Takes or renews the export's lease for `owner` for `ms`; false while another owner holds it. */
  lease(owner: string, ms: number): Promise<boolean>;
  /** Gives the lease up, if `owner` holds it. */
  release(owner: string): Promise<void>;
}

/** Where the entity export writes (the ClickHouse event store: table otm_entities). */
export interface EntityChangeSink {
  /** Stores the changes, at once (one insert); resolves with the rows written once they are durable. */
  writeEntityChanges(changes: readonly EntityChange[]): Promise<number>;
}

/** Which changes a webhook subscription takes besides its kinds; ids as storage keys. */
export interface WebhookFilter {
  /** Changes whose document names this vehicle: the vehicle itself, and documents with it as their `vehicle`. */
  readonly vehicle?: string;
  /** The trip itself, and events linked to it. */
  readonly trip?: string;
  /** Events of this eventType only. */
  readonly eventType?: string;
}

/**
 * A webhook subscription (POST /api/v5/subscriptions): where a tenant's changes go, which ones,
 * signed with which secret, and how far they went.
 */
export interface WebhookSubscription {
  readonly id: string;
  readonly tenant: string;
  readonly url: string;
  /** Only changes of these kinds; undefined: every kind. */
  readonly kinds?: readonly KindSegment[];
  readonly filter: WebhookFilter;
  readonly secret: string;
  readonly state: 'active' | 'paused';
  /** Why it was paused (the dispatcher's last failure once the retry window was over). */
  readonly reason?: string;
  /** The feed cursor of the last change delivered (or passed over); undefined: from the oldest change kept. */
  readonly cursor?: string;
  /** When it was made (ms since the epoch). */
  readonly createdAt: number;
  /**
   * Grows with every change of the cursor or state that is not the dispatcher's own moving on
   * (replay, resume, pause): a dispatcher's `advance` names the revision it read, so that it never
   * overwrites a replay that came meanwhile.
   */
  readonly rev: number;
  /** When the first failed attempt of the batch now being retried was made (ms); undefined while deliveries succeed. */
  readonly failingSince?: number;
}

/** One attempt at delivering a batch of changes to a subscription's URL. */
export interface DeliveryAttempt {
  /** The batch's id (the `OTM-Delivery` header); the same for every attempt at the same batch in one dispatcher. */
  readonly id: string;
  /** When the attempt started (ms since the epoch). */
  readonly at: number;
  /** 1 for the first attempt at the batch, then 2, 3, ... */
  readonly attempt: number;
  /** Changes in the batch, and the cursors of its first and last. */
  readonly changes: number;
  readonly firstCursor: string;
  readonly lastCursor: string;
  /** `delivered`: a 2xx answer; `failed`: another answer, a timeout or a connection error; `refused`: the target's address is not allowed. */
  readonly outcome: 'delivered' | 'failed' | 'refused';
  /** The answer's HTTP status, when one came. */
  readonly status?: number;
  /** What went wrong (no answer, a refused address), in words. */
  readonly error?: string;
  readonly durationMs: number;
}

/**
 * Where webhook subscriptions are kept (the embedded LMDB environment, or Redis), with the recent
 * delivery attempts of each, and the leases that share them among dispatchers. Every change of a
 * subscription is durable when its promise resolves.
 */
export interface SubscriptionStore {
  /**
   * Adds a subscription unless its tenant has `maxPerTenant` already (then false; nothing stored).
   * `id` is new (a random UUID).
   */
  create(sub: WebhookSubscription, maxPerTenant: number): Promise<boolean>;
  get(tenant: string, id: string): Promise<WebhookSubscription | undefined>;
  /** The tenant's subscriptions, oldest first. */
  list(tenant: string): Promise<WebhookSubscription[]>;
  /** Every subscription of every tenant (tenant and id), for the dispatchers. */
  all(): Promise<Array<{ readonly tenant: string; readonly id: string }>>;
  /** Removes the subscription, its deliveries and its lease; false when there was none. */
  delete(tenant: string, id: string): Promise<boolean>;
  /**
   * The dispatcher's moving on: sets the cursor to `to` and forgets `failingSince`, only if the
   * subscription still has revision `rev` and cursor `from` (else false: it was replayed, resumed,
   * paused or deleted meanwhile, and nothing changes).
   */
  advance(tenant: string, id: string, rev: number, from: string | undefined, to: string): Promise<boolean>;
  /** Pauses it with the reason, only if it still has revision `rev` (else false). */
  pause(tenant: string, id: string, rev: number, reason: string): Promise<boolean>;
  /** Makes it active again at the same cursor (forgets `reason` and `failingSince`); undefined when there is none. */
  resume(tenant: string, id: string): Promise<WebhookSubscription | undefined>;
  /** Sets its cursor (back) to `cursor` (forgets `failingSince`); undefined when there is none. */
  replay(tenant: string, id: string, cursor: string): Promise<WebhookSubscription | undefined>;
  /**
   * Records an attempt (the newest `keep` are kept); a failed or refused one also sets
   * `failingSince` to its time unless it is set already. Nothing when the subscription is gone.
   */
  recordDelivery(tenant: string, id: string, attempt: DeliveryAttempt, keep: number): Promise<void>;
  /** The recorded attempts, newest first, at most `limit`. */
  deliveries(tenant: string, id: string, limit: number): Promise<DeliveryAttempt[]>;
  /** Takes or renews the subscription's lease for `owner` for `ms`; false while another owner holds it. */
  lease(tenant: string, id: string, owner: string, ms: number): Promise<boolean>;
  /** Gives the lease up, if `owner` holds it. */
  release(tenant: string, id: string, owner: string): Promise<void>;
  /**
   * Records that dispatcher `owner` is alive for the next `ttlMs`, and answers how many dispatchers
   * are (itself included), so that each takes its share of the subscriptions.
   */
  dispatchers(owner: string, ttlMs: number): Promise<number>;
}

/**
 * An API key made with `otm keys create` (docs/auth.md): the key itself is shown once and never
 * kept; `hash` is its SHA-256 (hex), by which a presented key is looked up.
 */
export interface ApiKeyRecord {
  /** A random UUID: what `otm keys list` shows and `otm keys revoke` takes. */
  readonly id: string;
  readonly name?: string;
  readonly tenant: string;
  readonly scopes: readonly string[];
  readonly hash: string;
  /** ISO 8601 times. */
  readonly createdAt: string;
  readonly expiresAt?: string;
  readonly revokedAt?: string;
}

/** API keys, beside the entity store (the LMDB environment, or Redis). */
export interface ApiKeyStore {
  create(record: ApiKeyRecord): Promise<void>;
  /** The key whose SHA-256 (hex) is `hash`, revoked or not. */
  byHash(hash: string): Promise<ApiKeyRecord | undefined>;
  /** Every key, or a tenant's, oldest first. */
  list(tenant?: string): Promise<ApiKeyRecord[]>;
  /** Marks it revoked at `at` (ISO; kept if it was revoked before); undefined when there is no such key. */
  revoke(id: string, at: string): Promise<ApiKeyRecord | undefined>;
}

/**
 * One open stream (GET /api/v5/stream) as it is counted against its token's OTM_STREAMS_PER_TOKEN.
 */
export interface StreamSlot {
  /**
   * Which token holds it: a reference that is never the token, nor a plain hash of it (query's
   * `StreamTickets.ref`); the slots of a token are counted together, whatever tenant they are for.
   */
  readonly owner: string;
  /** The stream's id, random, unique in the deployment. */
  readonly id: string;
}

/**
 * The slots of open streams, per token: in the process (`MemoryStreamSlots`,
 * packages/embedded/src/stream-slots.ts: the embedded deployment and the default) or in Redis,
 * shared by every query process (`RedisStreamSlots`, packages/distributed/src/redis/stream-slots.ts). A slot is held for a time
 * (`ttlMs`, on the store's clock) and renewed while its stream is open, so that the slots of a
 * process that died free themselves once that time is over; a stream that closes releases its
 * slot at once. Rejects when the store cannot be reached.
 */
export interface StreamSlots {
  /**
   * Takes `slot` for `ttlMs` if its token holds fewer than `limit` slots (expired ones do not
   * count); whether it was taken. A slot already held is renewed, and taken.
   */
  acquire(slot: StreamSlot, limit: number, ttlMs: number): Promise<boolean>;
  /**
   * Holds every one of `slots` for `ttlMs` from now, taking again, without counting, any that
   * expired or went missing meanwhile (a stream let through while the store failed, or one whose
   * renewals could not reach it for a while): a stream that is open holds its slot.
   */
  renew(slots: readonly StreamSlot[], ttlMs: number): Promise<void>;
  /** Frees the slot at once (nothing when it is not held). */
  release(slot: StreamSlot): Promise<void>;
}
