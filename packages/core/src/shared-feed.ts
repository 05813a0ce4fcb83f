/**
 * The one reading of the change feed per tenant: the stream's clients (query's stream reading) and
 * the dispatcher's subscriptions read their tenant's feed through it, each page and each change's
 * document once for all of them, each change a `SharedChange` (feed-change.ts) whose item, event
 * and facts are made once, when first asked for.
 *
 * - The feed is read in pages of `pageSize` changes after a cursor (`FeedSource.feed`), of the
 *   kinds the tenant's readers take (all of them when one takes every kind), with the documents
 *   (`FeedSource.documents`) of the kinds its readers need them of (by default the kinds they
 *   take; the stream's reading takes every change and needs the documents of its clients' kinds).
 *   Should a reader that needs other documents come while they are read, those are read too.
 * - A page is kept (keyed by the cursor it was read after, and by each of its changes' cursors) so
 *   that the other readers that come by read it from memory: a reader whose cursor is the page's
 *   start or one of its changes takes the page's changes after it. A read under way is shared too.
 *   A page is dropped once every reader of the tenant has taken it, or when the pages kept pass
 *   `maxBytes` (the least recently used first); a reader far behind the others then reads on its
 *   own, as it would alone.
 * - `prefetch` starts the read of a page before it is needed (the dispatcher calls it once a POST
 *   is on its way: the next batch is read while the receiver reads the last one).
 * - `readAlone` reads a page now for one reader, neither shared nor kept: a stream catching up,
 *   whose meeting with its tenant's reading needs a read made after it looked.
 *
 * What is read is the same as each reader reading on its own: the feed's changes in its order, a
 * put's document as the feed keeps it or as stored when read. A page read before a change was
 * stored simply ends before it: the change is in the next read, after the page's `next`.
 *
 * It runs nothing of its own: a read that fails rejects to the readers that wait for it (their
 * loops report and retry it, core loops.ts), and is not kept.
 */
import type { KindSegment } from '@otm/model';
import { SharedChange } from './feed-change.js';
import type { ChangeFeed, FeedEntry } from './ports.js';

/** What the feed is read from: the change feed, and the documents of its entries (query's `Finder`). */
export interface FeedSource {
  readonly feed: ChangeFeed;
  /**
   * The documents of feed entries, in their order: a put's document as the feed keeps it, or as
   * stored when read; undefined for a delete, and for the entries `want` leaves out (not read).
   */
  documents(tenant: string, entries: readonly FeedEntry[], want?: (e: FeedEntry) => boolean): Promise<Array<string | Buffer | undefined>>;
}

/** What a read answers: the changes after the cursor asked for, and where the next read starts. */
export interface FeedSlice {
  readonly changes: readonly SharedChange[];
  /** The cursor after the last change looked at; undefined when nothing was. */
  readonly next: string | undefined;
  /** A full page: the feed may hold more at once (else it was at its end when read). */
  readonly more: boolean;
}

interface Page {
  readonly key: string;
  /** The kinds read (undefined: every kind): a reader may take the page if its kinds are among them, */
  readonly kinds: ReadonlySet<KindSegment> | undefined;
  /** and the kinds whose documents it needs among those whose documents were read (undefined: every kind). */
  readonly documentKinds: ReadonlySet<KindSegment> | undefined;
  readonly changes: SharedChange[];
  readonly next: string | undefined;
  readonly full: boolean;
  readonly bytes: number;
  /** When it was read (ms): a page older than `maxAgeMs` is read again rather than used. */
  readonly readAt: number;
  /** The readers that took it. */
  readonly taken: Set<FeedReader>;
  /** Cursor -> index, made when a reader looks for a cursor inside it. */
  index?: Map<string, number>;
}

export interface SharedFeedOptions {
  /** Changes a read takes at most (default 100). */
  readonly pageSize: number;
  /** Most bytes of pages kept over all tenants (default 32 MiB); pages in use are held by their readers anyway. */
  readonly maxBytes: number;
  /** How long a page is used after it was read (ms, default 10 s): a reader that comes later reads again. */
  readonly maxAgeMs: number;
}

export const DEFAULT_SHARED_FEED_OPTIONS: SharedFeedOptions = { pageSize: 100, maxBytes: 32 * 1024 * 1024, maxAgeMs: 10_000 };

const keyOf = (after: string | undefined): string => (after === undefined ? '' : `@${after}`);

const indexOf = (p: Page): Map<string, number> => new Map(p.changes.map((c, i) => [c.entry.cursor, i]));

const covers = (page: ReadonlySet<KindSegment> | undefined, wanted: ReadonlySet<KindSegment> | undefined): boolean => {
  if (page === undefined) return true;
  if (wanted === undefined) return false;
  for (const k of wanted) if (!page.has(k)) return false;
  return true;
};

/** Whether the reader may take the page: it holds the reader's kinds, with the documents the reader needs. */
const fits = (p: Page, r: FeedReader): boolean => covers(p.kinds, r.kinds) && covers(p.documentKinds, r.documentKinds);

/** The pages of every tenant read by one user of the feed (the dispatcher, the stream's hub). */
export class SharedFeed {
  private readonly tenants = new Map<string, TenantFeed>();
  /** Every page kept, least recently used first (a Map keeps insertion order). */
  readonly kept = new Map<Page, TenantFeed>();
  keptBytes = 0;
  /** Reads of the feed made (for tests and the diagnostics): a read shared by several counts once. */
  reads = 0;

  constructor(
    readonly source: FeedSource,
    readonly options: SharedFeedOptions,
  ) {}

  /**
   * A reader of the tenant's feed, taking the changes of `kinds` (undefined: every kind) and
   * needing the documents of `documentKinds` (asked at each read; default: its kinds); `close` it
   * when its loop ends.
   */
  join(
    tenant: string,
    kinds: ReadonlySet<KindSegment> | undefined,
    documentKinds?: () => ReadonlySet<KindSegment> | undefined,
  ): FeedReader {
    let t = this.tenants.get(tenant);
    if (t === undefined) this.tenants.set(tenant, (t = new TenantFeed(tenant, this)));
    const r = new FeedReader(t, kinds, documentKinds);
    t.readers.add(r);
    return r;
  }

  /**
   * A page after `after` read now for one reader alone, neither shared nor kept, with the
   * documents of `documentKinds` (undefined: every kind).
   */
  async readAlone(tenant: string, after: string | undefined, documentKinds: ReadonlySet<KindSegment> | undefined): Promise<FeedSlice> {
    const { source, options } = this;
    this.reads++;
    const page = await source.feed.read({ tenant, limit: options.pageSize, ...(after === undefined ? {} : { after }) });
    const docs = await source.documents(tenant, page.entries, (e) => documentKinds === undefined || documentKinds.has(e.kind));
    return {
      changes: page.entries.map((e, i) => new SharedChange(e, docs[i])),
      next: page.next,
      more: page.entries.length >= options.pageSize,
    };
  }

  /** Tenants with a reader (for tests). */
  get size(): number {
    return this.tenants.size;
  }

  /** The readers of a tenant's feed (for tests). */
  readers(tenant: string): number {
    return this.tenants.get(tenant)?.readers.size ?? 0;
  }

  leave(t: TenantFeed, r: FeedReader): void {
    t.readers.delete(r);
    if (t.readers.size > 0) {
      // Pages only the one that left had still to take may go now.
      for (const p of [...t.pages.values()]) if (!(p instanceof Promise)) t.dropIfTaken(p);
      return;
    }
    for (const p of t.pages.values()) if (!(p instanceof Promise)) this.unkeep(p);
    t.pages.clear();
    if (this.tenants.get(t.tenant) === t) this.tenants.delete(t.tenant);
  }

  keep(t: TenantFeed, p: Page): void {
    this.kept.set(p, t);
    this.keptBytes += p.bytes;
    for (const [oldest, owner] of this.kept) {
      if (this.keptBytes <= this.options.maxBytes) break;
      owner.drop(oldest);
    }
  }

  /** The page was used: it goes to the end of the eviction order. */
  touch(p: Page): void {
    const t = this.kept.get(p);
    if (t === undefined) return;
    this.kept.delete(p);
    this.kept.set(p, t);
  }

  unkeep(p: Page): void {
    if (this.kept.delete(p)) this.keptBytes -= p.bytes;
  }
}

/** One tenant's pages and readers. */
class TenantFeed {
  readonly readers = new Set<FeedReader>();
  /** Pages by the cursor they were read after, or the read under way. */
  readonly pages = new Map<string, Page | Promise<Page>>();

  constructor(
    readonly tenant: string,
    private readonly shared: SharedFeed,
  ) {}

  /** The kinds the tenant's readers take (undefined: every kind). */
  private wanted(): Set<KindSegment> | undefined {
    const kinds = new Set<KindSegment>();
    for (const r of this.readers) {
      if (r.kinds === undefined) return undefined;
      for (const k of r.kinds) kinds.add(k);
    }
    return kinds;
  }

  /** The kinds whose documents the tenant's readers need (undefined: every kind). */
  private wantedDocuments(): Set<KindSegment> | undefined {
    const kinds = new Set<KindSegment>();
    for (const r of this.readers) {
      const mine = r.documentKinds;
      if (mine === undefined) return undefined;
      for (const k of mine) kinds.add(k);
    }
    return kinds;
  }

  /** The changes after `after` of the reader's kinds (and maybe others), with the documents it needs. */
  async read(reader: FeedReader, after: string | undefined): Promise<FeedSlice> {
    const key = keyOf(after);
    for (let round = 0; ; round++) {
      // A read after the same cursor under way: its page, if it has the kinds.
      const under = this.pages.get(key);
      if (under instanceof Promise) {
        const p = await under;
        if (fits(p, reader)) return this.take(reader, p, 0, true);
      }
      const kept = this.kept(reader, key, after);
      if (kept !== undefined) return kept;
      // Other reads of the tenant under way may end up holding the cursor: once they are done, look
      // again (once), so that readers that started apart come to read the same pages.
      const others = [...this.pages.values()].filter((p): p is Promise<Page> => p instanceof Promise);
      if (round === 0 && others.length > 0) {
        await Promise.allSettled(others);
        continue;
      }
      const p = await this.load(key, after);
      if (fits(p, reader)) return this.take(reader, p, 0, true);
      // The reader's kinds grew while the page was read: read again.
    }
  }

  /** What the pages kept hold after `after`, if they do: a page read after it, else the rest of the page holding it. */
  private kept(reader: FeedReader, key: string, after: string | undefined): FeedSlice | undefined {
    const oldest = Date.now() - this.shared.options.maxAgeMs;
    for (const p of [...this.pages.values()]) if (!(p instanceof Promise) && p.readAt < oldest) this.drop(p);
    const found = this.pages.get(key);
    if (found !== undefined && !(found instanceof Promise) && fits(found, reader)) return this.take(reader, found, 0, false);
    if (after === undefined) return undefined;
    for (const p of this.pages.values()) {
      if (p instanceof Promise || !fits(p, reader)) continue;
      const i = (p.index ??= indexOf(p)).get(after);
      if (i === undefined) continue;
      if (i + 1 < p.changes.length) return this.take(reader, p, i + 1, false);
      // What the page looked at after its last change is of other kinds than the reader's.
      if (p.next !== undefined && p.next !== after) return { changes: [], next: p.next, more: true };
    }
    return undefined;
  }

  /**
   * Starts reading the page after `after`, unless what follows it is kept, or a read of the tenant
   * is under way (which may hold it: the reader then reads what it needs when it needs it).
   */
  prefetch(after: string | undefined): void {
    const key = keyOf(after);
    for (const p of this.pages.values()) {
      if (p instanceof Promise || p.key === key) return;
      const i = after === undefined ? undefined : (p.index ??= indexOf(p)).get(after);
      if (i !== undefined && (i + 1 < p.changes.length || p.next !== after)) return;
    }
    this.load(key, after).catch(() => {
      // The reader that needs it reads again (and is told why).
    });
  }

  /**
   * The documents of a page's entries (of `kinds`, undefined: every kind), of the kinds some
   * reader needs them of; those of other kinds too should a reader that needs them come while
   * they are read. With what was read: the kinds whose documents the page holds.
   */
  private async documents(
    entries: readonly FeedEntry[],
    kinds: ReadonlySet<KindSegment> | undefined,
  ): Promise<{ docs: Array<string | Buffer | undefined>; documentKinds: ReadonlySet<KindSegment> | undefined }> {
    const { source } = this.shared;
    let want = this.wantedDocuments();
    // Every entry's document is wanted (the page holds no other kinds): read as they are.
    if (want === undefined || (kinds !== undefined && covers(want, kinds))) {
      return { docs: await source.documents(this.tenant, entries), documentKinds: want };
    }
    const docs = new Array<string | Buffer | undefined>(entries.length);
    const read = new Set<KindSegment>();
    for (;;) {
      const asked = want;
      const got = await source.documents(this.tenant, entries, (e) => !read.has(e.kind) && (asked === undefined || asked.has(e.kind)));
      got.forEach((d, i) => {
        if (d !== undefined) docs[i] = d;
      });
      if (asked === undefined) return { docs, documentKinds: undefined };
      for (const k of asked) read.add(k);
      // Readers came meanwhile: are the documents they need read?
      want = this.wantedDocuments();
      if (want !== undefined && covers(read, want)) return { docs, documentKinds: read };
    }
  }

  /** Reads the page after `after` (shared while under way), and keeps it unless it is empty. */
  private load(key: string, after: string | undefined): Promise<Page> {
    const kinds = this.wanted();
    const { source, options } = this.shared;
    this.shared.reads++;
    const loading = (async (): Promise<Page> => {
      const page = await source.feed.read({
        tenant: this.tenant,
        limit: options.pageSize,
        ...(after === undefined ? {} : { after }),
        ...(kinds === undefined ? {} : { kinds }),
      });
      const { docs, documentKinds } =
        page.entries.length === 0 ? { docs: [], documentKinds: this.wantedDocuments() } : await this.documents(page.entries, kinds);
      let bytes = 0;
      const changes = page.entries.map((e, i) => {
        const c = new SharedChange(e, docs[i]);
        bytes += c.size;
        return c;
      });
      return {
        key,
        kinds,
        documentKinds,
        changes,
        next: page.next,
        full: page.entries.length >= options.pageSize,
        bytes,
        readAt: Date.now(),
        taken: new Set(),
      };
    })();
    const replaced = this.pages.get(key);
    if (replaced !== undefined && !(replaced instanceof Promise)) this.shared.unkeep(replaced);
    this.pages.set(key, loading);
    loading.then(
      (p) => {
        if (this.pages.get(key) !== loading) return;
        // Nothing read (the feed's end): not kept, the next read looks again. A tenant left meanwhile: not kept either.
        if (p.changes.length === 0 || this.readers.size === 0) this.pages.delete(key);
        else {
          this.pages.set(key, p);
          this.shared.keep(this, p);
        }
      },
      () => {
        if (this.pages.get(key) === loading) this.pages.delete(key);
      },
    );
    return loading;
  }

  /**
   * The page's changes from `from` on, for `reader`. A page read by this call says whether the
   * feed may hold more after it; one read earlier says so in any case (more may have come since).
   */
  private take(reader: FeedReader, p: Page, from: number, fresh: boolean): FeedSlice {
    p.taken.add(reader);
    this.shared.touch(p);
    this.dropIfTaken(p);
    return { changes: from === 0 ? p.changes : p.changes.slice(from), next: p.next, more: p.full || (!fresh && p.changes.length > 0) };
  }

  /** Drops the page once every reader of the tenant has taken it. */
  dropIfTaken(p: Page): void {
    for (const r of this.readers) if (!p.taken.has(r)) return;
    this.drop(p);
  }

  drop(p: Page): void {
    if (this.pages.get(p.key) === p) this.pages.delete(p.key);
    this.shared.unkeep(p);
  }
}

/** One reader's reading of its tenant's feed (a subscription's, a tenant's streams'). */
export class FeedReader {
  private closed = false;

  constructor(
    private readonly tenant: TenantFeed,
    /** The kinds it takes (undefined: every kind). */
    public kinds: ReadonlySet<KindSegment> | undefined,
    private readonly documentsOf?: () => ReadonlySet<KindSegment> | undefined,
  ) {}

  /** The kinds whose documents it needs (undefined: every kind): its kinds unless it was told others. */
  get documentKinds(): ReadonlySet<KindSegment> | undefined {
    return this.documentsOf === undefined ? this.kinds : this.documentsOf();
  }

  /** The changes after `after` (of its kinds, and maybe others: check `entry.kind`). */
  read(after: string | undefined): Promise<FeedSlice> {
    return this.tenant.read(this, after);
  }

  /** Starts reading after `after` before it is asked for. */
  prefetch(after: string | undefined): void {
    if (!this.closed) this.tenant.prefetch(after);
  }

  close(shared: SharedFeed): void {
    if (this.closed) return;
    this.closed = true;
    shared.leave(this.tenant, this);
  }
}
