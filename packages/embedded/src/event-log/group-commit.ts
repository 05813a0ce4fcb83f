/**
 * Group commit: the writes that arrive while a log write is under way share the next one, so that
 * under load one durable write (one sync) answers many calls.
 *
 * Invariants:
 * - Calls are queued, and their groups written, in call order: the log holds the records of the
 *   calls in the order they were made.
 * - A call's promise resolves only once the group holding it is durable in the log, and rejects
 *   with the group's failure otherwise; a failed group takes nothing of itself into the log
 *   (segments.ts), and the next group is written after it as usual.
 * - One group is written at a time.
 */
import type { IndexOp } from './index-writer.js';

/** The records of one `write` call, encoded into one buffer, and who waits for them. */
export interface Pending {
  readonly buf: Buffer;
  readonly ops: readonly IndexOp[];
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

export class GroupCommit {
  private queue: Pending[] = [];
  private running: Promise<void> | undefined;

  /** `append` writes one group to the log: durable when it resolves. */
  constructor(private readonly append: (group: readonly Pending[]) => Promise<void>) {}

  /** Queues the records of one call; resolves once they are durable in the log. */
  add(buf: Buffer, ops: readonly IndexOp[]): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ buf, ops, resolve, reject });
      this.running ??= this.drain();
    });
  }

  /** Waits until everything queued is written (or failed). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  /**
   * Writes what is queued, one group at a time: everything queued while a group was being
   * written (O_DSYNC: on the disk when the write returns) forms the next group.
   */
  private async drain(): Promise<void> {
    // `running` is cleared in the same turn as the queue is found empty, so that a write made
    // after that (by a waiter this loop resolved) starts a new loop.
    for (;;) {
      if (this.queue.length === 0) {
        this.running = undefined;
        return;
      }
      const group = this.queue;
      this.queue = [];
      try {
        await this.append(group);
      } catch (e) {
        for (const p of group) p.reject(e);
        continue;
      }
      for (const p of group) p.resolve();
    }
  }
}
