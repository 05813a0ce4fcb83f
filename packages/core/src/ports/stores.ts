/**
 * The stores: the entity store with its units of work and lists, the event store of telemetry, and
 * where the telemetry worker records what the event store does not keep itself.
 */
import type { KindSegment } from '@otm/model';
import type { EventFacts } from '../event-facts.js';
import type { ListRecord } from '../facets.js';
import type { ChangeFeed } from './feed.js';
import type { TrackReader, LatestPosition, PositionReader } from './tracks.js';

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
