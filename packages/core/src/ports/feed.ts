/** The change feed of a tenant, and what the entity export reads of it and writes. */
import type { KindSegment } from '@otm/model';

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
