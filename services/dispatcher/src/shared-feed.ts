/**
 * The dispatcher's reading of the change feed, shared by the subscriptions of one tenant (as the
 * stream's `TenantReader` shares it between SSE clients, services/query/src/stream.ts).
 *
 * - The feed is read in pages of `pageSize` changes after a cursor, with their documents (query's
 *   `Finder.documents`), of the kinds the tenant's subscriptions here take (all of them when one
 *   takes every kind). What each change's item starts with (`{"cursor",...}`: the bytes a batch
 *   carries are those of query's `changeItem`) and the facts a filter looks at are made once, when
 *   first asked for, whatever the number of subscriptions; a batch's body is written from them and
 *   the documents' bytes in one buffer, without an item of its own a change.
 * - A page is kept (keyed by the cursor it was read after, and by each of its changes' cursors) so
 *   that the other subscriptions that come by read it from memory: a subscription whose cursor is
 *   the page's start or one of its changes takes the page's changes after it. A read under way is
 *   shared too. A page is dropped once every subscription of the tenant has taken it, or when the
 *   pages kept pass `maxBytes` (the least recently used first); a subscription far behind the
 *   others then reads on its own, as it would alone.
 * - `prefetch` starts the read of a page before it is needed (the dispatcher calls it once a POST
 *   is on its way: the next batch is read while the receiver reads the last one).
 *
 * What is delivered is the same as each subscription reading on its own: the feed's changes in
 * its order, a put's document as the feed keeps it or as stored when read. A page read before a
 * change was stored simply ends before it: the change is in the next read, after the page's `next`.
 */
import type { KindSegment } from '@otm/model';
import { changeFacts, parseChangeDocument, type ChangeFacts, type FeedEntry } from '@otm/core';
import { DOCUMENT_MEMBER, changeHead, type Finder } from '@otm/query';

/** What the dispatcher reads: the change feed and the documents of its entries (query's Finder). */
export type DispatchSource = Pick<Finder, 'feed' | 'documents'>;

/** One change of the feed with its document, read once for every subscription of the tenant. */
export class SharedChange {
  /** Its item up to the document: `{"cursor","op","kind","id","lifecycle"?`, and its length in bytes. */
  private head: string | undefined;
  private headBytes = 0;
  private docBytes = 0;
  private named?: ChangeFacts;

  constructor(
    readonly entry: FeedEntry,
    readonly doc: string | Buffer | undefined,
  ) {}

  private made(): string {
    if (this.head === undefined) {
      // As query's `changeItem` writes it (tested byte for byte against it).
      ({ head: this.head, headBytes: this.headBytes } = changeHead(this.entry));
      const d = this.doc;
      this.docBytes = d === undefined ? 0 : typeof d === 'string' ? Buffer.byteLength(d) : d.length;
    }
    return this.head;
  }

  /** The length in bytes of its item. */
  itemLength(): number {
    this.made();
    return this.headBytes + (this.doc === undefined ? 0 : DOCUMENT_MEMBER.length + this.docBytes) + 1;
  }

  /** Writes its item into `out` at `at` (room for `itemLength()` bytes); answers where it ends. */
  writeItem(out: Buffer, at: number): number {
    let to = at + out.write(this.made(), at, 'utf8');
    const d = this.doc;
    if (d !== undefined) {
      to += DOCUMENT_MEMBER.copy(out, to);
      to += typeof d === 'string' ? out.write(d, to, 'utf8') : d.copy(out, to);
    }
    out[to] = 0x7d; // '}'
    return to + 1;
  }

  /** The change as a batch (and `GET /api/v5/changes`) carries it: `{"cursor",...,"document"?}`. */
  item(): Buffer {
    const out = Buffer.allocUnsafe(this.itemLength());
    this.writeItem(out, 0);
    return out;
  }

  /** What the filters look at (core facets.ts `changeFacts`), the document parsed once. */
  facts(): ChangeFacts {
    const e = this.entry;
    return (this.named ??= changeFacts(e.kind, e.key, e.kind === 'vehicles' ? undefined : parseChangeDocument(this.doc)));
  }

  /** About the bytes it holds (for the bound of what is kept). */
  get size(): number {
    return 300 + (this.doc === undefined ? 0 : this.doc.length);
  }
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
  /** The kinds read (undefined: every kind): a subscription may take the page if its kinds are among them. */
  readonly kinds: ReadonlySet<KindSegment> | undefined;
  readonly changes: SharedChange[];
  readonly next: string | undefined;
  readonly full: boolean;
  readonly bytes: number;
  /** When it was read (ms): a page older than `maxAgeMs` is read again rather than used. */
  readonly readAt: number;
  /** The subscriptions (readers) that took it. */
  readonly taken: Set<FeedReader>;
  /** Cursor -> index, made when a subscription looks for a cursor inside it. */
  index?: Map<string, number>;
}

export interface SharedFeedOptions {
  /** Changes a read takes at most (default 100). */
  readonly pageSize: number;
  /** Most bytes of pages kept over all tenants (default 32 MiB); pages in use are held by their readers anyway. */
  readonly maxBytes: number;
  /** How long a page is used after it was read (ms, default 10 s): a subscription that comes later reads again. */
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

/** The pages of every tenant read by one dispatcher. */
export class SharedFeed {
  private readonly tenants = new Map<string, TenantFeed>();
  /** Every page kept, least recently used first (a Map keeps insertion order). */
  readonly kept = new Map<Page, TenantFeed>();
  keptBytes = 0;
  /** Reads of the feed made (for tests and the diagnostics): a read shared by several counts once. */
  reads = 0;

  constructor(
    readonly source: DispatchSource,
    readonly options: SharedFeedOptions,
  ) {}

  /** A subscription's reader of its tenant's feed; `close` it when the subscription's loop ends. */
  join(tenant: string, kinds: ReadonlySet<KindSegment> | undefined): FeedReader {
    let t = this.tenants.get(tenant);
    if (t === undefined) this.tenants.set(tenant, (t = new TenantFeed(tenant, this)));
    const r = new FeedReader(t, kinds);
    t.readers.add(r);
    return r;
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

  /** The changes after `after` of the kinds `kinds` takes (and maybe others), for `reader`. */
  async read(reader: FeedReader, after: string | undefined, kinds: ReadonlySet<KindSegment> | undefined): Promise<FeedSlice> {
    const key = keyOf(after);
    for (let round = 0; ; round++) {
      // A read after the same cursor under way: its page, if it has the kinds.
      const under = this.pages.get(key);
      if (under instanceof Promise) {
        const p = await under;
        if (covers(p.kinds, kinds)) return this.take(reader, p, 0, true);
      }
      const kept = this.kept(reader, key, after, kinds);
      if (kept !== undefined) return kept;
      // Other reads of the tenant under way may end up holding the cursor: once they are done, look
      // again (once), so that readers that started apart come to read the same pages.
      const others = [...this.pages.values()].filter((p): p is Promise<Page> => p instanceof Promise);
      if (round === 0 && others.length > 0) {
        await Promise.allSettled(others);
        continue;
      }
      return this.take(reader, await this.load(key, after), 0, true);
    }
  }

  /** What the pages kept hold after `after`, if they do: a page read after it, else the rest of the page holding it. */
  private kept(
    reader: FeedReader,
    key: string,
    after: string | undefined,
    kinds: ReadonlySet<KindSegment> | undefined,
  ): FeedSlice | undefined {
    const oldest = Date.now() - this.shared.options.maxAgeMs;
    for (const p of [...this.pages.values()]) if (!(p instanceof Promise) && p.readAt < oldest) this.drop(p);
    const found = this.pages.get(key);
    if (found !== undefined && !(found instanceof Promise) && covers(found.kinds, kinds)) return this.take(reader, found, 0, false);
    if (after === undefined) return undefined;
    for (const p of this.pages.values()) {
      if (p instanceof Promise || !covers(p.kinds, kinds)) continue;
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
      const docs = page.entries.length === 0 ? [] : await source.documents(this.tenant, page.entries);
      let bytes = 0;
      const changes = page.entries.map((e, i) => {
        const c = new SharedChange(e, docs[i]);
        bytes += c.size;
        return c;
      });
      return {
        key,
        kinds,
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

/** One subscription's reading of its tenant's feed. */
export class FeedReader {
  private closed = false;

  constructor(
    private readonly tenant: TenantFeed,
    /** The kinds it takes (undefined: every kind). */
    public kinds: ReadonlySet<KindSegment> | undefined,
  ) {}

  /** The changes after `after` (of its kinds, and maybe others: check `entry.kind`). */
  read(after: string | undefined): Promise<FeedSlice> {
    return this.tenant.read(this, after, this.kinds);
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
