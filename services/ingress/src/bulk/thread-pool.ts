/**
 * Where bulk bodies are checked. Parsing, validating and encoding thousands of documents is most
 * of what a bulk request costs, and on the event loop it holds up every other request; so bodies
 * of at least `minBytes` go to a pool of worker threads (piscina), which answer with the checked
 * items as text (check-body.ts). Smaller bodies, and every body when `threads` is 0, are checked on
 * the event loop: a thread hop costs more than it saves for a few documents.
 */
import { Piscina } from 'piscina';
import { bulkCheckSeconds, bulkChecksInFlight } from '@otm/core';
import { checkBulk, type BulkCheckTask, type CheckedBulk, type RefusedBulk } from './check-body.js';

export interface BulkCheckerOptions {
  /** Checking threads (0: check on the event loop). */
  readonly threads: number;
  /** Bodies smaller than this (bytes) are checked on the event loop (default 64 KiB). */
  readonly minBytes?: number;
}

// The compiled module, also when this file runs from its TypeScript source (the tests): a worker
// thread runs plain JavaScript, and `npm test` builds before it runs the tests.
const THREAD_MODULE = new URL('../../dist/bulk/thread.js', import.meta.url).href;

/** Whether the body owns all of its memory, so that it can be moved to a thread instead of copied. */
const ownsBuffer = (b: Uint8Array): boolean =>
  b.byteOffset === 0 && b.byteLength === b.buffer.byteLength && b.buffer instanceof ArrayBuffer;

export class BulkChecker {
  private readonly pool: Piscina<BulkCheckTask, CheckedBulk | RefusedBulk> | undefined;
  private readonly minBytes: number;

  constructor(opts: BulkCheckerOptions) {
    this.minBytes = opts.minBytes ?? 65_536;
    this.pool =
      opts.threads > 0
        ? new Piscina({
            filename: THREAD_MODULE,
            name: 'default',
            minThreads: opts.threads,
            maxThreads: opts.threads,
            idleTimeout: Infinity,
          })
        : undefined;
  }

  /** How many threads check bodies (0: the event loop does). */
  get threads(): number {
    return this.pool?.threads.length ?? 0;
  }

  /**
   * Checks a body. A body handed to a thread may be moved there: the caller must not use it
   * afterwards.
   */
  async check(task: BulkCheckTask): Promise<CheckedBulk | RefusedBulk> {
    if (this.pool === undefined || task.body.length < this.minBytes) {
      const end = bulkCheckSeconds.startTimer({ where: 'event_loop' });
      try {
        return checkBulk(task);
      } finally {
        end();
      }
    }
    const body = task.body;
    const transferList = typeof body !== 'string' && ownsBuffer(body) ? [body.buffer as ArrayBuffer] : undefined;
    const end = bulkCheckSeconds.startTimer({ where: 'thread' });
    bulkChecksInFlight.inc();
    try {
      return await this.pool.run(task, { transferList });
    } finally {
      bulkChecksInFlight.dec();
      end();
    }
  }

  /** Stops the threads (a body being checked is abandoned: its request has been answered or dropped). */
  async close(): Promise<void> {
    await this.pool?.destroy();
  }
}
