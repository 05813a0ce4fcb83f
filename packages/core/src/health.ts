/**
 * The state of a process's long-running parts, and how they recover.
 *
 * A part is anything that must keep working for writes to become visible without a request
 * driving it: a bus consumer, a background loop (the dispatcher's deliveries, a stream's feed
 * reader, the entity export, compaction), or a store's willingness to take writes. Each part says
 * whether it is up, since when, and why not. The HTTP edge reads them all (`Health`):
 * - `/readyz` is 503 while any part is down, naming it and the cause;
 * - `/healthz` is 503 once a part of kind `loop` has been down longer than the stall bound
 *   (OTM_STALL_SECONDS), so that an orchestrator restarts a process that does not recover by itself.
 *   A store that refuses writes (a full disk) is not a stall: a restart would not free the disk.
 *
 * `supervise` runs a loop that must never end while the process runs: after any failure it starts
 * it again with capped exponential backoff and jitter, logging each attempt and its cause once.
 */
import type { Logger } from './logger.js';

export interface PartStatus {
  readonly up: boolean;
  /** When the part last changed between up and down (ms since the epoch). */
  readonly since: number;
  /** Why it is down, in plain words (absent while up). */
  readonly reason?: string;
}

/**
 * `loop`: restarting the process may help when it stays down (it counts for /healthz);
 * `store`: a store refusing writes (disk full, out of memory), which only readiness reports.
 */
export type PartKind = 'loop' | 'store';

export interface Monitored {
  /** Names the part for an operator, e.g. `consumer otm-telemetry-worker/otm.telemetry.v1`. */
  readonly name: string;
  readonly kind: PartKind;
  status(): PartStatus;
}

/** A part's status, set by the part itself; `onChange` mirrors it (a gauge). */
export class PartState implements Monitored {
  private state: PartStatus;

  constructor(
    readonly name: string,
    readonly kind: PartKind,
    opts: { up?: boolean; onChange?: (up: boolean) => void } = {},
  ) {
    this.onChange = opts.onChange;
    this.state = opts.up === false ? { up: false, since: Date.now(), reason: 'starting' } : { up: true, since: Date.now() };
    this.onChange?.(this.state.up);
  }

  private readonly onChange: ((up: boolean) => void) | undefined;

  status(): PartStatus {
    return this.state;
  }

  get isUp(): boolean {
    return this.state.up;
  }

  up(): void {
    if (this.state.up) return;
    this.state = { up: true, since: Date.now() };
    this.onChange?.(true);
  }

  /** Marks the part down; a part already down keeps its `since` and takes the newer reason. */
  down(reason: string): void {
    const was = this.state.up;
    this.state = { up: false, since: was ? Date.now() : this.state.since, reason };
    if (was) this.onChange?.(false);
  }
}

/** A part that is down, as /readyz and /healthz report it. */
export interface DownPart {
  readonly name: string;
  readonly kind: PartKind;
  readonly reason: string;
  /** Seconds it has been down. */
  readonly seconds: number;
}

/** Every monitored part of a process: fixed ones, and sources whose parts come and go. */
export class Health {
  private readonly sources = new Set<() => Iterable<Monitored>>();

  /** Watches the parts `source` gives each time health is asked; returns a function that stops watching. */
  watch(source: () => Iterable<Monitored>): () => void {
    this.sources.add(source);
    return () => this.sources.delete(source);
  }

  /** Watches one part. */
  add(part: Monitored): () => void {
    return this.watch(() => [part]);
  }

  /** The parts that are down now, longest down first. */
  down(now = Date.now()): DownPart[] {
    const out: DownPart[] = [];
    for (const source of this.sources) {
      for (const part of source()) {
        const s = part.status();
        if (!s.up) out.push({ name: part.name, kind: part.kind, reason: s.reason ?? 'down', seconds: Math.max(0, (now - s.since) / 1000) });
      }
    }
    return out.sort((a, b) => b.seconds - a.seconds);
  }

  /** The loops down longer than `stallSeconds`: the process does not recover by itself. */
  stalled(stallSeconds: number, now = Date.now()): DownPart[] {
    return this.down(now).filter((p) => p.kind === 'loop' && p.seconds >= stallSeconds);
  }
}

export interface Backoff {
  /** The first delay (ms). */
  readonly initialMs: number;
  /** The largest delay (ms). */
  readonly maxMs: number;
}

export const DEFAULT_BACKOFF: Backoff = Object.freeze({ initialMs: 500, maxMs: 30_000 });

/**
 * The delay before restart `attempt` (1, 2, ...): initialMs doubled each attempt up to maxMs, of
 * which a random half is taken off ("equal jitter"), so that processes that failed together do not
 * all come back at the same moment, and none waits less than half the cap's step.
 */
export function backoffDelay(attempt: number, b: Backoff = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const step = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(30, Math.max(0, attempt - 1)));
  return Math.round(step / 2 + (random() * step) / 2);
}

/** The message of an error, for a log line or a reason (never a stack). */
export const reasonOf = (e: unknown): string => (e instanceof Error ? e.message : String(e)) || 'unknown error';

export interface SuperviseOptions {
  readonly logger?: Logger;
  readonly backoff?: Backoff;
  /** Told of each restart (a metric). */
  readonly onRestart?: () => void;
  /** Mirrors the loop's state (a gauge). */
  readonly onChange?: (up: boolean) => void;
}

/** A supervised loop: its state, and how to stop it. */
export interface Supervised extends Monitored {
  readonly state: PartState;
  /** Restarts so far. */
  readonly restarts: number;
  /** Stops the loop (aborts its signal) and waits for it to end; no restart follows. */
  stop(): Promise<void>;
}

/**
 * Runs `run` for as long as the process runs: when it rejects, or resolves although nobody asked it
 * to stop, it is started again after `backoffDelay`, for ever. `run` gets an AbortSignal that is
 * aborted by `stop()`, and `up()` to call once it works (joined, connected, its first pass done);
 * the part is down from the start until then and from each failure until the next `up()`. Each
 * failure is logged once, with the attempt and the delay.
 */
export function supervise(
  name: string,
  run: (signal: AbortSignal, up: () => void) => Promise<void>,
  opts: SuperviseOptions = {},
): Supervised {
  const state = new PartState(name, 'loop', { up: false, onChange: opts.onChange });
  const abort = new AbortController();
  let restarts = 0;
  let failures = 0;
  let wake: (() => void) | undefined;
  const up = () => {
    failures = 0;
    state.up();
  };
  const done = (async () => {
    while (!abort.signal.aborted) {
      let cause: string;
      try {
        await run(abort.signal, up);
        if (abort.signal.aborted) break;
        cause = 'ended by itself';
      } catch (e) {
        if (abort.signal.aborted) break;
        cause = reasonOf(e);
      }
      failures++;
      state.down(cause);
      const delay = backoffDelay(failures, opts.backoff);
      opts.logger?.warn({ part: name, attempt: failures, retryInMs: delay, err: cause }, `${name} failed; restarting`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
      if (abort.signal.aborted) break;
      restarts++;
      opts.onRestart?.();
    }
  })();
  return {
    name,
    kind: 'loop',
    state,
    status: () => state.status(),
    get restarts() {
      return restarts;
    },
    stop: async () => {
      abort.abort();
      wake?.();
      await done;
    },
  };
}

/**
 * Logs a repeated failure at most once per `intervalMs` per key, with the number of the ones not
 * logged since: under an outage of a store, one line a while instead of a stack trace a request.
 */
export class ThrottledLog {
  private readonly last = new Map<string, { at: number; skipped: number }>();

  constructor(private readonly intervalMs = 10_000) {}

  /** Whether to log `key` now; `skipped` is how many were held back since the last one logged. */
  take(key: string, now = Date.now()): { log: boolean; skipped: number } {
    const seen = this.last.get(key);
    if (seen !== undefined && now - seen.at < this.intervalMs) {
      seen.skipped++;
      return { log: false, skipped: seen.skipped };
    }
    const skipped = seen?.skipped ?? 0;
    this.last.set(key, { at: now, skipped: 0 });
    if (this.last.size > 1000) this.last.delete(this.last.keys().next().value!);
    return { log: true, skipped };
  }
}
