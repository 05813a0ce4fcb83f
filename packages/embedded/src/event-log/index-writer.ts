/**
 * The event log's index in LMDB: event key (`tenant|kind|key|rank`) -> where the event's document
 * lies in the log (`Pos`: segment, generation, offset, length; a value of 16 bytes).
 *
 * Invariants:
 * - An index change is made only after its record is durable in the log. Changes are gathered
 *   for INDEX_DELAY_MS (or up to INDEX_BATCH of them) into LMDB commits that no answer waits
 *   for (of at most INDEX_CHUNK changes each, see `applyIndex`); until they commit, reads find the
 *   new positions in `recent`, which they look at first.
 * - The checkpoint (how far into the log the index has been applied, `seg:offset`) is written in
 *   the same LMDB transaction as the changes it covers: committed together or not at all. A start
 *   replays the log from it (recovery.ts), so an index behind the log catches up. Transactions
 *   commit in the order their changes were queued, which is the order of the log.
 * - A commit that fails (a full disk, an I/O error) is tried again, with backoff, before anything
 *   queued after it (its changes go back to the head of the queue, and stay readable in `recent`
 *   meanwhile); each attempt's failure is logged at most once a while; a lack of room marks
 *   LMDB's write state down (readiness only), any other cause the writer's part (a loop: /healthz
 *   turns red should it never succeed); both are up again at the first commit that succeeds. While a
 *   failed batch waits, the checkpoint is put back to the last one committed before it, so that a
 *   start in between replays its changes; a change a later batch replaced is not written again.
 * - What the store keeps besides the index (effects.ts: the lists of events, which are also the
 *   tracks, and the feed entries and latest positions) is written in the same transaction, from
 *   the changes the entries carry.
 *   That transaction is one callback (lmdb-js's `childTransaction`: all of it or nothing, also when
 *   the callback throws), because feed numbers must be given inside the transaction that writes
 *   them (feed.ts).
 */
import type { Database, RootDatabase } from 'lmdb';
import { AdapterError, PartState, StorageRefused, ThrottledLog, backoffDelay, fileRefusal, reasonOf } from '@otm/core';
import { commitCause, holdTurn, type WriteGate } from '../disk.js';
import { RANKS_DOWN } from '../keys.js';
import type { Fix } from '../positions.js';
import type { EventChange, EventEffects } from './effects.js';
import { eventIndexBehind, eventIndexFailed } from './metrics.js';

/**
 * Where a document lies in the log: segment number, the generation of the segment's file, byte
 * offset and byte length of its JSON.
 */
export interface Pos {
  readonly seg: number;
  readonly gen: number;
  readonly off: number;
  readonly len: number;
}

/** Meta key of how far into the log the index has been applied (`seg:offset`). */
export const CHECKPOINT = 'checkpoint';

/**
 * Index changes are gathered for this long (or up to INDEX_BATCH of them) and handed to LMDB
 * together: one LMDB commit, with its own sync, for many log syncs. No answer waits for it (GET
 * reads `recent`; lists, tracks, the feed and positions make it now: LogEventStore.settled), and
 * the longer it gathers, the fewer pages a commit dirties an event: a vehicle's list entries and
 * its latest position are written where its earlier ones are, so a commit that holds several
 * events of a vehicle writes that page once: less CPU an event than a shorter wait.
 */
const INDEX_DELAY_MS = 50;
const INDEX_BATCH = 20_000;
/**
 * Most changes in one transaction. Its callback runs on the event loop and records each change's
 * list entries besides (effects.ts: four LMDB writes a location event, its index entry included;
 * the feed entries and latest positions once a transaction), so a burst of 20,000 in one callback
 * would hold every answer up for a long while. Fewer a transaction cost more an event: each commit
 * copies and writes again the pages every vehicle's entries end on. This many bounds the hold-up
 * and keeps that cost small.
 */
export const INDEX_CHUNK = 2_500;
/**
 * Most changes in one transaction while a failed commit is being tried again: a full disk that
 * got some room back may have too little for a transaction of INDEX_CHUNK changes (LMDB copies
 * every page it touches), and enough for a tenth of it.
 */
const RETRY_CHUNK = 250;

/**
 * An index value: u32 segment, u32 offset, u32 length, u32 generation. Into `b` when given: only
 * for a put inside a write transaction, where LMDB copies the value at once (lmdb-js writes there
 * and then), so that one buffer serves every put of an index commit.
 */
export const encodePos = (p: Pos, b = Buffer.allocUnsafe(16)): Buffer => {
  b.writeUInt32LE(p.seg, 0);
  b.writeUInt32LE(p.off, 4);
  b.writeUInt32LE(p.len, 8);
  b.writeUInt32LE(p.gen, 12);
  return b;
};
export const decodePos = (b: Buffer): Pos => {
  if (b.length !== 16)
    throw new AdapterError('event-log', `event index: a position of ${b.length} bytes, not 16; the index is damaged`, { retryable: false });
  return { seg: b.readUInt32LE(0), gen: b.readUInt32LE(12), off: b.readUInt32LE(4), len: b.readUInt32LE(8) };
};

/**
 * A put's index entry, one object for the event's whole way through the log: made with its record
 * (its key, where its JSON starts in the record buffer, its length), placed in the log once the
 * record is written (segment, generation, offset: it is then the `Pos` that `recent` maps the key to
 * and the index queue holds), and handed to LMDB as its key and position. One object rather than an
 * index change, a position and a queue entry an event: thousands wait for the index at once, and
 * the collector copies all they hold.
 */
export class IndexEntry implements Pos {
  seg = 0;
  gen = 0;
  off = 0;
  /** What the index commit records besides the entry (effects.ts); on the first entry of a deletion. */
  change: EventChange | undefined = undefined;
  constructor(
    readonly k: string,
    /** Where the JSON starts in its record buffer. */
    readonly at: number,
    readonly len: number,
  ) {}
}

/** Where the index commit encodes its positions (`encodePos`). */
const POS = Buffer.allocUnsafeSlow(16);

/** One index change: a put's entry, or a delete's prefix. */
export type IndexOp = IndexEntry | { readonly prefix: string; change?: EventChange };

export class IndexWriter {
  /**
   * Index changes whose records are durable in the log but that LMDB does not show yet (given to
   * it, or waiting in `indexQueue`); reads look here first. `len` -1: deleted.
   */
  readonly recent = new Map<string, Pos>();
  /** Index changes for LMDB, in order (a deletion: an entry of length -1 for each rank). */
  private indexQueue: IndexEntry[] = [];
  private indexTimer: NodeJS.Timeout | undefined;
  /** The log position up to which `indexQueue` and what went before it cover the log (`seg:offset`). */
  private checkpoint = '';
  /** The last index batch handed to LMDB, until it is committed. */
  private indexing: Promise<void> | undefined;
  /** A batch handed to LMDB whose callback has not run yet: the next waits for it (see `applyIndex`). */
  private handedOver = false;
  /** Changes handed to LMDB so far (for `flush`). */
  private taken = 0;
  /** Failed commits in a row (0: the last one succeeded); while above 0, a failed batch waits to be tried again. */
  private failures = 0;
  /** Commits that succeeded so far: a failure whose cause is known only after a later success is over. */
  private commits = 0;
  /** When the failed batch is tried again. */
  private retryTimer: NodeJS.Timeout | undefined;
  /** The checkpoint LMDB last committed with every change before it (at start: where recovery left the index). */
  private committedCheckpoint = '';
  private readonly failureLog = new ThrottledLog(30_000);
  private stopped = false;
  /** Whether the index commits succeed: down from a failed commit until one succeeds. */
  readonly part = new PartState('event index commits', 'loop');

  constructor(
    private readonly root: RootDatabase,
    private readonly index: Database<Buffer, string>,
    private readonly meta: Database<string, string>,
    private readonly warn: ((message: string) => void) | undefined,
    private readonly effects: EventEffects,
    /** LMDB's write state (disk.ts): told of commits that fail for lack of room, and of those that succeed. */
    private readonly gate?: WriteGate,
  ) {
    gate?.onWritable(() => this.retryNow());
  }

  /** A failed commit waiting for its retry is tried now (LMDB has room again). */
  private retryNow(): void {
    if (this.retryTimer === undefined || this.stopped) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.applyIndex();
  }

  /** Where recovery left the index: the log is applied up to `checkpoint`, durably. */
  start(checkpoint: string): void {
    this.committedCheckpoint = this.checkpoint = checkpoint;
  }

  /** Index changes queued or handed to LMDB and not committed yet. */
  get behind(): number {
    return this.recent.size;
  }

  /** Whether a failed commit of the index waits to be tried again. */
  get retrying(): boolean {
    return this.failures > 0;
  }

  /** No more commits are tried (the store closes). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }

  /** The checkpoint LMDB last committed. */
  get committed(): string {
    return this.committedCheckpoint;
  }

  /** The position the index gives `k`, changes not committed yet included (`len` -1: deleted). */
  lookup(k: string): Pos | undefined {
    const pos = this.recent.get(k);
    if (pos !== undefined) return pos;
    const raw = this.index.get(k);
    return raw === undefined ? undefined : decodePos(raw);
  }

  /** Queues a put whose record is durable in the log (its entry placed): readable from here on. */
  put(e: IndexEntry): void {
    this.recent.set(e.k, e);
    this.indexQueue.push(e);
  }

  /** Queues a deletion whose record is durable in the log: every rank of `prefix` goes. */
  delete(prefix: string, change?: EventChange): void {
    for (const r of RANKS_DOWN) {
      // A deletion waiting for the index: a new object each time, so that each is told apart in `recent`.
      const e = new IndexEntry(prefix + r, 0, -1);
      if (r === RANKS_DOWN[0]) e.change = change;
      this.recent.set(e.k, e);
      this.indexQueue.push(e);
    }
  }

  /** The changes queued so far cover the log up to `checkpoint`: hands them to LMDB, now or soon. */
  covered(checkpoint: string): void {
    this.checkpoint = checkpoint;
    eventIndexBehind.set(this.recent.size);
    if (this.indexQueue.length >= INDEX_BATCH) this.applyIndex();
    else this.indexTimer ??= setTimeout(() => this.applyIndex(), INDEX_DELAY_MS);
  }

  /** Hands what is queued to LMDB now and waits until it is committed (or failed). */
  async flush(): Promise<void> {
    const target = this.taken + this.indexQueue.length;
    for (;;) {
      this.applyIndex();
      const last = this.indexing;
      // Batches commit in order: once the one holding the last change queued now settled, all did.
      if (this.taken >= target || last === undefined) return await last;
      await last;
    }
  }

  /**
   * Hands the queued index changes to LMDB with what they record besides (effects.ts) and the
   * checkpoint after them, in one transaction callback: committed together or not at all. Once
   * committed, drops them from `recent` unless a later change replaced them there.
   * Should a commit fail, its changes stay in `recent` (still read from there), and from then on
   * every batch writes the checkpoint of the last committed one instead of moving it, so that
   * the next start replays the log from before the lost changes (a later batch may already have
   * committed a checkpoint past them: the next write puts it back).
   */
  private applyIndex(): void {
    clearTimeout(this.indexTimer);
    this.indexTimer = undefined;
    // One batch at a time is handed over: the next once the callback of this one has run, in a
    // later turn, so that the callbacks of two batches never run back to back in one turn. After a
    // failure, nothing until the retry is due.
    if (this.handedOver || this.retryTimer !== undefined) return;
    const queued = this.indexQueue;
    if (queued.length === 0) return;
    let todo = queued;
    let covers = this.checkpoint;
    // After a failure (a full disk, most often), smaller transactions: each needs fewer free pages.
    const chunk = this.failures > 0 ? RETRY_CHUNK : INDEX_CHUNK;
    if (queued.length > chunk) {
      // Cut after a put: the log is then covered up to the end of its record (its JSON ends it).
      let cut = chunk;
      while (cut > 0 && queued[cut - 1]!.len < 0) cut--;
      if (cut > 0) {
        const last = queued[cut - 1]!;
        todo = queued.slice(0, cut);
        covers = `${last.seg}:${last.off + last.len}`;
      }
    }
    this.indexQueue = todo === queued ? [] : queued.slice(todo.length);
    this.taken += todo.length;
    this.handedOver = true;
    const next = () => {
      this.handedOver = false;
      if (this.indexQueue.length > 0) {
        clearTimeout(this.indexTimer);
        this.indexTimer = setTimeout(() => this.applyIndex(), 0);
      }
    };
    // A batch handed over after a failure starts with the failed batch's changes (put back at the
    // head of the queue): once it commits, everything before its checkpoint is committed.
    const retry = this.failures > 0;
    const checkpoint = covers;
    let stored: Fix[] = [];
    let ran = false;
    const settled: Promise<void> = this.root
      .childTransaction(() => {
        ran = true;
        next();
        for (const e of todo) {
          // A change that a later one replaced (which a batch handed over before a failure may have
          // committed already) is not written again: its effects are.
          if (retry && this.recent.get(e.k) !== e) continue;
          void (e.len < 0 ? this.index.remove(e.k) : this.index.put(e.k, encodePos(e, POS)));
        }
        stored = this.effects.apply(changesOf(todo));
        void this.meta.put(CHECKPOINT, checkpoint);
      })
      .finally(() => {
        // Settled without its callback having run (LMDB refused the transaction): go on all the same.
        if (!ran) next();
      })
      .then(
        () => {
          // Needed until committed (a failed batch is tried again with them): entries replaced in
          // `recent` stay there a while, their changes need not.
          for (const e of todo) {
            e.change = undefined;
            if (this.recent.get(e.k) === e) this.recent.delete(e.k);
          }
          eventIndexBehind.set(this.recent.size);
          this.commits++;
          this.effects.committed(stored);
          // A batch handed over before a failure that commits after it: its checkpoint is past the
          // failed changes, so it does not count until they commit (the checkpoint was put back).
          if (this.failures > 0 && !retry) return;
          this.committedCheckpoint = checkpoint;
          if (this.failures > 0) {
            this.failures = 0;
            eventIndexFailed.set(0);
            this.warn?.(`event index: LMDB commits again; ${this.recent.size} changes wait for it`);
          }
          this.part.up();
          this.gate?.ok();
        },
        (e: unknown) => this.failed(todo, e),
      )
      .finally(() => {
        if (this.indexing === settled) this.indexing = undefined;
      });
    holdTurn(this.root); // a failed commit leaves no rejection unhandled (disk.ts)
    this.indexing = settled;
  }

  /**
   * A batch that LMDB did not commit: its changes go back to the head of the queue (still read from
   * `recent`), tried again after a backoff; the checkpoint is put back to the last one committed
   * with every change before it, so that a start before they commit replays them.
   */
  private failed(todo: IndexEntry[], err: unknown): Promise<void> {
    this.indexQueue = todo.concat(this.indexQueue);
    this.taken -= todo.length;
    this.failures++;
    eventIndexFailed.set(1);
    this.meta.put(CHECKPOINT, this.committedCheckpoint).catch(() => {});
    holdTurn(this.root);
    // At most 5 s apart (and at once when LMDB's gate opens again): the events wait in memory meanwhile.
    const delay = backoffDelay(this.failures, { initialMs: 500, maxMs: 5_000 });
    if (!this.stopped) {
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        this.applyIndex();
      }, delay);
      this.retryTimer.unref();
    }
    const commitsBefore = this.commits;
    return commitCause(err).then((cause) => {
      // lmdb-js may give the cause only a second later, or never: the retry may have committed
      // meanwhile, and then the failure is over (marking anything down now would stick).
      const over = this.commits !== commitsBefore;
      // A lack of room is LMDB refusing writes (readiness: its gate); anything else, this loop failing.
      const room = () =>
        this.gate === undefined
          ? fileRefusal(cause) !== undefined
          : this.gate.failed(cause, 'an event index commit') instanceof StorageRefused;
      if (!over && !room())
        this.part.down(
          `LMDB did not commit ${todo.length} index changes (${reasonOf(cause)}); tried again with backoff, the events stay readable meanwhile`,
        );
      const { log, skipped } = this.failureLog.take('commit');
      if (log) {
        this.warn?.(
          `event index: LMDB did not commit (${reasonOf(cause)}); ${over ? 'committed since' : `${this.recent.size} changes wait in memory, readable, tried again in ${delay} ms`}${skipped > 0 ? ` (${skipped} more failures since the last line)` : ''}`,
        );
      }
    });
  }
}

/** The changes the entries carry, in order; a put's with where its record went. */
function* changesOf(entries: readonly IndexEntry[]): Generator<EventChange> {
  for (const e of entries) {
    const c = e.change;
    if (c === undefined) continue;
    if (c.op === 'put') c.where = e;
    yield c;
  }
}
