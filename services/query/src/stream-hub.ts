/**
 * The streams of a process (`StreamHub`, stream.ts says what they promise): a reading per tenant
 * with streams open (stream-reader.ts), the slot each stream holds, the heartbeat, the position
 * snapshot.
 */
import { randomBytes } from 'node:crypto';
import {
  DEFAULT_SHARED_FEED_OPTIONS,
  LoopKind,
  SharedFeed,
  ThrottledLog,
  filterValues,
  parseChangeDocument,
  reasonOf,
  streamsOpen,
  tooManyStreams,
  unavailable,
  type FeedSource,
  type Logger,
  type Monitored,
  type StreamSlot,
  type StreamSlots,
} from '@otm/core';
import type { Finder } from './find.js';
import { positionJson } from './track-routes.js';
import { Client, type StreamFilter, type StreamSink } from './stream-client.js';
import { TenantReader } from './stream-reader.js';

/** Changes read at a time, by the shared reading and by a stream catching up. */
const PAGE = 1_000;
/** Positions (cursors) the shared reading remembers having passed, so that a stream catching up can tell whether it is behind it. */
const REMEMBERED = 10_000;

const HEARTBEAT = Buffer.from(': keep-alive\n\n');

export interface StreamOptions {
  /** Most streams one token may hold open (OTM_STREAMS_PER_TOKEN), as `slots` counts them; one more is a 429. */
  readonly perToken: number;
  /**
   * Where the streams of each token are counted: Redis (shared by every query process) with the
   * Redis entity store, else the process's own (embedded `MemoryStreamSlots`).
   */
  readonly slots: StreamSlots;
  /** How often a comment goes to every stream, so that proxies and clients see it alive, and its slot is renewed (default 15 s). */
  readonly heartbeatMs?: number;
  /** How long a slot is held from each renewal (default three heartbeats). */
  readonly slotTtlMs?: number;
  /** How long the shared reading waits when the feed has nothing new (default 50 ms). */
  readonly pollMs?: number;
  /** Most bytes waiting in a stream's socket buffer before it is cut off (default 8 MiB). */
  readonly maxPendingBytes?: number;
  /** The `retry:` a stream starts with: how long an EventSource waits before it reconnects (default 2 s). */
  readonly retryMs?: number;
  /** The `Retry-After` of a 429 (seconds, default 10). */
  readonly retryAfterSeconds?: number;
  /** Changes read at a time (default 1,000), and positions a reading remembers (default 10,000): for tests. */
  readonly pageSize?: number;
  readonly remembered?: number;
  readonly logger?: Logger;
}

/** What the stream reads: the feed with its documents (core `FeedSource`), and Finder's versions and positions. */
export type StreamSource = FeedSource & Pick<Finder, 'version' | 'positions'>;
/** One open stream, as the route holds it. */
export interface OpenStream {
  /** Starts sending (after the answer's head is written). */
  start(): void;
  /** The client went away. */
  close(): void;
}

/**
 * The streams of this process: a reading per tenant with streams open, the slot each stream holds,
 * the heartbeat (which renews the slots too).
 */
export class StreamHub {
  readonly pollMs: number;
  readonly pageSize: number;
  readonly remembered: number;
  readonly logger: Logger | undefined;
  private readonly heartbeatMs: number;
  private readonly maxPending: number;
  private readonly retry: Buffer;
  private readonly retryAfter: number;
  private readonly slots: StreamSlots;
  private readonly slotTtlMs: number;
  /** The feed as the tenants' readings read it (core shared-feed.ts). */
  readonly feed: SharedFeed;
  private readonly reading = new Map<string, TenantReader>();
  /** The tenants' readings as the probes and metrics see them. */
  readonly readers = new LoopKind('stream-reader', 'stream reader');
  /** Failures that end a stream, logged a line a while. */
  private readonly endings = new ThrottledLog(10_000);
  /** Every open stream, with the slot it holds. */
  private readonly clients = new Map<Client, StreamSlot>();
  private heartbeat: NodeJS.Timeout | undefined;
  /** A renewal of the slots is under way (the next heartbeat does not start another). */
  private renewing = false;
  /** When a failure of the slots' store was last logged (at most once a minute). */
  private slotWarnedAt = -Infinity;
  /** Wakes each pending `sleep`. */
  private readonly sleeping = new Set<() => void>();
  private closed = false;

  constructor(
    readonly source: StreamSource,
    private readonly opts: StreamOptions,
  ) {
    this.pollMs = opts.pollMs ?? 50;
    this.pageSize = opts.pageSize ?? PAGE;
    this.remembered = opts.remembered ?? REMEMBERED;
    this.heartbeatMs = opts.heartbeatMs ?? 15_000;
    this.maxPending = opts.maxPendingBytes ?? 8 * 1024 * 1024;
    this.retry = Buffer.from(`retry: ${opts.retryMs ?? 2_000}\n\n`);
    this.retryAfter = opts.retryAfterSeconds ?? 10;
    this.slots = opts.slots;
    this.slotTtlMs = opts.slotTtlMs ?? 3 * this.heartbeatMs;
    this.logger = opts.logger;
    this.feed = new SharedFeed(source, { ...DEFAULT_SHARED_FEED_OPTIONS, pageSize: this.pageSize });
  }

  /** What /readyz and /healthz read: the tenants' readings that are down. */
  parts(): Monitored[] {
    return this.readers.monitored();
  }

  /** Streams open now (all tenants). */
  get size(): number {
    return this.clients.size;
  }

  /** Waits `ms`, or less when the hub closes (which clears every timer). */
  sleep(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.sleeping.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.sleeping.add(wake);
    });
  }

  forget(reader: TenantReader): void {
    if (this.reading.get(reader.tenant) === reader) this.reading.delete(reader.tenant);
  }

  /**
   * Opens a stream of `tenant` for the token `owner` (a reference, never the token): it takes one
   * of the token's OTM_STREAMS_PER_TOKEN slots (429 beyond them; let through uncounted should the
   * slots' store fail), starts from `from` (a cursor: 400 when it is not one of this feed, 410 when
   * older than the feed keeps) or from the feed's end. Fails before anything is written, its slot
   * released; `start` it once the answer's head is.
   */
  async open(o: {
    tenant: string;
    owner: string;
    filter: StreamFilter;
    from?: string;
    snapshot?: boolean;
    sink: StreamSink;
  }): Promise<OpenStream> {
    if (this.closed) throw unavailable('the service is stopping', 1);
    const slot: StreamSlot = { owner: o.owner, id: randomBytes(12).toString('base64url') };
    if (!(await this.acquire(slot))) {
      throw tooManyStreams(
        `this token has ${this.opts.perToken} streams open, the most allowed (OTM_STREAMS_PER_TOKEN): close one, or try again later`,
        this.retryAfter,
      );
    }
    if (this.closed) {
      this.release(slot);
      throw unavailable('the service is stopping', 1);
    }
    let reader = this.reading.get(o.tenant);
    if (reader === undefined) this.reading.set(o.tenant, (reader = new TenantReader(o.tenant, this)));
    const r = reader;
    const client = new Client(o.filter, o.sink, this.maxPending, (c) => {
      this.clients.delete(c);
      streamsOpen.dec();
      this.release(slot);
      r.remove(c);
      if (this.clients.size === 0) this.stopHeartbeat();
    });
    this.clients.set(client, slot);
    streamsOpen.inc();
    r.add(client);
    try {
      await r.ready;
      // A cursor that is not one of this feed's, or one older than it keeps, is answered now.
      if (o.from !== undefined) await this.source.feed.read({ tenant: o.tenant, after: o.from, limit: 1 });
    } catch (e) {
      client.close();
      throw e;
    }
    if (client.closed) throw unavailable('the service is stopping', 1);
    return {
      start: () => void this.start(r, client, o.from, o.snapshot === true),
      close: () => client.close(),
    };
  }

  private async start(r: TenantReader, c: Client, from: string | undefined, snapshot: boolean): Promise<void> {
    if (c.closed) return;
    c.started = true;
    c.send(this.retry);
    this.startHeartbeat();
    try {
      if (from === undefined) {
        // From the reading's position: that is "now". A snapshot is read after the stream is
        // attached, so that no position moved by a later change is missed; those changes wait.
        if (snapshot) c.hold();
        r.attach(c);
        if (snapshot) {
          await this.positions(r.tenant, c);
          c.release();
        }
      } else {
        if (snapshot) await this.positions(r.tenant, c);
        await r.catchUp(c, from);
      }
    } catch (e) {
      if (c.closed) return;
      const err = reasonOf(e);
      const { log, skipped } = this.endings.take(err);
      if (log)
        this.logger?.warn({ err, tenant: r.tenant, ...(skipped > 0 ? { alsoEnded: skipped } : {}) }, 'stream: ended after a failure');
      c.end();
    }
  }

  /** The latest positions of the vehicles the stream follows (all, that of its vehicle, those of its trip), as `position` events. */
  private async positions(tenant: string, c: Client): Promise<void> {
    let all = await this.source.positions(tenant, undefined, undefined);
    const f = c.filter;
    if (f.vehicle !== undefined) all = all.filter((p) => p.vehicle === f.vehicle);
    else if (f.trip !== undefined) {
      const trip = parseChangeDocument((await this.source.version(tenant, 'trips', f.trip, undefined))?.json);
      const vehicles = new Set(trip === undefined ? [] : filterValues('trips', trip, 'vehicle'));
      all = all.filter((p) => vehicles.has(p.vehicle));
    }
    const head = Buffer.from('event: position\ndata: ');
    const tail = Buffer.from('\n\n');
    let parts: Buffer[] = [];
    let size = 0;
    const flush = async () => {
      if (parts.length === 0 || c.closed) return;
      c.sink.write(Buffer.concat(parts, size));
      parts = [];
      size = 0;
      await c.drained();
    };
    for (const p of all) {
      const json = positionJson(p);
      parts.push(head, json, tail);
      size += head.length + json.length + tail.length;
      if (size >= 256 * 1024) await flush();
    }
    await flush();
  }

  /** Takes the stream's slot; true as well when the slots' store failed (they fail open). */
  private async acquire(slot: StreamSlot): Promise<boolean> {
    try {
      return await this.slots.acquire(slot, this.opts.perToken, this.slotTtlMs);
    } catch (err) {
      this.slotFailure(err, 'stream: counting the streams of a token failed: streams open uncounted until it works again');
      return true;
    }
  }

  /** Frees the slot; should that fail, it expires within slotTtlMs. */
  private release(slot: StreamSlot): void {
    // Nothing waits for it: a failure is logged, and the slot expires by itself.
    void this.slots
      .release(slot)
      .catch((err: unknown) => this.slotFailure(err, 'stream: freeing the slot of a stream failed: it expires by itself'));
  }

  /** Renews the slot of every open stream (on the heartbeat); one renewal at a time. */
  private renew(): void {
    if (this.renewing || this.clients.size === 0) return;
    this.renewing = true;
    // Nothing waits for it: a failure is logged, and the next heartbeat renews them all again.
    void this.slots
      .renew([...this.clients.values()], this.slotTtlMs)
      .catch((err: unknown) => this.slotFailure(err, 'stream: renewing the slots of the open streams failed; trying again'))
      .finally(() => {
        this.renewing = false;
      });
  }

  private slotFailure(err: unknown, message: string): void {
    const now = Date.now();
    if (now - this.slotWarnedAt < 60_000) return;
    this.slotWarnedAt = now;
    this.logger?.warn({ err }, message);
  }

  private startHeartbeat(): void {
    if (this.heartbeat !== undefined || this.closed) return;
    this.heartbeat = setInterval(() => {
      for (const c of this.clients.keys()) if (c.started && !c.holding) c.send(HEARTBEAT);
      this.renew();
    }, this.heartbeatMs);
    this.heartbeat.unref();
  }

  private stopHeartbeat(): void {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }

  /** Ends every stream and reading, at once (clients resume elsewhere with their Last-Event-ID). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const wake of [...this.sleeping]) wake();
    this.stopHeartbeat();
    for (const r of [...this.reading.values()]) r.stop();
    for (const c of [...this.clients.keys()]) c.end();
  }
}
