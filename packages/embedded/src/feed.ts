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
 * Blocks. The event log's index commit stores thousands of changes without documents at once, and
 * an LMDB write costs a µs or more, so it stores each tenant's changes of one transaction as one
 * entry, a block: `@<at> <count>`, then for each change, in order, a line
 * `\n<op><rank><kind>|<key>` (op `p` or `d`, rank one digit), under the number of its last change;
 * its changes have the `count` numbers up to that one. A read resuming inside a block skips the
 * changes up to its cursor; retention removes a block whole (its changes share their time). The
 * key of a block is a number like any other, so heads, floors and the largest number work the same
 * on both. The answers are those of one entry a change: the same cursors, order and members.
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

/** What a block keeps of a change (effects.ts's EventChange is one). */
export type BlockChange =
  | { readonly op: 'put'; readonly kind: KindSegment; readonly key: string; readonly rank: number }
  | { readonly op: 'delete'; readonly kind: KindSegment; readonly key: string };

/** The first character of a block's value (a change's is `{`). */
const BLOCK = '@';
const BLOCK_CODE = 0x40;
/** A block holds a change whose key has no line break and whose rank is one digit. */
const fitsBlock = (key: string, rank: number): boolean => !key.includes('\n') && rank >= 0 && rank <= 9 && Number.isInteger(rank);

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
   * `append` of a change without a document (the event log's), from its parts: no object made for
   * it.
   */
  appendChange(tenant: string, at: number, op: 'put' | 'delete', kind: KindSegment, key: string, rank: number): void {
    void this.feed.put(`${tenant}${SEP}${pad16(++this.last)}`, headText(at, op, kind, key, rank));
  }

  /**
   * Inside a write transaction: stores the tenant's changes without documents (the event log's),
   * in order, as one block (above) under the next numbers; a change a block cannot hold (a key with
   * a line break) as an entry of its own, in its place. Call `save` before the transaction ends.
   */
  appendChanges(tenant: string, at: number, changes: readonly BlockChange[]): void {
    let lines = '';
    let count = 0;
    const flush = () => {
      if (count === 0) return;
      this.last += count;
      void this.feed.put(`${tenant}${SEP}${pad16(this.last)}`, `${BLOCK}${at} ${count}${lines}`);
      lines = '';
      count = 0;
    };
    for (const c of changes) {
      const rank = c.op === 'put' ? c.rank : 0;
      if (!fitsBlock(c.key, rank)) {
        flush();
        this.appendChange(tenant, at, c.op, c.kind, c.key, rank);
        continue;
      }
      lines += `\n${c.op === 'put' ? 'p' : 'd'}${rank}${c.kind}${SEP}${c.key}`;
      count++;
    }
    flush();
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

/** How many changes a stored entry holds: a block's count, else one. */
function countOf(raw: string): number {
  if (raw.charCodeAt(0) !== BLOCK_CODE) return 1;
  const space = raw.indexOf(' ');
  const nl = raw.indexOf('\n', space);
  return Number(raw.slice(space + 1, nl < 0 ? raw.length : nl));
}

/** When the changes of a stored entry were made: a change's `at`, or a block's. */
const atOf = (raw: string): number => (raw.charCodeAt(0) === BLOCK_CODE ? Number(raw.slice(1, raw.indexOf(' '))) : headOf(raw).at);

/** A stored change (not a block) with its cursor, the number it is stored under. */
function decode(cursor: string, raw: string): FeedEntry {
  const nl = raw.indexOf('\n');
  const head = headOf(raw);
  return {
    cursor,
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
    const { kinds, limit } = q;
    /** Changes that may still be looked at. */
    let budget = limit * SCAN_FACTOR;
    /** The number of the last change looked at. */
    let last = -1;
    // Every entry holds at least one change: no more entries than changes are ever needed.
    for (const { key, value } of this.feed.getRange({ start: base + pad16(after + 1), end: base + END, limit: budget })) {
      const seq = Number(key.slice(base.length));
      if (value.charCodeAt(0) !== BLOCK_CODE) {
        last = seq;
        budget--;
        const e = decode(String(seq), value);
        if (kinds === undefined || kinds.has(e.kind)) entries.push(e);
        if (entries.length >= limit || budget <= 0) break;
        continue;
      }
      // A block: `@<at> <count>`, then a line a change; its last change is `seq`.
      const space = value.indexOf(' ');
      let nl = value.indexOf('\n', space);
      const at = Number(value.slice(1, space));
      let n = seq - Number(value.slice(space + 1, nl < 0 ? value.length : nl)) + 1;
      for (; nl >= 0 && budget > 0 && entries.length < limit; n++) {
        const end = value.indexOf('\n', nl + 1);
        if (n > after) {
          last = n;
          budget--;
          const bar = value.indexOf(SEP, nl + 3);
          const kind = value.slice(nl + 3, bar) as KindSegment;
          if (kinds === undefined || kinds.has(kind)) {
            const cursor = String(n);
            const k = value.slice(bar + 1, end < 0 ? value.length : end);
            entries.push(
              value.charCodeAt(nl + 1) === 0x70 // 'p'
                ? { cursor, at, op: 'put', kind, key: k, lifecycleRank: value.charCodeAt(nl + 2) - 0x30 }
                : { cursor, at, op: 'delete', kind, key: k },
            );
          }
        }
        nl = end;
      }
      if (entries.length >= limit || budget <= 0) break;
    }
    return last < 0 ? { entries } : { entries, next: String(last) };
  }

  /**
   * Removes the entries older than `now - retentionMs`, SWEEP_CHUNK in a transaction, and records
   * for each tenant the highest number removed (reads resuming before it are told so). Entries are
   * in the order they were written, so a tenant's scan stops at its first entry young enough.
   * Returns how many changes it removed.
   */
  async sweep(now = Date.now()): Promise<number> {
    const cutoff = now - this.retentionMs;
    let removed = 0;
    for (const tenant of tenantsOf(this.feed)) {
      const base = `${tenant}${SEP}`;
      for (;;) {
        const old: string[] = [];
        let changes = 0;
        for (const { key, value } of this.feed.getRange({ start: base, end: base + END, limit: SWEEP_CHUNK })) {
          if (atOf(value) >= cutoff) break;
          old.push(key);
          changes += countOf(value);
        }
        if (old.length === 0) break;
        const floor = Number(old[old.length - 1]!.slice(base.length));
        await this.root.childTransaction(() => {
          for (const k of old) void this.feed.remove(k);
          const was = Number(this.meta.get(floorKey(tenant)) ?? 0);
          if (floor > was) void this.meta.put(floorKey(tenant), String(floor));
        });
        removed += changes;
        if (old.length < SWEEP_CHUNK) break;
      }
    }
    return removed;
  }
}
