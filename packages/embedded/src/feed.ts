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
 * every LMDB write costs CPU, so it stores each tenant's changes of one transaction as one
 * entry, a block: `@<at> <count>`, then for each change, in order, a line
 * `\n<op><rank><kind>|<key>` (op `p` or `d`, rank one digit), under the number of its last change;
 * its changes have the `count` numbers up to that one. A put whose place in the event log is known
 * (every put of the log's index commits) is a line `\nq<rank><seg>.<gen>.<offset>.<length>:<kind>|<key>`
 * (the numbers in base 36): the query reads the document that put wrote from there, without a
 * lookup (FeedEntry.logged). A read resuming inside a block skips the
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
import { cursorExpired, invalidDocument, type FeedEntry, type FeedPage, type FeedRead, type LogPosition } from '@otm/core';
import type { KindSegment } from '@otm/model';
import type { RootDatabase } from 'lmdb';
import { END, SEP } from './keys.js';
import type { Str } from './lists.js';
import { holdTurn } from './disk.js';

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
  | {
      readonly op: 'put';
      readonly kind: KindSegment;
      readonly key: string;
      readonly rank: number;
      readonly where?: LogPosition | undefined;
    }
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
      const w = c.op === 'put' ? c.where : undefined;
      lines +=
        w === undefined
          ? `\n${c.op === 'put' ? 'p' : 'd'}${rank}${c.kind}${SEP}${c.key}`
          : `\nq${rank}${w.seg.toString(36)}.${w.gen.toString(36)}.${w.off.toString(36)}.${w.len.toString(36)}:${c.kind}${SEP}${c.key}`;
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

/**
 * The head of a stored change as `headText` writes it, `{"at":N,"op":"O","kind":"K","key":"...","rank":R}`,
 * read without JSON.parse (the entity store's changes are read one entry each, and the parse cost
 * more than the rest of the read); undefined for a line of any other shape, which JSON.parse then
 * reads. The key's text needs no unescaping unless it holds a backslash: JSON.stringify escapes
 * every quote of it, so the members' separators are never found inside it.
 */
function quickHead(raw: string, end: number): FeedChange | undefined {
  if (!raw.startsWith('{"at":') || raw.charCodeAt(end - 1) !== 0x7d) return undefined;
  const opAt = raw.indexOf(',"op":"', 6);
  const kindAt = opAt < 0 ? -1 : raw.indexOf('","kind":"', opAt + 7);
  const keyAt = kindAt < 0 ? -1 : raw.indexOf('","key":"', kindAt + 10);
  const rankAt = keyAt < 0 ? -1 : raw.lastIndexOf(',"rank":', end);
  if (rankAt <= keyAt + 9 || raw.charCodeAt(rankAt - 1) !== 0x22) return undefined;
  const op = raw.slice(opAt + 7, kindAt);
  const at = Number(raw.slice(6, opAt));
  const rank = Number(raw.slice(rankAt + 8, end - 1));
  if ((op !== 'put' && op !== 'delete') || !Number.isFinite(at) || !Number.isInteger(rank)) return undefined;
  const quoted = raw.slice(keyAt + 8, rankAt);
  const key = quoted.includes('\\') ? (JSON.parse(quoted) as string) : quoted.slice(1, -1);
  return { at, op, kind: raw.slice(kindAt + 10, keyAt) as KindSegment, key, rank };
}

/** A stored change (not a block) with its cursor, the number it is stored under. */
function decode(cursor: string, raw: string): FeedEntry {
  const nl = raw.indexOf('\n');
  const head = quickHead(raw, nl < 0 ? raw.length : nl) ?? headOf(raw);
  const e: { -readonly [K in keyof FeedEntry]: FeedEntry[K] } = { cursor, at: head.at, op: head.op, kind: head.kind, key: head.key };
  if (head.op === 'put') e.lifecycleRank = head.rank;
  if (nl >= 0) e.doc = raw.slice(nl + 1);
  return e;
}

/** The place in the log a block's line gives, `<seg>.<gen>.<offset>.<length>` in base 36 from `start` to `end`. */
function placeOf(value: string, start: number, end: number): LogPosition {
  // Read in place, digit by digit (no slices): a page of the feed reads thousands.
  const n = [0, 0, 0, 0];
  let i = 0;
  for (let at = start; at < end; at++) {
    const c = value.charCodeAt(at);
    if (c === 0x2e /* . */) i++;
    else n[i] = n[i]! * 36 + (c <= 0x39 ? c - 0x30 : c - 0x57);
  }
  return { seg: n[0]!, gen: n[1]!, off: n[2]!, len: n[3]! };
}

/** What a read has gathered so far (LmdbFeed.read, scanBlock). */
interface Scan {
  readonly after: number;
  readonly kinds: ReadonlySet<KindSegment> | undefined;
  readonly limit: number;
  readonly entries: FeedEntry[];
  /** Changes that may still be looked at. */
  budget: number;
  /** The number of the last change looked at. */
  last: number;
  /** The kind of the last change of a block looked at. */
  kind: string;
}

/**
 * Where a read stopped inside a block: the block (its last number, its first, its text) and the
 * line of the first change it did not look at (`n`, starting at offset `nl`).
 */
interface BlockMark {
  readonly seq: number;
  readonly first: number;
  readonly value: string;
  readonly n: number;
  readonly nl: number;
}

/** Most tenants whose last block read is kept (`LmdbFeed.marks`). */
const MARKS_MAX = 16;

export class LmdbFeed {
  /** By tenant: the block its last read stopped inside of, and where (see `scanBlock`). */
  private readonly marks = new Map<string, BlockMark>();

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
    const { limit } = q;
    // Every entry holds at least one change: no more entries than changes are ever needed.
    const scan: Scan = { after, kinds: q.kinds, limit, entries, budget: limit * SCAN_FACTOR, last: -1, kind: '' };
    let from = after + 1;
    // The block the tenant's last read stopped inside of, when this read resumes in it: its text is
    // at hand, and where that read stopped. Blocks never change; one that retention removed since
    // is not resumed in, as it ends at or before the floor, which a cursor must be past (checked
    // above); a read without a cursor starts from the oldest change kept, looked up.
    const mark = q.after === undefined ? undefined : this.marks.get(q.tenant);
    if (mark !== undefined && mark.first <= from && from <= mark.seq) {
      const resume = mark.n <= from;
      this.scanBlock(scan, q.tenant, mark.seq, mark.value, resume ? mark.n : mark.first, resume ? mark.nl : mark.value.indexOf('\n'));
      from = mark.seq + 1;
    }
    if (entries.length < limit && scan.budget > 0) {
      for (const { key, value } of this.feed.getRange({ start: base + pad16(from), end: base + END, limit: scan.budget })) {
        const seq = Number(key.slice(base.length));
        if (value.charCodeAt(0) !== BLOCK_CODE) {
          scan.last = seq;
          scan.budget--;
          const e = decode(String(seq), value);
          if (scan.kinds === undefined || scan.kinds.has(e.kind)) entries.push(e);
        } else {
          // A block: `@<at> <count>`, then a line a change; its last change is `seq`.
          const space = value.indexOf(' ');
          const nl = value.indexOf('\n', space);
          this.scanBlock(scan, q.tenant, seq, value, seq - Number(value.slice(space + 1, nl < 0 ? value.length : nl)) + 1, nl);
        }
        if (entries.length >= limit || scan.budget <= 0) break;
      }
    }
    return scan.last < 0 ? { entries } : { entries, next: String(scan.last) };
  }

  /**
   * Looks at the changes of a block (its last number `seq`) from the line that starts at `nl`
   * (change number `n`) on, those after the read's cursor, until the read is full or its budget
   * spent. Stopped with changes of the block left, it marks where, so that the tenant's next read,
   * most often resuming there (the next page), goes on from it rather than reading the block and
   * skipping its lines again: a block holds up to an index commit's changes (thousands), and a
   * page a fraction of them.
   */
  private scanBlock(s: Scan, tenant: string, seq: number, value: string, n: number, nl: number): void {
    const { after, kinds, limit, entries } = s;
    const at = Number(value.slice(1, value.indexOf(' ')));
    for (; nl >= 0 && s.budget > 0 && entries.length < limit; n++) {
      const end = value.indexOf('\n', nl + 1);
      if (n > after) {
        s.last = n;
        s.budget--;
        const op = value.charCodeAt(nl + 1);
        // A put with its place in the log: the kind starts after the place's `:`.
        const from = op === 0x71 /* 'q' */ ? value.indexOf(':', nl + 3) + 1 : nl + 3;
        const bar = value.indexOf(SEP, from);
        // The kind of the change before it, most often: that string again rather than a new one.
        let kind = s.kind;
        if (bar - from !== kind.length || !value.startsWith(kind, from)) s.kind = kind = value.slice(from, bar);
        if (kinds === undefined || kinds.has(kind as KindSegment)) {
          const cursor = String(n);
          const k = value.slice(bar + 1, end < 0 ? value.length : end);
          const rank = value.charCodeAt(nl + 2) - 0x30;
          entries.push(
            op === 0x71
              ? { cursor, at, op: 'put', kind: kind as KindSegment, key: k, lifecycleRank: rank, logged: placeOf(value, nl + 3, from - 1) }
              : op === 0x70 // 'p'
                ? { cursor, at, op: 'put', kind: kind as KindSegment, key: k, lifecycleRank: rank }
                : { cursor, at, op: 'delete', kind: kind as KindSegment, key: k },
          );
        }
      }
      nl = end;
    }
    if (nl >= 0) {
      this.marks.delete(tenant);
      this.marks.set(tenant, { seq, first: seq - countOf(value) + 1, value, n, nl });
      // The tenants read last are kept: each mark holds its block's text (~50 bytes a change).
      for (const t of this.marks.keys()) {
        if (this.marks.size <= MARKS_MAX) break;
        this.marks.delete(t);
      }
    } else if (this.marks.get(tenant)?.seq === seq) this.marks.delete(tenant);
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
        const swept = this.root.childTransaction(() => {
          for (const k of old) void this.feed.remove(k);
          const was = Number(this.meta.get(floorKey(tenant)) ?? 0);
          if (floor > was) void this.meta.put(floorKey(tenant), String(floor));
        });
        holdTurn(this.root); // a failed commit leaves no rejection unhandled (disk.ts)
        await swept;
        removed += changes;
        if (old.length < SWEEP_CHUNK) break;
      }
    }
    return removed;
  }
}
