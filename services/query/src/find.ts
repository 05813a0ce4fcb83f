/**
 * Finding documents: lists in keyset order, the change feed, vehicle tracks and latest positions.
 * The stores keep the indexes (facets.ts: entries by facet in order of last change, the feed, the
 * track index, positions); this module turns requests into reads of them and answers in the
 * model's documents, the same over both deployments.
 */
import type { KindSegment } from '@otm/model';
import {
  changeItem,
  facet,
  filterValues,
  isFacetFilter,
  lifecycleRank,
  eventTimeMs,
  type ChangeFeed,
  type DocumentReader,
  type FeedEntry,
  type LatestPosition,
  type ListPosition,
  type LogPosition,
  type Lister,
  type PositionReader,
  type StoredDocument,
  type TrackPoint,
  type TrackReader,
  type FixScan,
  type TrackFixPoint,
} from '@otm/core';
import { decodeCursor, encodeCursor, isPosition, type ListFilters } from './find-params.js';

/**
 * A store that reads the documents of many versions at once (the embedded event log,
 * `LogEventStore.documentsOf`): each what `get` answers, as bytes, in the order asked; one given
 * with where it was `logged` (a feed entry of that log), the document that put wrote.
 */
export interface ManyDocumentsReader {
  documentsOf(
    tenant: string,
    kind: KindSegment,
    versions: ReadonlyArray<{
      readonly key: string;
      readonly lifecycleRank?: number | undefined;
      readonly logged?: LogPosition | undefined;
    }>,
  ): Promise<ReadonlyArray<Buffer | undefined>>;
}

export interface FindDeps {
  readonly entities: DocumentReader & Lister & { readonly feed: ChangeFeed; readonly positions: PositionReader };
  /** `documentsOf` when the store has it (the embedded event log; ClickHouse has not). */
  readonly events: DocumentReader & Lister & TrackReader & Partial<ManyDocumentsReader>;
}

/** A page of documents: their bytes or text as GET answers them, and the cursor of the next page. */
export interface DocumentPage {
  readonly items: ReadonlyArray<string | Buffer>;
  /** The next page's cursor; undefined when this page is the last. */
  readonly next?: string;
}

/** Facets in the order a list prefers to scan by: the most selective first. */
const SCAN_ORDER = ['externalId', 'licensePlate', 'vehicle', 'actor', 'status', 'eventType', 'actionType', 'lifecycle'];
/**
 * Events: by vehicle first, the one facet the event store indexes besides all events (it answers
 * every other facet with all its events, which the query then checks one by one).
 */
const EVENT_SCAN_ORDER = ['vehicle', ...SCAN_ORDER.filter((n) => n !== 'vehicle')];

/** Most index entries one list request looks at before it answers a short page with a `next`. */
const SCAN_BUDGET = 5_000;

type Doc = Record<string, unknown>;

interface Candidate extends ListPosition {
  readonly source: DocumentReader;
}

/** The JSON answer of a page: `{"items":[...],"next":...}`, the items as they are. */
export function pageBody(items: ReadonlyArray<string | Buffer>, next: string | null): Buffer {
  const parts: Buffer[] = [Buffer.from('{"items":[')];
  items.forEach((item, i) => {
    if (i > 0) parts.push(Buffer.from(','));
    parts.push(typeof item === 'string' ? Buffer.from(item) : item);
  });
  parts.push(Buffer.from(`],"next":${JSON.stringify(next)}}`));
  return Buffer.concat(parts);
}

export class Finder {
  constructor(private readonly deps: FindDeps) {}

  /**
   * One page of a kind's list. Entries come from the stores' facet index in keyset order (time of
   * last change, then key) after the cursor; each candidate's document (its latest version, or the
   * asked lifecycle's) is checked against every filter, since an index entry stands for all the
   * entity's versions. Events come from both stores (update and association events are kept with
   * the entities, telemetry in the event store), merged in the same order.
   */
  async list(tenant: string, kind: KindSegment, filters: ListFilters, limit: number, cursor: string | undefined): Promise<DocumentPage> {
    let after: ListPosition | undefined;
    if (cursor !== undefined) {
      const [at, key] = decodeCursor(cursor, isPosition);
      after = { at, key };
    }
    const scanBy = (kind === 'events' ? EVENT_SCAN_ORDER : SCAN_ORDER).find((n) => filters.facets.has(n));
    const scanFacet = scanBy === undefined ? '' : facet(scanBy, filters.facets.get(scanBy)!);
    const lifecycle = filters.facets.get('lifecycle');
    const rank = lifecycle === undefined ? undefined : lifecycleRank(lifecycle);
    const sources: Array<DocumentReader & Lister> = kind === 'events' ? [this.deps.entities, this.deps.events] : [this.deps.entities];
    const checks = [...filters.facets].filter(([n]) => isFacetFilter(n));
    const needsDoc = checks.length > 0 || filters.from !== undefined || filters.to !== undefined;

    const items: Array<string | Buffer> = [];
    let looked = 0;
    for (;;) {
      const want = Math.min(Math.max(limit - items.length, 20) * 2, 1_000);
      const scans = await Promise.all(
        sources.map((s) =>
          s.list({
            tenant,
            kind,
            facet: scanFacet,
            limit: want,
            ...(after ? { after } : {}),
            ...(filters.updatedSince === undefined ? {} : { since: filters.updatedSince }),
            ...(filters.updatedBefore === undefined ? {} : { before: filters.updatedBefore }),
          }),
        ),
      );
      // Merged in keyset order; a source that gave a full batch may have more before the end of
      // another's, so candidates are taken only up to the smallest last entry of the full ones.
      let bound: ListPosition | undefined;
      const merged: Candidate[] = [];
      scans.forEach((entries, i) => {
        // Members named: a spread followed by `source` costs far more in V8 (docs/PERFORMANCE.md, object spreads).
        for (const e of entries) merged.push({ at: e.at, key: e.key, source: sources[i]! });
        const last = entries[entries.length - 1];
        if (entries.length === want && last && (bound === undefined || compare(last, bound) < 0)) bound = last;
      });
      merged.sort(compare);
      const candidates = bound === undefined ? merged : merged.filter((c) => compare(c, bound!) <= 0);
      const exhausted = bound === undefined;

      let i = 0;
      while (i < candidates.length && items.length < limit) {
        const chunk = candidates.slice(i, i + Math.min(limit - items.length, 256));
        const docs = await Promise.all(chunk.map((c) => c.source.get(tenant, kind, c.key, rank)));
        for (let j = 0; j < chunk.length && items.length < limit; j++) {
          i++;
          looked++;
          after = { at: chunk[j]!.at, key: chunk[j]!.key };
          const d = docs[j];
          if (d === undefined) continue; // deleted since it was listed
          if (needsDoc && !matches(kind, parse(d), filters, checks)) continue;
          items.push(d.bytes ?? d.json);
        }
      }
      if (items.length >= limit) {
        // Full: there is a next page unless the index had nothing after the last item.
        const more = i < candidates.length || !exhausted;
        return more ? { items, next: encodeCursor([after!.at, after!.key]) } : { items };
      }
      if (exhausted) return { items };
      if (looked >= SCAN_BUDGET) return { items, next: encodeCursor([after!.at, after!.key]) };
    }
  }

  /** A stored version of a document, from the entity store, else (events) the event store. */
  async version(tenant: string, kind: KindSegment, key: string, rank: number | undefined): Promise<StoredDocument | undefined> {
    return (
      (await this.deps.entities.get(tenant, kind, key, rank)) ??
      (kind === 'events' ? await this.deps.events.get(tenant, kind, key, rank) : undefined)
    );
  }

  /**
   * A page of the change feed as `{"cursor","op","kind","id","lifecycle"?,"document"?}` items. A
   * put's document is the one written when the feed keeps it, else the version as stored now
   * (absent if deleted since).
   */
  async changes(
    tenant: string,
    kinds: ReadonlySet<KindSegment> | undefined,
    limit: number,
    cursor: string | undefined,
  ): Promise<{ items: Buffer[]; next: string | undefined }> {
    const page = await this.deps.entities.feed.read({
      tenant,
      limit,
      ...(cursor === undefined ? {} : { after: cursor }),
      ...(kinds === undefined ? {} : { kinds }),
    });
    const docs = await this.documents(tenant, page.entries);
    const items = page.entries.map((e, i) => changeItem(e, docs[i]));
    return { items, next: page.next ?? cursor };
  }

  /** The tenant's change feed, as the stream (stream.ts) and the dispatcher read it (core shared-feed.ts). */
  get feed(): ChangeFeed {
    return this.deps.entities.feed;
  }

  /**
   * The documents of feed entries, in their order: a put's document as the feed keeps it, or as the
   * embedded event log wrote it (where the entry says it was `logged`, while the log holds it
   * there), else the version as stored now (undefined if deleted since); undefined for a delete,
   * and for the entries `want` leaves out (not read).
   */
  documents(tenant: string, entries: readonly FeedEntry[], want?: (e: FeedEntry) => boolean): Promise<Array<string | Buffer | undefined>> {
    if (this.deps.events.documentsOf !== undefined) return this.documentsTogether(tenant, entries, want);
    return Promise.all(
      entries.map((e) =>
        e.op === 'delete' || e.doc !== undefined || (want !== undefined && !want(e))
          ? Promise.resolve(e.doc)
          : this.version(tenant, e.kind, e.key, e.lifecycleRank).then((d) => d?.bytes ?? d?.json),
      ),
    );
  }

  /**
   * `documents` with an event store that reads many at once: what `version` answers for each, the
   * entity store asked first as there, then the events it does not hold read from the event store
   * together (`documentsOf`: the event log reads a page's documents in a few reads, as bytes),
   * rather than one after the other. A put the event log wrote (`logged`) is read from the log
   * alone: its document is the one that put wrote.
   */
  private async documentsTogether(
    tenant: string,
    entries: readonly FeedEntry[],
    want: ((e: FeedEntry) => boolean) | undefined,
  ): Promise<Array<string | Buffer | undefined>> {
    const out = new Array<string | Buffer | undefined>(entries.length);
    /** The entries read from the event store, and their index. */
    const events: FeedEntry[] = [];
    const eventsAt: number[] = [];
    /** The entries whose document is read, by index, and their versions in the entity store. */
    const read: number[] = [];
    const stored: Array<Promise<StoredDocument | undefined>> = [];
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (e.op === 'delete' || e.doc !== undefined || (want !== undefined && !want(e))) out[i] = e.doc;
      else if (e.logged !== undefined) {
        events.push(e);
        eventsAt.push(i);
      } else {
        read.push(i);
        stored.push(this.deps.entities.get(tenant, e.kind, e.key, e.lifecycleRank));
      }
    }
    const found = read.length === 0 ? [] : await Promise.all(stored);
    for (let j = 0; j < read.length; j++) {
      const d = found[j];
      const i = read[j]!;
      if (d !== undefined) out[i] = d.bytes ?? d.json;
      else if (entries[i]!.kind === 'events') {
        events.push(entries[i]!);
        eventsAt.push(i);
      }
    }
    if (events.length === 0) return out;
    const docs = await this.deps.events.documentsOf!(tenant, 'events', events);
    for (let j = 0; j < eventsAt.length; j++) out[eventsAt[j]!] = docs[j];
    return out;
  }

  /** The vehicle's track points in [from, to) after `after`, at most `limit` (all when absent). */
  track(
    tenant: string,
    vehicle: string,
    from: number,
    to: number,
    after?: { time: number; key: string },
    limit?: number,
  ): AsyncIterable<TrackPoint> {
    return this.deps.events.track({
      tenant,
      vehicle,
      from,
      to,
      ...(after ? { after } : {}),
      ...(limit === undefined ? {} : { limit }),
    });
  }

  /** The vehicle's track points without documents (a vehicle's activity). */
  fixes(scan: FixScan): AsyncIterable<readonly TrackFixPoint[]> {
    return this.deps.events.fixes(scan);
  }

  /** Latest positions inside `bbox`, no older than `notBefore` (ms), by vehicle key (the store's order). */
  async positions(
    tenant: string,
    bbox: readonly [number, number, number, number] | undefined,
    notBefore: number | undefined,
  ): Promise<readonly LatestPosition[]> {
    const all = await this.deps.entities.positions.positions(tenant);
    if (bbox === undefined && notBefore === undefined) return all;
    return all.filter(
      (p) =>
        (notBefore === undefined || p.time >= notBefore) &&
        (bbox === undefined || (p.lon >= bbox[0] && p.lat >= bbox[1] && p.lon <= bbox[2] && p.lat <= bbox[3])),
    );
  }
}

const compare = (a: ListPosition, b: ListPosition): number => a.at - b.at || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

const parse = (d: StoredDocument): Doc => JSON.parse(d.json) as Doc;

function matches(kind: KindSegment, doc: Doc, filters: ListFilters, checks: ReadonlyArray<[string, string]>): boolean {
  for (const [name, value] of checks) if (!filterValues(kind, doc, name).includes(value)) return false;
  if (filters.from !== undefined || filters.to !== undefined) {
    const t = eventTimeMs(doc, NaN);
    if (!Number.isFinite(t)) return false;
    if (filters.from !== undefined && t < filters.from) return false;
    if (filters.to !== undefined && t >= filters.to) return false;
  }
  return true;
}
