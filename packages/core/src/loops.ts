/**
 * The kinds of background loop a process runs (health.ts says what a part is and how the probes
 * read it), and their metrics: `otm_loop_up{loop}` and `otm_loop_restarts_total{loop}`, labelled by
 * the kind, never by an instance (a webhook subscription's or a tenant's id has no bound).
 *
 * - A kind may have one loop (the dispatcher's scan, the entity export) or many that come and go
 *   (a delivery loop per webhook subscription, a stream reader per tenant). `otm_loop_up` is 1
 *   while no loop of the kind is down in this process, 0 while one or more are; a kind with no
 *   loop running is 1 (nothing is stuck). The count is kept per kind for the whole process, so two
 *   components with loops of one kind (tests make several) share the gauge rightly.
 * - /readyz names every loop that is down, but at most `named` of one kind, the longest down first;
 *   the rest of the kind are one part, "<title>: N more down", so that a store outage under 10,000
 *   subscriptions answers a short body. (`otm_parts_down` then counts that part once.)
 * - `fail` logs a failure at most once per `logIntervalMs` per kind and cause, whatever the number
 *   of loops of the kind failing for it, with the number held back since: one line a while, not
 *   one per subscription per retry.
 */
import { PartState, ThrottledLog, reasonOf, type Monitored, type PartStatus } from './health.js';
import type { Logger } from './logger.js';
import { loopRestarts, loopUp } from './metrics.js';

/** Loops of each kind down now, in this process. */
const downByKind = new Map<string, number>();

function countDown(label: string, delta: number): void {
  const n = Math.max(0, (downByKind.get(label) ?? 0) + delta);
  downByKind.set(label, n);
  loopUp.set({ loop: label }, n === 0 ? 1 : 0);
}

/** Mirrors one loop's state into its kind's count: pass `onChange` to its PartState (or `supervise`), `release` when it ends. */
interface Tracker {
  readonly onChange: (up: boolean) => void;
  readonly release: () => void;
}

function tracker(label: string): Tracker {
  let down = false;
  return {
    onChange: (up) => {
      if (down === !up) return;
      down = !up;
      countDown(label, down ? 1 : -1);
    },
    release: () => {
      if (down) countDown(label, -1);
      down = false;
    },
  };
}

export interface LoopKindOptions {
  /** Loops of the kind /readyz names one by one (default 10); the rest are one part. */
  readonly named?: number;
  /** Least time between two log lines of the kind for one cause (ms, default 10000). */
  readonly logIntervalMs?: number;
}

/** One kind of background loop: the metrics of its label, its parts, its log of failures. */
export class LoopKind {
  private readonly parts = new Map<PartState, Tracker>();
  private readonly log: ThrottledLog;
  private readonly named: number;

  constructor(
    /** The metrics' `loop` label: bounded, e.g. `dispatcher-subscription`. */
    readonly label: string,
    /** What an operator reads, e.g. `dispatcher subscription`: each part's name starts with it. */
    readonly title: string,
    opts: LoopKindOptions = {},
  ) {
    this.named = opts.named ?? 10;
    this.log = new ThrottledLog(opts.logIntervalMs ?? 10_000);
    countDown(label, 0);
  }

  /** A loop of this kind, up unless `up` is false, named `<title> <instance>`; `remove` it when it ends. */
  add(instance: string, opts: { up?: boolean } = {}): PartState {
    const t = tracker(this.label);
    const part = new PartState(`${this.title} ${instance}`, 'loop', { up: opts.up ?? true, onChange: t.onChange });
    this.parts.set(part, t);
    return part;
  }

  /** The loop ended (it is not down any more, it is gone). */
  remove(part: PartState): void {
    this.parts.get(part)?.release();
    this.parts.delete(part);
  }

  /** The options that make `supervise` keep this kind's metrics for its one loop; `release` once it is stopped. */
  supervision(): { onChange: (up: boolean) => void; onRestart: () => void; release: () => void } {
    const t = tracker(this.label);
    return { onChange: t.onChange, onRestart: () => this.restarted(), release: t.release };
  }

  /** A loop of the kind starts again after a failure (`otm_loop_restarts_total`). */
  restarted(): void {
    loopRestarts.inc({ loop: this.label });
  }

  /**
   * `part` failed for `cause`: it is down, and the failure is logged unless one of the kind with
   * the same cause was logged within the interval (`alsoFailed`: how many were not since).
   */
  fail(part: PartState, cause: unknown, logger: Logger | undefined, fields: Record<string, unknown>, message: string): string {
    const reason = reasonOf(cause);
    part.down(reason);
    const { log, skipped } = this.log.take(reason);
    if (log) logger?.warn({ loop: part.name, err: reason, ...fields, ...(skipped > 0 ? { alsoFailed: skipped } : {}) }, message);
    return reason;
  }

  /** Loops of the kind now. */
  get size(): number {
    return this.parts.size;
  }

  /**
   * What /readyz and /healthz read (Health.watch): the loops that are down, the longest down first,
   * `named` of them by name and the others as one part. Loops that are up are left out.
   */
  monitored(): Monitored[] {
    const down: Array<{ part: PartState; status: PartStatus }> = [];
    for (const part of this.parts.keys()) {
      const status = part.status();
      if (!status.up) down.push({ part, status });
    }
    if (down.length === 0) return [];
    down.sort((a, b) => a.status.since - b.status.since);
    const shown: Monitored[] = down.slice(0, this.named).map((d) => d.part);
    const rest = down.slice(this.named);
    if (rest.length > 0) {
      const first = rest[0]!.status;
      const status: PartStatus = { up: false, since: first.since, reason: first.reason ?? 'down' };
      shown.push({ name: `${this.title}: ${rest.length} more down`, kind: 'loop', status: () => status });
    }
    return shown;
  }
}
