/**
 * The change feed of the embedded stores, in LMDB: `feed` holds `tenant|<seq as 16 digits>` ->
 * the change (below), `feed-meta` the last sequence number given (`feed-seq`) and, for each tenant,
 * the highest one retention removed (`feed-floor|<tenant>`).
 *
 * A change is stored as one line of JSON, `{"at","op","kind","key","rank"}`, and for a put whose
 * document the feed keeps (the entity store's) the document's text after a newline, as written:
 * not escaped into a JSON string (twice the work both ways, and a larger value), and answered as it
 * is. Telemetry events are not kept (the event log has them): the query reads the version.
 *
 * Why one sequence for the whole environment, given inside the transaction that writes the entry
 * (by the entity store's units, the event log's index commits and the telemetry worker's side
 * effects, which all share one `FeedSeq`): lmdb-js runs the callbacks of its write transactions one
 * after the other on this thread, in the order they commit, so numbers given there increase in
 * commit order and a reader never sees n+1 before n. A number given in a transaction that then
 * failed is never used again (a gap, which readers do not mind). `feed-seq` is written in every
 * such transaction, so that the sequence never goes back, also once retention removed everything.
 *
 * Retention: entries older than `retentionMs` are removed by `sweep` (at open, then every minute), a
 * bounded number per transaction; a read that resumes before what was removed is answered with
 * `cursorExpired` (410), rather than silently skipping changes.
 */
import { cursorExpired, invalidDocument, type FeedEntry, type FeedPage, type FeedRead } from '@otm/core';
import type { KindSegment } from '@otm/model';
import type { RootDatabase } from 'lmdb';
import { END, SEP } from './keys.js';
import type { Str } from './lists.js';

const SEQ_KEY = 'feed-seq';
const floorKey = (tenant: string) => `feed-floor${SEP}${tenant}`;
const pad16 = (n: number) => String(n).padStart(16, '0');
const CURSOR = /^\d{1,16}$/;

/** At most this many entries are looked at by one read, per entry asked for (kinds not asked for are skipped). */
const SCAN_FACTOR = 20;
/** Entries removed by retention in one transaction. */
const SWEEP_CHUNK = 5_000;

/** A retention in words. */
const span = (ms: number) =>
  ms >= 86_400_000
    ? `${+(ms / 86_400_000).toFixed(1)} days`
    : ms >= 3_600_000
      ? `${+(ms / 3_600_000).toFixed(1)} hours`
      : `${Math.round(ms / 60_000)} minutes`;

/** One change as the writers give it. */
export interface FeedChange {
  readonly at: number;
  readonly op: 'put' | 'delete';
  readonly kind: KindSegment;
  readonly key: string;
  readonly rank: number;
  /** The document written (a put of the entity store). */
  readonly doc?: string;
}

/**
 * A change's JSON line, `{"at","op","kind","key","rank"}`, as JSON.stringify makes it, made by
 * hand: only the key can need escaping (kinds are names, the others numbers).
 */
const headText = (at: number, op: 'put' | 'delete', kind: KindSegment, key: string, rank: number): string =>
  `{"at":${at},"op":"${op}","kind":"${kind}","key":${JSON.stringify(key)},"rank":${rank}}`;

/** The sequence numbers of the feed: one counter for the whole environment. */
export class FeedSeq {
  /** The last number given. */
  last: number;
  /** The last number written to `feed-seq`. */
  private saved: number;

  constructor(
    private readonly feed: Str,
    private readonly meta: Str,
  ) {
    this.saved = Number(meta.get(SEQ_KEY) ?? 0);
    this.last = Math.max(this.saved, largestStored(feed));
  }

  /**
   * Inside a write transaction: stores `change` in the tenant's feed under the next number. Call
   * `save` before the transaction ends.
   */
  append(tenant: string, change: FeedChange): void {
    const head = headText(change.at, change.op, change.kind, change.key, change.rank);
    void this.feed.put(`${tenant}${SEP}${pad16(++this.last)}`, change.doc === undefined ? head : `${head}\n${change.doc}`);
  }

  /**
   * `append` of a change without a document (the event log's, one an event), from its parts: no
   * object made for it.
   */
  appendChange(tenant: string, at: number, op: 'put' | 'delete', kind: KindSegment, key: string, rank: number): void {
    void this.feed.put(`${tenant}${SEP}${pad16(++this.last)}`, headText(at, op, kind, key, rank));
  }

  /** Inside a write transaction, after `append`s: records the last number given. */
  save(): void {
    if (this.last === this.saved) return;
    void this.meta.put(SEQ_KEY, String(this.last));
    this.saved = this.last;
  }
}

/** The first key of a range, if any. */
function firstKey(db: Str, range: { start: string; end?: string; reverse?: boolean }): string | undefined {
  for (const k of db.getKeys({ ...range, limit: 1 })) return k;
  return undefined;
}

/** The tenants that have entries, by a skip over the keys (one read a tenant). */
function tenantsOf(feed: Str): string[] {
  const out: string[] = [];
  for (let start = ''; ;) {
    const first = firstKey(feed, { start });
    if (first === undefined) return out;
    const tenant = first.slice(0, first.lastIndexOf(SEP));
    out.push(tenant);
    start = `${tenant}${SEP}${END}`;
  }
}

/** The largest sequence number stored, over every tenant (one reverse read a tenant). */
function largestStored(feed: Str): number {
  let max = 0;
  for (const tenant of tenantsOf(feed)) {
    const last = firstKey(feed, { start: `${tenant}${SEP}${END}`, end: `${tenant}${SEP}`, reverse: true });
    if (last !== undefined) max = Math.max(max, Number(last.slice(tenant.length + 1)));
  }
  return max;
}

/** The first line of a stored change: its JSON, without the document. */
const headOf = (raw: string): FeedChange => {
  const nl = raw.indexOf('\n');
  return JSON.parse(nl < 0 ? raw : raw.slice(0, nl)) as FeedChange;
};

function decode(seq: string, raw: string): FeedEntry {
  const nl = raw.indexOf('\n');
  const head = headOf(raw);
  return {
    cursor: String(Number(seq)),
    at: head.at,
    op: head.op,
    kind: head.kind,
    key: head.key,
    ...(head.op === 'put' ? { lifecycleRank: head.rank } : {}),
    ...(nl < 0 ? {} : { doc: raw.slice(nl + 1) }),
  };
}

export class LmdbFeed {
  constructor(
    private readonly root: RootDatabase,
    private readonly feed: Str,
    private readonly meta: Str,
    private readonly retentionMs: number,
  ) {}

  /**
   * The tenant's end (ChangeFeed.head): the number of its newest entry, by one reverse read; with
   * none, its floor (what retention removed last; a read after it is not expired), else 0.
   */
  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async head(tenant: string): Promise<string> {
    const last = firstKey(this.feed, { start: `${tenant}${SEP}${END}`, end: `${tenant}${SEP}`, reverse: true });
    if (last !== undefined) return String(Number(last.slice(tenant.length + 1)));
    return String(Number(this.meta.get(floorKey(tenant)) ?? 0));
  }

  /**
   * Entries after `after` in order, of the kinds asked for. At most SCAN_FACTOR × limit entries are
   * looked at, so that a read through a long run of other kinds ends; `next` is the last one looked
   * at, from which the client goes on.
   */
  // eslint-disable-next-line @typescript-eslint/require-await -- async: a bad cursor rejects, as the port says, rather than throws
  async read(q: FeedRead): Promise<FeedPage> {
    let after = 0;
    if (q.after !== undefined) {
      if (!CURSOR.test(q.after)) {
        throw invalidDocument([{ type: 'invalidField', field: 'cursor', message: 'not a cursor of this feed: give one it answered' }]);
      }
      after = Number(q.after);
      const floor = Number(this.meta.get(floorKey(q.tenant)) ?? 0);
      if (after < floor) {
        throw cursorExpired(
          `the feed keeps changes for ${span(this.retentionMs)}; some after this cursor are no longer kept: read it again from its start (without a cursor)`,
        );
      }
    }
    const entries: FeedEntry[] = [];
    if (q.limit <= 0) return { entries };
    const base = `${q.tenant}${SEP}`;
    let next: string | undefined;
    for (const { key, value } of this.feed.getRange({ start: base + pad16(after + 1), end: base + END, limit: q.limit * SCAN_FACTOR })) {
      const seq = key.slice(base.length);
      next = String(Number(seq));
      const e = decode(seq, value);
      if (q.kinds !== undefined && !q.kinds.has(e.kind)) continue;
      entries.push(e);
      if (entries.length >= q.limit) break;
    }
    return next === undefined ? { entries } : { entries, next };
  }

  /**
   * Removes the entries older than `now - retentionMs`, SWEEP_CHUNK in a transaction, and records
   * for each tenant the highest number removed (reads resuming before it are told so). Entries are
   * in the order they were written, so a tenant's scan stops at its first entry young enough.
   * Returns how many it removed.
   */
  async sweep(now = Date.now()): Promise<number> {
    const cutoff = now - this.retentionMs;
    let removed = 0;
    for (const tenant of tenantsOf(this.feed)) {
      const base = `${tenant}${SEP}`;
      for (;;) {
        const old: string[] = [];
        for (const { key, value } of this.feed.getRange({ start: base, end: base + END, limit: SWEEP_CHUNK })) {
          if (headOf(value).at >= cutoff) break;
          old.push(key);
        }
        if (old.length === 0) break;
        const floor = Number(old[old.length - 1]!.slice(base.length));
        await this.root.childTransaction(() => {
          for (const k of old) void this.feed.remove(k);
          const was = Number(this.meta.get(floorKey(tenant)) ?? 0);
          if (floor > was) void this.meta.put(floorKey(tenant), String(floor));
        });
        removed += old.length;
        if (old.length < SWEEP_CHUNK) break;
      }
    }
    return removed;
  }
}
