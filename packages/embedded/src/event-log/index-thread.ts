/**
 * The event log's index thread, as the event loop sees it: the index commits (index-writer.ts)
 * made by a worker thread of their own (index-thread-entry.ts), so that the event loop, which
 * answers every request, does not spend their CPU. An index commit of a location event writes its
 * index entry, its list entries (also its track's) and its record, and with its transaction's others
 * a feed block and the latest positions (effects.ts): about 5 µs of the event loop an event when it
 * ran there, a seventh of a PUT's (`npm run bench:profile`); handing a batch over costs about a
 * tenth of that (structured clone, ~0.8 µs an entry).
 *
 * The thread opens the same LMDB environment (lmdb-js shares one environment between the threads
 * of a process) and runs each task in a synchronous write transaction of its own, in the order
 * sent; LMDB runs it between the event loop's own write transactions (the entity store's), one at a
 * time. What it writes is exactly what the event loop wrote before: the same modules (effects.ts,
 * feed.ts, positions.ts), the feed numbers taken from `feed-seq` inside the transaction
 * (`FeedSeq.begin`). The index's other writer, compaction, hands its moves here too, so that a
 * move and a later put of the same event commit in the order they were made.
 *
 * Once a task is answered the event loop's read transaction is renewed: lmdb-js keeps one for a
 * turn or more, and a read must see what the thread committed before the event loop drops it from
 * the changes it keeps in memory (`IndexWriter.recent`).
 */
import { Worker } from 'node:worker_threads';
import type { RootDatabase } from 'lmdb';
import type { Fix } from '../positions.js';
import type { EventChange } from './effects.js';
import type { Pos } from './pos.js';

/** The module the thread runs: the built one, also when this module runs from source (tests). */
const THREAD_MODULE = new URL('../../dist/event-log/index-thread-entry.js', import.meta.url);

/** What the thread is started with: how to open the environment, and whether it records the feed and positions. */
export interface IndexThreadData {
  readonly path: string;
  readonly maxDbs: number;
  readonly mapSize: number | undefined;
  readonly telemetry: boolean;
}

/** One index change as sent: a put's entry (`len` -1: a deletion of that key) and what it records besides. */
export interface SentEntry extends Pos {
  readonly k: string;
  readonly change?: EventChange | undefined;
}

export type IndexTask =
  | { readonly t: 'commit'; readonly id: number; readonly entries: readonly SentEntry[]; readonly checkpoint: string }
  | { readonly t: 'move'; readonly id: number; readonly moves: ReadonlyArray<{ readonly k: string; readonly pos: Pos }> }
  | { readonly t: 'checkpoint'; readonly id: number; readonly checkpoint: string }
  | { readonly t: 'close' };

export type IndexReply =
  | { readonly id: number; readonly ok: true; readonly stored: Fix[] }
  | { readonly id: number; readonly ok: false; readonly message: string };

/** What the index writer and compaction hand their LMDB writes to (the thread; a test's stand-in). */
export interface IndexCommits {
  /**
   * Writes the entries (puts and deletions), what they record besides (effects.ts) and the
   * checkpoint, in one transaction; resolves with the latest positions it stored.
   */
  commit(entries: readonly SentEntry[], checkpoint: string): Promise<Fix[]>;
  /** Moves entries to new positions (compaction), in one transaction. */
  move(moves: ReadonlyArray<{ k: string; pos: Pos }>): Promise<void>;
  /** Writes the checkpoint alone (after a failed commit: the next start replays from there). */
  writeCheckpoint(checkpoint: string): Promise<void>;
  /** Once every task sent is answered: stops the thread. */
  close(): Promise<void>;
}

type Waiting = { resolve: (stored: Fix[]) => void; reject: (e: Error) => void };

export class IndexThread implements IndexCommits {
  private readonly worker: Worker;
  private readonly waiting = new Map<number, Waiting>();
  private nextId = 1;
  /** Why the thread can take no more tasks (it failed to start, or ended). */
  private dead: Error | undefined;
  private readonly exited: Promise<void>;

  constructor(
    private readonly root: RootDatabase,
    telemetry: boolean,
  ) {
    // lmdb-js's root carries the options it was opened with (its typings do not say so).
    const opened = root as unknown as { path: string; maxDbs?: number; mapSize?: number };
    const data: IndexThreadData = { path: opened.path, maxDbs: opened.maxDbs ?? 32, mapSize: opened.mapSize, telemetry };
    this.worker = new Worker(THREAD_MODULE, { workerData: data, name: 'otm event index' });
    // Held only while a task is out: an idle thread does not keep the process alive.
    this.worker.unref();
    this.worker.on('message', (r: IndexReply) => this.answered(r));
    this.worker.on('error', (e) => this.fail(e));
    this.exited = new Promise((resolve) =>
      this.worker.once('exit', (code) => {
        this.fail(new Error(`the event index thread ended (exit code ${code})`));
        resolve();
      }),
    );
  }

  commit(entries: readonly SentEntry[], checkpoint: string): Promise<Fix[]> {
    return this.send((id) => ({ t: 'commit', id, entries, checkpoint }));
  }

  async move(moves: ReadonlyArray<{ k: string; pos: Pos }>): Promise<void> {
    await this.send((id) => ({ t: 'move', id, moves }));
  }

  async writeCheckpoint(checkpoint: string): Promise<void> {
    await this.send((id) => ({ t: 'checkpoint', id, checkpoint }));
  }

  async close(): Promise<void> {
    if (this.dead === undefined) {
      // Tasks are answered in order: the thread closes its environment after the last one.
      this.worker.ref();
      this.worker.postMessage({ t: 'close' } satisfies IndexTask);
    }
    await this.exited;
  }

  private send(task: (id: number) => IndexTask): Promise<Fix[]> {
    if (this.dead !== undefined) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise<Fix[]>((resolve, reject) => {
      if (this.waiting.size === 0) this.worker.ref();
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage(task(id));
    });
  }

  private answered(r: IndexReply): void {
    const w = this.waiting.get(r.id);
    if (w === undefined) return;
    this.waiting.delete(r.id);
    if (this.waiting.size === 0) this.worker.unref();
    if (!r.ok) return w.reject(new Error(r.message));
    // Reads from here on see what the thread committed (see the module comment).
    this.root.resetReadTxn();
    w.resolve(r.stored);
  }

  private fail(e: Error): void {
    this.dead ??= e;
    for (const w of this.waiting.values()) w.reject(this.dead);
    this.waiting.clear();
  }
}
