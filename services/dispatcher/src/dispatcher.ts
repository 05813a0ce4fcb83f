/**
 * The dispatcher: delivers each active webhook subscription's changes, read from the tenant's
 * change feed after the subscription's cursor, as signed JSON POSTs of batches, at least once.
 *
 * - One loop per subscription (`SubscriptionLoop`), each its own promise: a slow or failing
 *   receiver delays only its own subscription.
 * - A loop reads the feed after its cursor, with the documents, through the tenant's shared reading
 *   (shared-feed.ts: the subscriptions of one tenant read each page of the feed once, and each
 *   change's item is made once), keeps the changes of its kinds that its filter takes (filter.ts),
 *   items exactly as `GET /api/v5/changes` makes them (query's `changeItem`). A batch goes when it
 *   holds `batch` changes (OTM_WEBHOOK_BATCH; or MAX_BATCH_BYTES of them), or once its first change
 *   is `lingerMs` old (1 s): what arrived within that second. Idle, it reads again every `pollMs`.
 * - While a batch's POST is on its way, the next page of the feed is read (`prefetch`) and, with a
 *   backlog, the next batch made and signed from it (`next`), so that the dispatcher's work and
 *   the receiver's overlap and the next POST goes as soon as the answer comes; the cursor still
 *   moves only after the 2xx, and a batch that fails goes again before the one made ahead.
 * - A 2xx answer: the attempt is recorded, then the cursor moves past the batch (`advance`, which
 *   checks that no replay, resume or pause came meanwhile). A crash before that delivers the batch
 *   again: at least once; receivers deduplicate by the changes' cursors.
 * - Anything else (another status, a 3xx included; a timeout; a connection error; a refused
 *   address): recorded, and the same batch is tried again after a pause drawn at random between 0
 *   and `baseMs` × 2^(attempt - 1), at most `capMs` (exponential backoff with full jitter), for
 *   `windowMs` (24 h) from the batch's first failure (kept with the subscription, so a restart
 *   does not start the window again); then the subscription is paused with the last failure as
 *   its reason. Resume picks up at the same cursor.
 * - Changes the filter leaves out move the cursor on without a POST.
 * - Several dispatchers (the distributed `otm dispatcher` role, any number of processes) share the
 *   subscriptions: a loop runs only while its dispatcher holds the subscription's lease (renewed
 *   every `leaseMs` / 3; one that dies is taken over once its leases expire), and each dispatcher
 *   holds about its share (subscriptions / live dispatchers) and gives up the excess at the end of a
 *   batch. This scales with subscriptions, not with Kafka partitions: deliveries follow the change
 *   feed (what is stored, resumable by the same cursors as a replay), not the bus.
 * - `close()`: no new work, in-flight POSTs aborted (not recorded: the batch goes again), leases
 *   given up, no timer left.
 *
 * Recovery (issue 36: nothing long-running stops quietly; core health.ts and loops.ts). Each loop
 * runs for as long as the dispatcher does, whatever fails, and says whether it works (`parts()`:
 * /readyz names what is down, /healthz turns 503 once it stays down OTM_STALL_SECONDS):
 * - The scan (`dispatcher scan`, `otm_loop_up{loop="dispatcher-scan"}`) runs under `supervise`: a
 *   scan that fails (the subscription store unavailable) is logged with its attempt and tried
 *   again after a capped exponential backoff with jitter; it is down from the failure until a
 *   scan works.
 * - A subscription's loop (`dispatcher subscription <tenant>/<id>`,
 *   `otm_loop_up{loop="dispatcher-subscription"}`, 0 while any is down) catches every failure of
 *   a step (reading the subscription or the feed, recording an attempt, moving the cursor), is
 *   down until a step works again, and tries again from where it was after a jittered pause that
 *   doubles up to SUBSCRIPTION_RETRY_CAP_MS; failures are logged once per 10 s for all
 *   subscriptions and each cause, with the count held back. A receiver that fails is not the
 *   loop's failure: its loop stays up, and the retries and the pause are the subscription's own
 *   (above). A loop that ends anyway (a bug) gives its lease up and the next scan starts it again.
 * - Leases: a renewal that fails is tried again at the next renewal; one not renewed for
 *   `leaseMs` stops its loop, without giving the lease up, and a scan takes it again once the
 *   store answers (the lease is free by then, or still this dispatcher's own).
 * - The shared feed (shared-feed.ts) runs nothing of its own: a read that fails rejects to the
 *   loops that wait for it, which report and retry it, and is not kept.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { KindSegment } from '@otm/model';
import {
  ErrorCode,
  LoopKind,
  OtmServiceError,
  backoffDelay,
  supervise,
  webhookAttempts,
  webhookAttemptSeconds,
  webhookChanges,
  webhookLag,
  webhookSubscriptions,
  webhookSubscriptionsHeld,
  type AddressRange,
  type DeliveryAttempt,
  type Logger,
  type Monitored,
  type PartState,
  type SubscriptionStore,
  type Supervised,
  type WebhookSubscription,
} from '@otm/core';
import { DEFAULT_HTTP_LIMITS, WebhookClient, signature, type AttemptResult, type HttpLimits } from './deliver.js';
import { matcher, type Matcher } from './filter.js';
import { DEFAULT_SHARED_FEED_OPTIONS, SharedFeed, type DispatchSource, type FeedReader, type SharedChange } from './shared-feed.js';
import { TargetRule } from './ssrf.js';

/** Most bytes of changes in one batch (at least one change goes, whatever its size). */
export const MAX_BATCH_BYTES = 4 * 1024 * 1024;
/** Delivery attempts kept per subscription (GET .../deliveries). */
export const KEPT_DELIVERIES = 100;
/** Longest pause before a subscription's loop tries a failed step again (ms). */
export const SUBSCRIPTION_RETRY_CAP_MS = 5_000;
/** Longest pause before a failed scan is tried again (ms). */
export const SCAN_RETRY_CAP_MS = 30_000;

export interface RetryPolicy {
  /** The first pause's bound (ms, default 1000); doubled for each attempt. */
  readonly baseMs: number;
  /** The largest bound (ms, default 300000: 5 minutes). */
  readonly capMs: number;
  /** How long a batch is tried before the subscription is paused (ms, default 86400000: 24 h). */
  readonly windowMs: number;
}

export interface DispatcherOptions {
  /** Most changes in one delivery (OTM_WEBHOOK_BATCH, default 100). */
  readonly batch: number;
  /** Addresses deliveries may reach although private (OTM_WEBHOOK_ALLOW). */
  readonly allow: readonly AddressRange[];
  /** How long a batch that is not full waits for more changes, from its first change's time (ms, default 1000). */
  readonly lingerMs: number;
  /** How often an idle subscription reads its feed again (ms, default 200). */
  readonly pollMs: number;
  /** How often the dispatcher looks for subscriptions to take (ms, default 1000). */
  readonly scanMs: number;
  /** How long a lease lasts unless renewed (ms, default 10000). */
  readonly leaseMs: number;
  /** How often a look for subscriptions also counts them by state, for `otm_webhook_subscriptions` (ms, default 10000). */
  readonly countMs: number;
  readonly retry: RetryPolicy;
  readonly http: HttpLimits;
  /**
   * Pages of the feed (of `batch` changes each) one look at the feed reads at most, while the batch
   * is not full, for a subscription with a filter or kinds (the pages of its tenant may hold other
   * kinds, for its other subscriptions): default 20, so that one that takes few of the changes
   * moves its cursor on every 20 pages rather than every page.
   */
  readonly readFactor: number;
  /** Most bytes of pages of the feed kept for the other subscriptions of their tenant (default 32 MiB). */
  readonly keepBytes: number;
  /** For tests: the random numbers of the jitter. */
  readonly random: () => number;
}

export const DEFAULT_DISPATCHER_OPTIONS: DispatcherOptions = {
  batch: 100,
  allow: [],
  lingerMs: 1_000,
  pollMs: 200,
  scanMs: 1_000,
  leaseMs: 10_000,
  countMs: 10_000,
  retry: { baseMs: 1_000, capMs: 300_000, windowMs: 86_400_000 },
  http: DEFAULT_HTTP_LIMITS,
  readFactor: 20,
  keepBytes: DEFAULT_SHARED_FEED_OPTIONS.maxBytes,
  random: Math.random,
};

export type { DispatchSource } from './shared-feed.js';

export interface DispatcherDeps {
  readonly store: SubscriptionStore;
  readonly source: DispatchSource;
  readonly logger: Logger;
}

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));
const isCursorExpired = (e: unknown): boolean => e instanceof OtmServiceError && e.code === ErrorCode.cursorExpired;

/** Resolves in the second check phase from now: after what `setImmediate` queues meanwhile. */
const afterNextWrite = (): Promise<void> => new Promise((resolve) => setImmediate(() => setImmediate(resolve)));

/** A sleep that `wake` ends early; a wake while awake makes the next sleep end at once. */
class Sleeper {
  private timer: NodeJS.Timeout | undefined;
  private done: (() => void) | undefined;
  private woken = false;

  sleep(ms: number): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.done = () => {
        clearTimeout(this.timer);
        this.timer = undefined;
        this.done = undefined;
        resolve();
      };
      this.timer = setTimeout(this.done, Math.max(0, ms));
    });
  }

  wake(): void {
    if (this.done !== undefined) this.done();
    else this.woken = true;
  }
}

/** The batch being tried, with what the subscription was when it was made. */
interface Batch {
  readonly id: string;
  /** What is POSTed, made once (the same bytes for every attempt): the changes are not held on to. */
  readonly body: Buffer;
  readonly changes: number;
  readonly firstCursor: string;
  readonly lastCursor: string;
  /** Where the cursor goes once it is delivered. */
  readonly to: string;
  readonly rev: number;
  readonly from: string | undefined;
  attempt: number;
  /** Its signature, made ahead for a time (unix seconds): used if the POST goes within that second. */
  signed?: { readonly t: number; readonly value: string };
}

export class Dispatcher {
  readonly owner = `${os.hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`;
  readonly options: DispatcherOptions;
  readonly client: WebhookClient;
  /** The feed as the subscriptions read it: each page once per tenant (shared-feed.ts). */
  readonly feed: SharedFeed;
  private readonly loops = new Map<string, SubscriptionLoop>();
  /** Each loop's end, its lease given up included. */
  private readonly ending = new Set<Promise<void>>();
  private readonly scanSleeper = new Sleeper();
  /** The scan, supervised: started again after any failure. */
  private scanning: Supervised | undefined;
  private readonly scanKind = new LoopKind('dispatcher-scan', 'dispatcher scan');
  private scanMetrics: ReturnType<LoopKind['supervision']> | undefined;
  /** The subscriptions' loops as the probes and metrics see them. */
  readonly loopKind = new LoopKind('dispatcher-subscription', 'dispatcher subscription');
  private renewTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Live dispatchers as last counted (the share of subscriptions each holds). */
  private live = 1;
  /** When the subscriptions are next counted by state (a loop that ends makes it now). */
  private countDue = 0;

  constructor(
    readonly deps: DispatcherDeps,
    options: Partial<DispatcherOptions> = {},
  ) {
    this.options = {
      ...DEFAULT_DISPATCHER_OPTIONS,
      ...options,
      retry: { ...DEFAULT_DISPATCHER_OPTIONS.retry, ...options.retry },
      http: { ...DEFAULT_DISPATCHER_OPTIONS.http, ...options.http },
    };
    this.client = new WebhookClient(new TargetRule(this.options.allow), this.options.http);
    this.feed = new SharedFeed(deps.source, {
      ...DEFAULT_SHARED_FEED_OPTIONS,
      pageSize: Math.max(1, this.options.batch),
      maxBytes: this.options.keepBytes,
    });
  }

  start(): void {
    if (this.scanning !== undefined || this.stopped) return;
    this.scanMetrics = this.scanKind.supervision();
    this.scanning = supervise('dispatcher scan', (signal, up) => this.scanLoop(signal, up), {
      logger: this.deps.logger,
      backoff: { initialMs: Math.max(1, this.options.scanMs), maxMs: Math.max(this.options.scanMs, SCAN_RETRY_CAP_MS) },
      onChange: this.scanMetrics.onChange,
      onRestart: this.scanMetrics.onRestart,
    });
    this.renewTimer = setInterval(() => void this.renew(), Math.max(50, Math.floor(this.options.leaseMs / 3)));
  }

  /** A subscription was made, resumed or replayed here: look at it now rather than at the next scan. */
  notify(tenant: string, id: string): void {
    this.countDue = 0;
    const loop = this.loops.get(`${tenant}\u0000${id}`);
    if (loop !== undefined) loop.wake();
    else this.scanSleeper.wake();
  }

  /** Subscriptions this dispatcher delivers now. */
  get held(): number {
    return this.loops.size;
  }

  /** What /readyz and /healthz read: the scan, and the subscriptions' loops that are down. */
  parts(): Monitored[] {
    return [...(this.scanning === undefined ? [] : [this.scanning]), ...this.loopKind.monitored()];
  }

  /** Looks for subscriptions every scanMs (or when woken); a scan that fails ends it, and `supervise` starts it again. */
  private async scanLoop(signal: AbortSignal, up: () => void): Promise<void> {
    while (!this.stopped && !signal.aborted) {
      await this.scan();
      up();
      if (this.stopped) break;
      await this.scanSleeper.sleep(this.options.scanMs);
    }
  }

  /** Takes free active subscriptions up to this dispatcher's share; gives up what is beyond it. */
  private async scan(): Promise<void> {
    const { store } = this.deps;
    this.live = Math.max(1, await store.dispatchers(this.owner, this.options.scanMs * 3));
    const all = await store.all();
    if (Date.now() >= this.countDue) await this.count(all);
    const share = Math.ceil(all.length / this.live);
    // Beyond the share (another dispatcher came): the excess stops after its batch and frees its lease.
    let excess = this.loops.size - share;
    for (const loop of this.loops.values()) {
      if (excess <= 0) break;
      loop.yieldLease();
      excess--;
    }
    // Free ones, in random order so that dispatchers starting together do not all try the same first.
    const candidates = all.filter((s) => !this.loops.has(`${s.tenant}\u0000${s.id}`));
    for (let i = candidates.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [candidates[i], candidates[j]] = [candidates[j]!, candidates[i]!];
    }
    for (const { tenant, id } of candidates) {
      if (this.stopped || this.loops.size >= share) break;
      const sub = await store.get(tenant, id);
      if (sub === undefined || sub.state !== 'active') continue;
      if (!(await store.lease(tenant, id, this.owner, this.options.leaseMs))) continue;
      if (this.stopped) {
        await store.release(tenant, id, this.owner);
        break;
      }
      this.startLoop(tenant, id);
    }
  }

  /** Counts the subscriptions by state (`otm_webhook_subscriptions`), 100 reads at a time. */
  private async count(all: ReadonlyArray<{ readonly tenant: string; readonly id: string }>): Promise<void> {
    this.countDue = Date.now() + this.options.countMs;
    let active = 0;
    let paused = 0;
    for (let i = 0; i < all.length && !this.stopped; i += 100) {
      const subs = await Promise.all(all.slice(i, i + 100).map(({ tenant, id }) => this.deps.store.get(tenant, id)));
      for (const sub of subs) {
        if (sub?.state === 'active') active++;
        else if (sub?.state === 'paused') paused++;
      }
    }
    webhookSubscriptions.set({ state: 'active' }, active);
    webhookSubscriptions.set({ state: 'paused' }, paused);
  }

  private startLoop(tenant: string, id: string): void {
    const key = `${tenant}\u0000${id}`;
    const loop = new SubscriptionLoop(this, tenant, id, this.loopKind.add(`${tenant}/${id}`));
    this.loops.set(key, loop);
    webhookSubscriptionsHeld.set(this.loops.size);
    const ended: Promise<void> = loop.run().finally(async () => {
      try {
        if (!loop.lost) await this.deps.store.release(tenant, id, this.owner);
      } catch {
        // It expires.
      }
      this.loops.delete(key);
      this.loopKind.remove(loop.part);
      this.ending.delete(ended);
      webhookSubscriptionsHeld.set(this.loops.size);
      this.recordLag();
      // Paused, deleted or given up: another look soon (a resumed one comes back), counting again.
      this.countDue = 0;
      if (!this.stopped) this.scanSleeper.wake();
    });
    this.ending.add(ended);
  }

  /** Renews the leases held; a loop whose lease was taken (or could not be renewed in time) stops. */
  private async renew(): Promise<void> {
    await Promise.all(
      [...this.loops.values()].map(async (loop) => {
        try {
          if (await this.deps.store.lease(loop.tenant, loop.id, this.owner, this.options.leaseMs)) loop.renewedAt = Date.now();
          else loop.lose();
        } catch (e) {
          if (Date.now() - loop.renewedAt >= this.options.leaseMs) loop.lose();
          else this.deps.logger.debug({ err: errorText(e) }, 'webhook dispatcher: renewing a lease failed');
        }
      }),
    );
    webhookLag.set(Math.max(0, ...[...this.loops.values()].map((l) => l.lagSeconds)));
  }

  recordLag(): void {
    webhookLag.set(Math.max(0, ...[...this.loops.values()].map((l) => l.lagSeconds)));
  }

  get closing(): boolean {
    return this.stopped;
  }

  /** Stops: in-flight POSTs aborted, loops ended, leases given up, no timer left. */
  async close(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.renewTimer);
    // Aborted at once (before the scan's next step looks), then woken.
    const scanned = this.scanning?.stop();
    this.scanSleeper.wake();
    const loops = [...this.loops.values()];
    for (const l of loops) l.stop();
    await scanned;
    this.scanMetrics?.release();
    // Each loop's end gives its lease up (scan() starts none once stopped).
    await Promise.all([...this.ending]);
    await this.client.close();
  }
}

/** The delivery loop of one subscription, while this dispatcher holds its lease. */
class SubscriptionLoop {
  renewedAt = Date.now();
  /** The lease was taken by another dispatcher (or could not be renewed): stop at once, do not release. */
  lost = false;
  /** Age of the oldest change not yet delivered when the feed was last read (s). */
  lagSeconds = 0;
  private stopped = false;
  /** Give the lease up after the batch in hand (the dispatcher holds more than its share). */
  private yielding = false;
  private readonly sleeper = new Sleeper();
  private readonly abort = new AbortController();
  /** Changes read and taken but not yet in a batch, and up to where the feed was read. */
  private pending: SharedChange[] = [];
  private scanned: string | undefined;
  /** The last read was a full page: the feed may hold more at once (the next page is read ahead). */
  private more = false;
  /** Its reading of the tenant's feed, shared with the tenant's other subscriptions here. */
  private reader: FeedReader | undefined;
  private kinds: { json: string; set: ReadonlySet<KindSegment> | undefined } | undefined;
  private basis: { rev: number; cursor: string | undefined } | undefined;
  private batch: Batch | undefined;
  /**
   * The batch after `batch`, made while the receiver reads `batch` (`deliver` calls `fill` with the
   * batch in flight): the changes after it, from its `to`. It goes once `batch` is delivered;
   * dropped with `batch` when the loop starts again from the stored cursor.
   */
  private next: Batch | undefined;
  private filter: { json: string; matcher: Matcher } | undefined;
  /**
   * The commits of delivered batches (the attempt's record and the cursor), chained in order. The
   * next batch is read and POSTed while the last one's commit is made (pipelined: one after the
   * other cost a sync a batch on top of the POST), so the stored cursor may be behind `basis` by
   * the commits in flight, whose `from` cursors `inFlight` holds. A commit that fails or finds the
   * cursor moved (a replay) sets `stale`: the loop then waits for the chain and starts again from
   * the stored cursor (at least once: nothing is skipped, a batch may go again).
   */
  private committing: Promise<void> | undefined;
  private inFlight: Array<string | undefined> = [];
  private stale = false;
  /** Failed steps in a row (reading, recording; not the receiver's failures): the retry's attempt. */
  private failures = 0;

  constructor(
    private readonly dispatcher: Dispatcher,
    readonly tenant: string,
    readonly id: string,
    /** Its state for the probes: down from a failed step until one works. */
    readonly part: PartState,
  ) {}

  private get o(): DispatcherOptions {
    return this.dispatcher.options;
  }

  private get log(): Logger {
    return this.dispatcher.deps.logger;
  }

  run(): Promise<void> {
    return this.loop()
      .catch((e: unknown) => {
        // Not expected (the loop catches every step's failure): the lease is given up, and the
        // next scan starts the subscription's loop again.
        this.failed(e, 'webhook dispatcher: a subscription loop ended after a failure');
      })
      .then(() => this.end());
  }

  /** Marks the loop down for `e` and logs it (a line a while for all loops, core loops.ts). */
  private failed(e: unknown, message: string, fields: Record<string, unknown> = {}): void {
    this.dispatcher.loopKind.fail(this.part, e, this.log, { subscription: this.id, tenant: this.tenant, ...fields }, message);
  }

  /** A step worked: the loop is up, and the next failure starts the backoff again. */
  private ok(): void {
    this.failures = 0;
    this.part.up();
  }

  /**
   * A step failed (the stores: the feed, the subscription, its records): down until one works;
   * tried again after a pause drawn between half and all of a bound that doubles from 2 × pollMs
   * up to SUBSCRIPTION_RETRY_CAP_MS (woken early by a notify, a stop or a yield).
   */
  private async retryAfter(e: unknown): Promise<void> {
    this.failures++;
    const cap = SUBSCRIPTION_RETRY_CAP_MS;
    const delay = backoffDelay(this.failures, { initialMs: Math.min(cap, Math.max(1, 2 * this.o.pollMs)), maxMs: cap }, this.o.random);
    this.failed(e, 'webhook dispatcher: a subscription loop failed; trying again', { attempt: this.failures, retryInMs: delay });
    await this.sleeper.sleep(delay);
    if (this.running) this.dispatcher.loopKind.restarted();
  }

  /** Waits for the commits in flight; afterwards the stored cursor is the one to go on from. */
  private async settle(): Promise<void> {
    await this.committing;
    this.committing = undefined;
    this.inFlight = [];
  }

  /** The loop ended: its commits made, its reading of the feed given up. */
  private async end(): Promise<void> {
    this.reader?.close(this.dispatcher.feed);
    this.reader = undefined;
    await this.settle();
  }

  wake(): void {
    this.sleeper.wake();
  }

  stop(): void {
    this.stopped = true;
    this.abort.abort();
    this.sleeper.wake();
  }

  lose(): void {
    this.lost = true;
    this.stop();
  }

  yieldLease(): void {
    this.yielding = true;
    this.sleeper.wake();
  }

  private get running(): boolean {
    return !this.stopped && !this.dispatcher.closing;
  }

  private async loop(): Promise<void> {
    const { store } = this.dispatcher.deps;
    while (this.running) {
      // Beyond this dispatcher's share: the next holder goes on from the cursor (a batch in hand goes again).
      if (this.yielding) return;
      try {
        const sub = await store.get(this.tenant, this.id);
        if (sub === undefined || sub.state !== 'active') return;
        if (this.stale) {
          // A commit failed or found the cursor moved: go on from what is stored once all settled.
          this.stale = false;
          await this.settle();
          this.basis = undefined;
          continue;
        }
        // Replayed, resumed or paused since what is in hand was read: start again from its cursor.
        // (A stored cursor that a commit in flight moves on is not a change.)
        if (
          this.basis === undefined ||
          this.basis.rev !== sub.rev ||
          (this.basis.cursor !== sub.cursor && !this.inFlight.includes(sub.cursor))
        ) {
          if (this.committing !== undefined) {
            // What was read may predate a commit that just ended: read again once all settled.
            await this.settle();
            continue;
          }
          this.basis = { rev: sub.rev, cursor: sub.cursor };
          this.pending = [];
          this.scanned = sub.cursor;
          this.more = false;
          this.batch = undefined;
          this.next = undefined;
        }
        if (this.batch === undefined) {
          const ready = await this.fill(sub);
          this.ok();
          if (ready === 'idle') {
            await this.sleeper.sleep(this.o.pollMs);
            continue;
          }
          if (typeof ready === 'number') {
            await this.sleeper.sleep(ready);
            continue;
          }
          if (ready === 'expired' || ready === 'moved') continue;
        }
        if (this.batch !== undefined) {
          await this.deliver(sub, this.batch);
          this.ok();
        }
      } catch (e) {
        if (!this.running) return;
        await this.retryAfter(e);
      }
    }
  }

  private matcherOf(sub: WebhookSubscription): Matcher {
    const json = JSON.stringify(sub.filter);
    if (this.filter?.json !== json) this.filter = { json, matcher: matcher(sub.filter) };
    return this.filter.matcher;
  }

  /** Its reader of the tenant's feed, taking the subscription's kinds. */
  private readerOf(sub: WebhookSubscription): { reader: FeedReader; kinds: ReadonlySet<KindSegment> | undefined } {
    const json = JSON.stringify(sub.kinds ?? null);
    if (this.kinds?.json !== json) this.kinds = { json, set: sub.kinds === undefined ? undefined : new Set<KindSegment>(sub.kinds) };
    const kinds = this.kinds.set;
    if (this.reader === undefined) this.reader = this.dispatcher.feed.join(this.tenant, kinds);
    else this.reader.kinds = kinds;
    return { reader: this.reader, kinds };
  }

  /**
   * Reads the feed after what was read, keeps the changes the subscription takes, and makes the
   * next batch when it is due. Answers: 'batch' (this.batch is set), 'idle' (nothing new), a wait
   * (ms) for a batch that is not full yet, 'moved' (only changes left out: the cursor moved on), or
   * 'expired' (paused: the feed no longer holds the changes after the cursor).
   */
  private async fill(sub: WebhookSubscription, after?: Batch): Promise<'batch' | 'idle' | 'moved' | 'expired' | number> {
    const { store } = this.dispatcher.deps;
    const size = this.o.batch;
    if (this.pending.length < size) {
      const m = this.matcherOf(sub);
      const { reader, kinds } = this.readerOf(sub);
      // Every change taken: a page; else up to readFactor pages.
      const pages = m.needsDocument || kinds !== undefined ? Math.max(1, this.o.readFactor) : 1;
      for (let read = 0; read < pages; read++) {
        let slice;
        try {
          slice = await reader.read(this.scanned);
        } catch (e) {
          if (!isCursorExpired(e)) throw e;
          // Ahead of a batch in flight: the loop finds it again, and pauses, once that batch is done.
          if (after !== undefined) return 'idle';
          const reason = `the change feed no longer holds the changes after cursor ${this.scanned ?? ''} (OTM_FEED_RETENTION): replay from a cursor it holds`;
          await store.pause(this.tenant, this.id, sub.rev, reason);
          this.log.warn({ subscription: this.id, tenant: this.tenant }, 'webhook dispatcher: paused, its cursor expired');
          return 'expired';
        }
        for (const c of slice.changes) {
          if (kinds !== undefined && !kinds.has(c.entry.kind)) continue;
          if (!m.needsDocument || m.matchesFacts(c.entry, () => c.facts())) this.pending.push(c);
        }
        if (slice.next !== undefined) this.scanned = slice.next;
        // A full read: the feed may hold more at once.
        this.more = slice.more;
        if (!this.more || this.pending.length >= size) break;
      }
      const more = this.more;
      if (this.pending.length === 0) {
        this.lagSeconds = 0;
        // Ahead of a batch in flight, the cursor is not moved: the loop does it after that batch.
        if (after !== undefined) return 'idle';
        const at = this.basis?.cursor;
        if (this.scanned !== undefined && this.scanned !== at) {
          // Only changes the subscription leaves out: move on without a POST (after the commits in flight).
          await this.settle();
          if (await store.advance(this.tenant, this.id, sub.rev, at, this.scanned)) this.basis = { rev: sub.rev, cursor: this.scanned };
          else this.stale = true;
          return 'moved';
        }
        return 'idle';
      }
      this.lagSeconds = Math.max(0, (Date.now() - this.pending[0]!.entry.at) / 1000);
      this.dispatcher.recordLag();
      if (this.pending.length < size) {
        if (more) return 0;
        // Not full, and nothing more yet: wait for more until the first change is lingerMs old.
        const wait = Math.min(this.pending[0]!.entry.at + this.o.lingerMs - Date.now(), this.o.lingerMs);
        if (wait > 0) return Math.min(wait, this.o.pollMs);
      }
    }
    // The batch: up to `size` changes and MAX_BATCH_BYTES (at least one).
    let n = 0;
    let bytes = 0;
    while (n < this.pending.length && n < size && (n === 0 || bytes + this.pending[n]!.itemLength() <= MAX_BATCH_BYTES)) {
      bytes += this.pending[n]!.itemLength();
      n++;
    }
    const items = this.pending.slice(0, n);
    const rest = this.pending.slice(n);
    // All that was read went: the cursor goes past what was read (changes left out included).
    const to = rest.length === 0 && this.scanned !== undefined ? this.scanned : items[items.length - 1]!.entry.cursor;
    const id = randomUUID();
    const made: Batch = {
      id,
      body: this.body(id, items),
      changes: items.length,
      firstCursor: items[0]!.entry.cursor,
      lastCursor: items[items.length - 1]!.entry.cursor,
      to,
      rev: after?.rev ?? sub.rev,
      from: after === undefined ? this.basis?.cursor : after.to,
      attempt: 0,
    };
    this.pending = rest;
    if (after === undefined) this.batch = made;
    else {
      const t = Math.floor(Date.now() / 1000);
      made.signed = { t, value: signature(sub.secret, made.body, t) };
      this.next = made;
    }
    return 'batch';
  }

  /** `{"deliveryId","subscription","changes":[<items>]}`, written in one buffer from the changes and their documents' bytes. */
  private body(id: string, items: readonly SharedChange[]): Buffer {
    const head = `{"deliveryId":${JSON.stringify(id)},"subscription":${JSON.stringify(this.id)},"changes":[`;
    let size = Buffer.byteLength(head) + 2 + Math.max(0, items.length - 1);
    for (const c of items) size += c.itemLength();
    const out = Buffer.allocUnsafe(size);
    let at = out.write(head, 0, 'utf8');
    items.forEach((c, i) => {
      if (i > 0) out[at++] = 0x2c; // ','
      at = c.writeItem(out, at);
    });
    out[at++] = 0x5d; // ']'
    out[at] = 0x7d; // '}'
    return out;
  }

  private async deliver(sub: WebhookSubscription, batch: Batch): Promise<void> {
    const { store } = this.dispatcher.deps;
    batch.attempt++;
    const { body } = batch;
    const at = Date.now();
    const t = Math.floor(at / 1000);
    const posting: Promise<AttemptResult> = this.dispatcher.client.post(
      sub.url,
      body,
      {
        'content-type': 'application/json',
        'user-agent': 'otm-webhooks/1',
        'otm-delivery': batch.id,
        'otm-signature': batch.signed?.t === t ? batch.signed.value : signature(sub.secret, body, t),
      },
      this.abort.signal,
    );
    // While the receiver reads it (a first attempt): the next page, if the next batch needs one and
    // the feed has more. In the next check phase: undici writes a request on a kept-alive connection
    // in one (setImmediate, after it looked whether the connection was closed), queued before this.
    if (batch.attempt === 1 && this.more && this.pending.length < this.o.batch && this.reader !== undefined) {
      const { reader, scanned } = this;
      setImmediate(() => reader.prefetch(scanned));
    }
    // Then the next batch itself, from that page (`next`): made and signed while the receiver reads
    // this one, so that it goes as soon as this one is answered. Only a full batch is made ahead.
    let preparing: Promise<unknown> | undefined;
    if (batch.attempt === 1 && this.next === undefined && (this.more || this.pending.length >= this.o.batch)) {
      preparing = new Promise<void>((resolve) => setImmediate(resolve))
        .then(() => (this.running ? this.fill(sub, batch) : undefined))
        .catch(() => {
          // Made again by the loop, which says why if it fails there too.
          this.next = undefined;
        });
    }
    const result = await posting;
    // What making it ahead changes (the changes pending, how far the feed was read) is settled first.
    if (preparing !== undefined) await preparing;
    // Stopped meanwhile (close, a lost lease): nothing is recorded; the batch goes again.
    if (!this.running) return;
    webhookAttempts.inc({ outcome: result.outcome });
    webhookAttemptSeconds.observe(result.durationMs / 1000);
    const attempt: DeliveryAttempt = {
      id: batch.id,
      at,
      attempt: batch.attempt,
      changes: batch.changes,
      firstCursor: batch.firstCursor,
      lastCursor: batch.lastCursor,
      outcome: result.outcome,
      ...(result.status === undefined ? {} : { status: result.status }),
      ...(result.error === undefined ? {} : { error: result.error }),
      durationMs: result.durationMs,
    };
    if (result.outcome === 'delivered') {
      webhookChanges.inc(batch.changes);
      this.batch = this.next;
      this.next = undefined;
      // Committed behind the next batch, in order (see `committing`): the attempt's record and the
      // cursor together (one LMDB commit, one Redis round trip each).
      const prev = this.committing;
      this.inFlight.push(batch.from);
      this.committing = (async () => {
        await prev;
        // After the next batch's POST is written (undici writes it in the check phase after the
        // loop asks for it): the receiver gets it first, then the record and the cursor are made.
        await afterNextWrite();
        try {
          const [, advanced] = await Promise.all([
            store.recordDelivery(this.tenant, this.id, attempt, KEPT_DELIVERIES),
            store.advance(this.tenant, this.id, batch.rev, batch.from, batch.to),
          ]);
          if (!advanced) this.stale = true;
        } catch (e) {
          this.stale = true;
          this.failed(e, 'webhook dispatcher: recording a delivery failed; it goes again');
        } finally {
          this.inFlight.splice(this.inFlight.indexOf(batch.from), 1);
        }
      })();
      this.basis = { rev: batch.rev, cursor: batch.to };
      this.scanned ??= batch.to;
      this.lagSeconds = this.pending.length === 0 ? 0 : Math.max(0, (Date.now() - this.pending[0]!.entry.at) / 1000);
      return;
    }
    // A failed attempt: what was delivered before it is committed first, so that the stored cursor
    // is where this batch starts (the waits below compare it).
    await this.settle();
    await store.recordDelivery(this.tenant, this.id, attempt, KEPT_DELIVERIES);
    const since = sub.failingSince ?? at;
    const reason = `${result.error ?? `HTTP ${result.status}`} (${batch.attempt} attempts since ${new Date(since).toISOString()})`;
    if (Date.now() - since >= this.o.retry.windowMs) {
      await store.pause(this.tenant, this.id, sub.rev, `deliveries failed for longer than the retry window: ${reason}`);
      this.log.warn({ subscription: this.id, tenant: this.tenant, reason }, 'webhook dispatcher: subscription paused');
      this.batch = undefined;
      this.next = undefined;
      return;
    }
    // Full jitter: anywhere from 0 to the doubled bound; checked every second for a replay or a delete.
    const bound = Math.min(this.o.retry.capMs, this.o.retry.baseMs * 2 ** Math.min(batch.attempt - 1, 30));
    const until = Date.now() + this.o.random() * bound;
    while (this.running && !this.yielding && Date.now() < until) {
      await this.sleeper.sleep(Math.min(until - Date.now(), 1_000));
      if (!this.running || Date.now() >= until) break;
      const now = await store.get(this.tenant, this.id).catch(() => sub);
      if (now === undefined || now.rev !== batch.rev || now.cursor !== batch.from || now.state !== 'active') break;
    }
  }
}
