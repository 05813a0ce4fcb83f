/**
 * The delivery loop of one subscription (dispatcher.ts says what it promises): reads its tenant's
 * feed through the shared reading (core shared-feed.ts), makes batches, POSTs them, commits the
 * cursor behind them, and retries what fails.
 */
import { randomUUID } from 'node:crypto';
import type { KindSegment } from '@otm/model';
import {
  ErrorCode,
  OtmServiceError,
  backoffDelay,
  webhookAttempts,
  webhookAttemptSeconds,
  webhookChanges,
  type DeliveryAttempt,
  type FeedReader,
  type Logger,
  type PartState,
  type SharedChange,
  type WebhookSubscription,
} from '@otm/core';
import { signature, type AttemptResult } from './deliver.js';
import type { Dispatcher } from './dispatcher.js';
import { matcher, type Matcher } from './filter.js';
import { KEPT_DELIVERIES, MAX_BATCH_BYTES, SUBSCRIPTION_RETRY_CAP_MS, type DispatcherOptions } from './options.js';
import { Sleeper } from './sleeper.js';

const isCursorExpired = (e: unknown): boolean => e instanceof OtmServiceError && e.code === ErrorCode.cursorExpired;

/** Resolves in the second check phase from now: after what `setImmediate` queues meanwhile. */
const afterNextWrite = (): Promise<void> => new Promise((resolve) => setImmediate(() => setImmediate(resolve)));

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

/** The delivery loop of one subscription, while this dispatcher holds its lease. */
export class SubscriptionLoop {
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
