/**
 * The dispatcher: delivers each active webhook subscription's changes, read from the tenant's
 * change feed after the subscription's cursor, as signed JSON POSTs of batches, at least once.
 *
 * - One loop per subscription (`SubscriptionLoop`), each its own promise: a slow or failing
 *   receiver delays only its own subscription.
 * - A loop (subscription-loop.ts) reads the feed after its cursor, with the documents, through the
 *   tenant's shared reading (core shared-feed.ts: the subscriptions of one tenant read each page
 *   of the feed once, and each change's item is made once), keeps the changes of its kinds that
 *   its filter takes (filter.ts), items exactly as `GET /api/v5/changes` makes them (core
 *   feed-item.ts `changeItem`). A batch goes when it
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
 * - The shared feed (core shared-feed.ts) runs nothing of its own: a read that fails rejects to the
 *   loops that wait for it, which report and retry it, and is not kept.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import {
  DEFAULT_SHARED_FEED_OPTIONS,
  LoopKind,
  SharedFeed,
  supervise,
  webhookLag,
  webhookSubscriptions,
  webhookSubscriptionsHeld,
  type Monitored,
  type Supervised,
} from '@otm/core';
import { WebhookClient } from './deliver.js';
import { DEFAULT_DISPATCHER_OPTIONS, SCAN_RETRY_CAP_MS, type DispatcherDeps, type DispatcherOptions } from './options.js';
import { Sleeper } from './sleeper.js';
import { TargetRule } from './ssrf.js';
import { SubscriptionLoop } from './subscription-loop.js';

export {
  DEFAULT_DISPATCHER_OPTIONS,
  KEPT_DELIVERIES,
  MAX_BATCH_BYTES,
  SCAN_RETRY_CAP_MS,
  SUBSCRIPTION_RETRY_CAP_MS,
  type DispatchSource,
  type DispatcherDeps,
  type DispatcherOptions,
  type RetryPolicy,
} from './options.js';

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export class Dispatcher {
  readonly owner = `${os.hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`;
  readonly options: DispatcherOptions;
  readonly client: WebhookClient;
  /** The feed as the subscriptions read it: each page once per tenant (core shared-feed.ts). */
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
