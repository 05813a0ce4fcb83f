/**
 * The event log's index in LMDB: event key (`tenant|kind|key|rank`) -> where the event's document
 * lies in the log (`Pos`: segment, generation, offset, length; a value of 16 bytes).
 *
 * Invariants:
 * - An index change is made only after its record is durable in the log. Changes are gathered
 *   for INDEX_DELAY_MS (or up to INDEX_BATCH of them) into one LMDB commit that no answer waits
 *   for; until it commits, reads find the new positions in `recent`, which they look at first.
 * - The checkpoint (how far into the log the index has been applied, `seg:offset`) is written in
 *   the same LMDB transaction as the changes it covers: committed together or not at all. A start
 *   replays the log from it (recovery.ts), so an index behind the log catches up.
 * - Once a commit failed, the checkpoint is never moved past the changes it lost: every later
 *   batch writes the last committed checkpoint again, so that the next start replays them.
 */
import type { Database } from 'lmdb';
import { AdapterError } from '@otm/core';
import { RANKS_DOWN } from '../keys.js';
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
 * together: one LMDB commit, with its own sync, for many log syncs.
 */
const INDEX_DELAY_MS = 10;
const INDEX_BATCH = 20_000;

/** An index value: u32 segment, u32 offset, u32 length, u32 generation. */
export const encodePos = (p: Pos): Buffer => {
  const b = Buffer.allocUnsafe(16);
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
  constructor(
    readonly k: string,
    /** Where the JSON starts in its record buffer. */
    readonly at: number,
    readonly len: number,
  ) {}
}

/** One index change: a put's entry, or a delete's prefix. */
export type IndexOp = IndexEntry | { readonly prefix: string };

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
  /** Set when LMDB failed to commit index changes: the checkpoint then stays where it was. */
  private indexFailed = false;
  /** The checkpoint LMDB last committed (at start: where recovery left the index). */
  private committedCheckpoint = '';

  constructor(
    private readonly index: Database<Buffer, string>,
    private readonly meta: Database<string, string>,
    private readonly warn: ((message: string) => void) | undefined,
  ) {}

  /** Where recovery left the index: the log is applied up to `checkpoint`, durably. */
  start(checkpoint: string): void {
    this.committedCheckpoint = this.checkpoint = checkpoint;
  }

  /** Whether a commit of the index failed in this process. */
  get failed(): boolean {
    return this.indexFailed;
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
  delete(prefix: string): void {
    for (const r of RANKS_DOWN) {
      // A deletion waiting for the index: a new object each time, so that each is told apart in `recent`.
      const e = new IndexEntry(prefix + r, 0, -1);
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
    this.applyIndex();
    await this.indexing;
  }

  /**
   * Hands the queued index changes to LMDB with the checkpoint after them, in one event-loop turn
   * and so in one LMDB transaction (lmdb-js's event-turn batching): committed together or not at
   * all. Once committed, drops them from `recent` unless a later change replaced them there.
   * Should a commit fail, its changes stay in `recent` (still read from there), and from then on
   * every batch writes the checkpoint of the last committed one instead of moving it, so that
   * the next start replays the log from before the lost changes (a later batch may already have
   * committed a checkpoint past them: the next write puts it back).
   */
  private applyIndex(): void {
    clearTimeout(this.indexTimer);
    this.indexTimer = undefined;
    const todo = this.indexQueue;
    if (todo.length === 0) return;
    this.indexQueue = [];
    for (const e of todo) void (e.len < 0 ? this.index.remove(e.k) : this.index.put(e.k, encodePos(e)));
    const checkpoint = this.indexFailed ? this.committedCheckpoint : this.checkpoint;
    const settled: Promise<void> = this.meta
      .put(CHECKPOINT, checkpoint)
      .then(
        () => {
          for (const e of todo) if (this.recent.get(e.k) === e) this.recent.delete(e.k);
          eventIndexBehind.set(this.recent.size);
          this.committedCheckpoint = checkpoint;
        },
        (e: unknown) => {
          if (this.indexFailed) return;
          this.indexFailed = true;
          eventIndexFailed.set(1);
          this.warn?.(
            `event index: LMDB did not commit (${(e as Error)?.message ?? e}); the events stay readable, and the next start indexes them again from the log`,
          );
          this.meta.put(CHECKPOINT, this.committedCheckpoint).catch(() => {});
        },
      )
      .finally(() => {
        if (this.indexing === settled) this.indexing = undefined;
      });
    this.indexing = settled;
  }
}
