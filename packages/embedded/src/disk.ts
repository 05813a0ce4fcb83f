/**
 * The embedded stores on a full disk: a write the disk cannot take is refused, never the process.
 *
 * - Each of the two stores that write to the data folder, LMDB (`<dataDir>/store`) and the event
 *   log (`<dataDir>/events`), has a `WriteGate`: a write that fails for lack of room (ENOSPC, EDQUOT,
 *   EFBIG, EIO from a commit: LMDB reports a write the disk took only in part as EIO; a short
 *   write; MDB_MAP_FULL) becomes a `StorageRefused` (503 insufficientStorage at the HTTP edge),
 *   counted in otm_writes_refused_total, and the store's write state goes down (/readyz names it,
 *   with the folder and its free bytes).
 * - While it is down, writes are refused at once, without trying (a failing LMDB commit costs a
 *   transaction and prints a stack trace; nothing would come of it), and a probe tries a small
 *   write every PROBE_MS: once it succeeds the store takes writes again, by itself, and /readyz is
 *   200 again. A probe, not the next client write, so that a store that a load balancer took out of
 *   rotation for its red readiness comes back too.
 * - lmdb-js rejects, for each commit that fails, a promise that no caller holds (besides the one
 *   the caller awaits, and `commitError`, the real cause): the commit promise of the batch start it
 *   queues each event-loop turn (write.js `writeBatchStart`). Unhandled, it ends the process
 *   (issue 42: 4 crashes in 7 fills). Every write of the embedded stores calls `holdTurn`, which
 *   handles it; `guardLmdbCommits` takes any such rejection that slips through, as a safety net.
 */
import fs from 'node:fs';
import path from 'node:path';
import { AdapterError, StorageRefused, WriteState, fileRefusal, formatBytes, reasonOf, type RefusalCause } from '@otm/core';

/** Free bytes under which a commit that failed without a cause is taken for a full disk. */
const NEARLY_FULL_BYTES = 1024 * 1024;

/** How often a store refusing writes tries a small write to see whether it has room again (ms). */
export const PROBE_MS = 2_000;

/** Bytes free for this process on the file system of `dir`; undefined when it cannot be read. */
export function freeBytes(dir: string): number | undefined {
  try {
    const s = fs.statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return undefined;
  }
}

/** The message lmdb-js gives every write of a commit that failed; the cause is in `commitError`. */
const COMMIT_FAILED = 'Commit failed (see commitError for details)';

let guarded = false;
let lostCommits = 0;

/**
 * Installs, once a process, a handler of unhandled rejections that takes the ones lmdb-js leaves
 * for a failed commit (an Error of COMMIT_FAILED with a `commitError`): the callers of that commit
 * were told through their own promises. Any other unhandled rejection is thrown again as an
 * uncaught exception, as Node does without a handler, unless another handler (a test runner's)
 * takes it.
 */
export function guardLmdbCommits(): void {
  if (guarded) return;
  guarded = true;
  process.on('unhandledRejection', (reason) => {
    if (reason instanceof Error && reason.message === COMMIT_FAILED) {
      lostCommits++;
      // Its real cause was rejected too: nobody else waits for it.
      (reason as { commitError?: Promise<unknown> }).commitError?.catch(() => {});
      return;
    }
    if (process.listenerCount('unhandledRejection') > 1) return;
    throw reason;
  });
}

/** Environments whose turn's batch is held already (`holdTurn`). */
const heldTurns = new WeakSet<object>();

/**
 * Call right after issuing an LMDB write (a transaction, or a put outside one). lmdb-js gathers the
 * writes of an event-loop turn into one batch, whose start it queues with setImmediate; that start
 * makes a commit promise that no caller holds, rejected when the commit fails (a full disk): an
 * unhandled rejection, which ends the process. Once that start has run (the immediate queued here
 * runs after it), the promise is the environment's current `committed`: a handler is attached.
 */
export function holdTurn(root: { readonly committed: PromiseLike<unknown> }): void {
  if (heldTurns.has(root)) return;
  heldTurns.add(root);
  setImmediate(() => {
    heldTurns.delete(root);
    Promise.resolve(root.committed).catch(() => {});
  });
}

/** Failed commits whose left-over rejection the guard took (for tests). */
export const lmdbCommitRejectionsTaken = (): number => lostCommits;

/** The real cause of a failed lmdb-js commit (its `commitError`), or the error itself. */
export async function commitCause(e: unknown): Promise<unknown> {
  const pending = (e as { commitError?: unknown } | null)?.commitError;
  if (pending === undefined || pending === null || typeof (pending as Promise<unknown>).then !== 'function') return e;
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      pending as Promise<unknown>,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 1_000);
        timer.unref();
      }),
    ]);
    return e;
  } catch (cause) {
    return cause;
  } finally {
    clearTimeout(timer);
  }
}

export interface WriteGateOptions {
  /** The store's name in /readyz, the metric and the answers: `lmdb` or `event-log`. */
  /** LMDB's environment, when the store is LMDB: every write through the gate holds its turn's batch (`holdTurn`). */
  readonly root?: { readonly committed: PromiseLike<unknown> };
  readonly store: string;
  /** The folder the store writes to: named in the reason, its free bytes read for it. */
  readonly dir: string;
  /** A small write that succeeds once the store has room again. */
  readonly probe: () => Promise<void>;
  readonly warn?: ((message: string) => void) | undefined;
  /** Told when the store takes writes again. */
  readonly info?: ((message: string) => void) | undefined;
  readonly probeMs?: number;
}

/** Whether a store of the data folder takes writes, and the probe that finds out when it can again. */
export class WriteGate {
  readonly state: WriteState;
  private timer: NodeJS.Timeout | undefined;
  private probing = false;
  private closed = false;

  get root(): WriteGateOptions['root'] {
    return this.opts.root;
  }

  constructor(private readonly opts: WriteGateOptions) {
    this.state = new WriteState(opts.store, { where: opts.dir, freeBytes: () => freeBytes(opts.dir) });
  }

  get refusing(): boolean {
    return this.state.refusing;
  }

  /** Throws the refusal of a write while the store refuses writes (nothing is tried). */
  check(): void {
    if (!this.state.refusing) return;
    throw this.state.refuse(
      this.state.lastCause ?? 'no-space',
      `writes are refused until a write succeeds again, tried every ${this.probeMs / 1000} s`,
    );
  }

  private get probeMs(): number {
    return this.opts.probeMs ?? PROBE_MS;
  }

  /** A write succeeded: the store takes writes. */
  ok(): void {
    if (!this.state.refusing) return;
    this.state.ok();
    this.stopProbe();
    for (const fn of this.listeners) fn();
    this.opts.info?.(`${this.opts.store}: writes succeed again in ${this.opts.dir} (${formatBytes(freeBytes(this.opts.dir) ?? 0)} free)`);
  }

  /**
   * The error to throw for a failed write: a StorageRefused (the state down, the probe started)
   * when more room would cure it, else `e` as it was.
   */
  failed(e: unknown, what: string): unknown {
    let cause = fileRefusal(e);
    // lmdb-js does not always hand the cause of a failed commit on (commitError stays pending):
    // with the folder all but full, no room is the cause.
    if (
      cause === undefined &&
      e instanceof Error &&
      e.message === COMMIT_FAILED &&
      (freeBytes(this.opts.dir) ?? Infinity) < NEARLY_FULL_BYTES
    )
      cause = 'no-space';
    if (cause === undefined) return e;
    return this.refused(cause, `${what}: ${reasonOf(e)}`, e);
  }

  /** Calls `fn` each time the store takes writes again (a writer that waits to try again goes now). */
  onWritable(fn: () => void): void {
    this.listeners.push(fn);
  }

  private readonly listeners: Array<() => void> = [];

  /** A write refused for `cause`: counted, the state down, the probe started. */
  refused(cause: RefusalCause, message: string, e?: unknown): StorageRefused {
    const was = this.state.refusing;
    const refusal = this.state.refuse(cause, message, e);
    if (!was) {
      this.opts.warn?.(
        `${this.opts.store}: writes are refused from now on: ${refusal.message}; reads are served; writes are tried again every ${this.probeMs / 1000} s`,
      );
    }
    this.startProbe();
    return refusal;
  }

  /** Found at start (or by a probe) that the store cannot write: down, without a write counted. */
  unable(cause: RefusalCause, detail: string): void {
    const was = this.state.refusing;
    this.state.unable(cause, detail);
    if (!was)
      this.opts.warn?.(
        `${this.opts.store}: cannot write in ${this.opts.dir} (${formatBytes(freeBytes(this.opts.dir) ?? 0)} free): ${detail}; reads are served; writes are refused until a write succeeds, tried every ${this.probeMs / 1000} s`,
      );
    this.startProbe();
  }

  /** Tries the probe now: resolves true once the store takes writes (and marks it so). */
  async probeNow(): Promise<boolean> {
    if (this.probing || this.closed) return !this.state.refusing;
    this.probing = true;
    try {
      const probing = this.opts.probe();
      if (this.opts.root !== undefined) holdTurn(this.opts.root);
      await probing;
      this.ok();
      return true;
    } catch (e) {
      const cause = fileRefusal(await commitCause(e));
      if (cause !== undefined) this.unable(cause, `a probe write failed: ${reasonOf(e)}`);
      return false;
    } finally {
      this.probing = false;
    }
  }

  private startProbe(): void {
    if (this.timer !== undefined || this.closed) return;
    this.timer = setInterval(() => void this.probeNow(), this.probeMs);
    this.timer.unref();
  }

  private stopProbe(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  close(): void {
    this.closed = true;
    this.stopProbe();
  }
}

/**
 * The event log's probe: a small file written with O_DSYNC in its folder, then removed; it takes
 * writes again only once that succeeds and the folder has `needed()` bytes free (the largest write
 * refused since it went down), so that a probe of a few bytes does not open the gate to a write
 * that cannot fit.
 */
export function fileProbe(dir: string, needed: () => number): () => Promise<void> {
  const file = path.join(dir, '.write-probe');
  const bytes = Buffer.alloc(4096, 0x20);
  return async () => {
    const free = freeBytes(dir);
    if (free !== undefined && free < needed()) {
      throw Object.assign(new Error(`${formatBytes(free)} free, ${formatBytes(needed())} needed`), { code: 'ENOSPC' });
    }
    // Written as the log writes (segments.ts: writev on a descriptor opened with O_DSYNC).
    const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_DSYNC);
    try {
      const wrote = await new Promise<number>((resolve, reject) => fs.writev(fd, [bytes], 0, (e, n) => (e ? reject(e) : resolve(n))));
      if (wrote !== bytes.length)
        throw Object.assign(new Error(`short write (${wrote} of ${bytes.length} bytes)`), { code: 'ESHORTWRITE' });
    } finally {
      fs.closeSync(fd);
      fs.rmSync(file, { force: true });
    }
  };
}

/** An AdapterError of LMDB's commit that failed for another reason than room: retryable, as before. */
export const commitFailed = (what: string, e: unknown): AdapterError =>
  e instanceof AdapterError ? e : new AdapterError('lmdb', `lmdb: ${what} failed (${reasonOf(e)})`, { retryable: true, cause: e });

/**
 * Runs one LMDB write (a transaction, and its flush) through `gate`: refused at once while the
 * store refuses writes; a failure for lack of room becomes a StorageRefused, any other one a
 * retryable AdapterError, as before; an AdapterError the transaction threw itself goes on as it is.
 */
export async function gatedCommit<T>(gate: WriteGate | undefined, what: string, run: () => Promise<T>): Promise<T> {
  gate?.check();
  let result: T;
  try {
    const running = run();
    if (gate?.root !== undefined) holdTurn(gate.root);
    result = await running;
  } catch (e) {
    if (e instanceof AdapterError) throw e;
    const cause = await commitCause(e);
    const out = gate === undefined ? cause : gate.failed(cause, what);
    throw out instanceof StorageRefused ? out : commitFailed(what, cause);
  }
  gate?.ok();
  return result;
}
