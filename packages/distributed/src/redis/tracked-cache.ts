/**
 * The latest version of recently read entities, kept in the reading process and dropped as soon as
 * Redis says the entity changed: Redis's server-assisted client-side caching (`CLIENT TRACKING`,
 * Redis 6 or later). Carriers poll the same trips over and over; answered from memory a GET of a
 * trip costs the query process much less CPU than one that asks Redis (and Redis nothing), as the
 * embedded store's own cache does (packages/embedded/src/lmdb-store.ts).
 *
 * How it stays exact: the connection that reads entities has tracking on, so Redis remembers each
 * key it read for the cache and, when any client changes or removes that key, sends the key's name to a second
 * connection of ours subscribed to `__redis__:invalidate` (tracking in `REDIRECT` mode: ioredis
 * does not hand RESP3 `invalidate` pushes to its user, so that connection speaks RESP2, where they
 * arrive as pub/sub messages). That drops the key here. A read still under way when its key is
 * dropped is not kept (its answer may be older than the change), and nothing is kept unless
 * tracking is known to be on: whenever either connection closes, the cache is emptied and stays
 * unused until tracking is on again on the new connections, both on the same server (INFO's
 * `run_id`: after a failover the listener's client id may name another client of the new
 * primary). The store's own units `drop` the keys they wrote as soon as Redis answered their EXEC,
 * so this process reads its own writes at once; another process's write is seen here once its
 * invalidation arrived, which on one network follows that write closely.
 *
 * Tracking is in OPTIN mode: Redis remembers only the reads that the caller marks (`read` tells it
 * whether to send `CLIENT CACHING YES` just before its read), so that GETs of events, which the
 * query first looks for here and mostly finds in ClickHouse, do not fill Redis's tracking table
 * (bounded by `tracking-table-max-keys`, memory for each key) with keys that do not exist.
 *
 * Without tracking (a Redis before 6, a proxy that refuses CLIENT TRACKING or SUBSCRIBE) the
 * cache stays off and every GET asks Redis.
 *
 * Recovery (issue 36): a setup step that fails without a refusal (no answer in time, a connection
 * that broke, Redis loading) is not the end of the cache: the listener's setup is started again
 * on a new connection (ioredis reconnects it), the reader's is tried again, after a pause drawn
 * between half and all of a bound doubling from 500 ms to 30 s, each attempt logged with its
 * cause; only an error answer (the server or a proxy refusing a command) turns the cache off for
 * good. The cache is not a part of the process's health (core health.ts): without it every GET is
 * still answered, from Redis; `otm_entity_cache_tracking` says whether it is on.
 */
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { LATEST_CACHE_BOUNDS, backoffDelay, keptSize, keptVersion, reasonOf, watchLatestCache, type StoredDocument } from '@otm/core';
import { entityCacheReads, entityCacheTracking } from './metrics.js';

const CHANNEL = '__redis__:invalidate';
const hits = entityCacheReads.labels('hit');
const misses = entityCacheReads.labels('miss');

/** The `run_id` of INFO SERVER: which server process a connection is on. */
const runId = (info: string): string | undefined => /^run_id:(\w+)/m.exec(info)?.[1];

/** Error answers that say "not now" rather than "never": the setup is tried again after them. */
const TRANSIENT_REPLY = /^(LOADING|BUSY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN)\b/;

/** Whether the server (or a proxy) refused the command: an error answer that a retry does not change. */
const isRefusal = (e: unknown): boolean => e instanceof Error && e.name === 'ReplyError' && !TRANSIENT_REPLY.test(e.message);

/** A read of one key under way, and whether its key was dropped meanwhile. */
interface InFlight {
  n: number;
  stale: boolean;
}

export class TrackedCache {
  private readonly latest = new LRUCache<string, StoredDocument>({
    ...LATEST_CACHE_BOUNDS,
    // Its bytes alone (keptVersion).
    sizeCalculation: keptSize,
  });
  /** Stops counting `latest` in the cache gauges (otm_entity_cache_*). */
  private readonly unwatch = watchLatestCache(this.latest);
  private readonly reading = new Map<string, InFlight>();
  /** Tracking is on for the reading connection and its invalidations reach `listener`. */
  private live = false;
  /** Bumped whenever tracking may have lapsed: a read begun before is not kept. */
  private session = 0;
  private listenerId: number | undefined;
  /**
   * The server the listener is on (its `run_id`): tracking is pointed at the listener's client id
   * only from a reader on that same server, since after a failover another server's client may
   * bear the same id.
   */
  private listenerServer: string | undefined;
  /**
   * Bumped on each connection and each close of the listener: a `subscribe` begun on an earlier
   * connection, whose answers may come late, must not name that connection's client id.
   */
  private listenerEpoch = 0;
  private readonly listener: Redis;
  private closed = false;
  /** Setup steps failed in a row without a refusal: the backoff's attempt. */
  private setupFailures = 0;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    /** The connection entities are read on. */
    private readonly reader: Redis,
    private readonly warn: (message: string) => void = () => {},
  ) {
    this.listener = reader.duplicate({ protocol: 2, autoResubscribe: false, enableAutoPipelining: false });
    this.listener.on('error', () => {});
    this.listener.on('messageBuffer', (channel: Buffer, message: unknown) => {
      if (channel.toString() !== CHANNEL) return;
      // A list of key names; null when Redis dropped everything (FLUSHALL, FLUSHDB).
      if (Array.isArray(message)) for (const k of message) this.drop(String(k));
      else this.lapse();
    });
    this.listener.on('close', () => {
      this.listenerEpoch++;
      this.listenerId = undefined;
      this.listenerServer = undefined;
      this.lapse();
    });
    this.listener.on('ready', () => void this.subscribe(++this.listenerEpoch));
    this.reader.on('close', () => this.lapse());
    this.reader.on('ready', () => void this.track());
    // The reader may be connected already.
    if (this.reader.status === 'ready') void this.track();
  }

  /** Whether documents are kept now (tests). */
  get tracking(): boolean {
    return this.live;
  }

  /** The kept latest version of `key`, if any. */
  get(key: string): StoredDocument | undefined {
    if (!this.live) return undefined;
    const doc = this.latest.get(key);
    if (doc !== undefined) hits.inc();
    return doc;
  }

  /**
   * Reads `key` with `read` and keeps what it found, unless the key was dropped or tracking lapsed
   * while the read was under way. `read(true)` must send `CLIENT CACHING YES` on the reading
   * connection right before its read, in the same turn, and `drop(key)` should that fail.
   */
  async read(key: string, read: (track: boolean) => Promise<StoredDocument | undefined>): Promise<StoredDocument | undefined> {
    if (!this.live) return read(false);
    misses.inc();
    const session = this.session;
    let f = this.reading.get(key);
    if (f === undefined) this.reading.set(key, (f = { n: 0, stale: false }));
    f.n++;
    try {
      const doc = await read(true);
      if (doc === undefined || f.stale || session !== this.session || !this.live) return doc;
      // Its bytes in memory of their own: ioredis answers with a view of the socket chunk the reply came in.
      const kept = keptVersion(doc);
      this.latest.set(key, kept);
      return kept;
    } finally {
      if (--f.n === 0 && this.reading.get(key) === f) this.reading.delete(key);
    }
  }

  /** Drops `key`: Redis said it changed, or this process changed it. */
  drop(key: string): void {
    this.latest.delete(key);
    const f = this.reading.get(key);
    if (f !== undefined) f.stale = true;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.unwatch();
    this.lapse();
    await this.listener.quit().catch(() => this.listener.disconnect());
  }

  private lapse(): void {
    this.session++;
    this.live = false;
    entityCacheTracking.set(0);
    this.latest.clear();
    for (const f of this.reading.values()) f.stale = true;
  }

  /**
   * On each connection of the listener: learn its id, subscribe, then point tracking at it. Does
   * nothing once the listener has closed or connected again since (`epoch`): the newer
   * connection's own call does it, and this one's answers may describe the old connection.
   */
  private async subscribe(epoch: number): Promise<void> {
    const current = () => epoch === this.listenerEpoch && !this.closed;
    try {
      const id = Number(await this.listener.client('ID'));
      const server = runId(await this.listener.info('server'));
      await this.listener.subscribe(CHANNEL);
      if (!current()) return;
      this.listenerId = id;
      this.listenerServer = server;
      await this.track();
    } catch (e) {
      // Set up again on a new connection (its `ready` calls this), unless the listener moved on meanwhile.
      if (current()) this.failed(e, () => current() && this.listener.disconnect(true));
    }
  }

  private refused(e: unknown): void {
    if (!this.closed) this.warn(`redis: no client-side cache (${(e as Error)?.message ?? e}): every GET asks Redis`);
  }

  /** A setup step failed: refused for good, or `again` after a backoff (see the top). */
  private failed(e: unknown, again: () => unknown): void {
    if (this.closed) return;
    if (isRefusal(e)) return this.refused(e);
    this.setupFailures++;
    const delay = backoffDelay(this.setupFailures, { initialMs: 500, maxMs: 30_000 });
    this.warn(`redis: client-side cache off for now (${reasonOf(e)}): setting it up again in ${delay} ms (attempt ${this.setupFailures})`);
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (!this.closed) again();
    }, delay);
    this.retryTimer.unref();
  }

  /** Turns tracking on for the reader, sending invalidations to the listener; then keeps documents. */
  private async track(): Promise<void> {
    const id = this.listenerId;
    const server = this.listenerServer;
    if (id === undefined || this.reader.status !== 'ready' || this.closed) return;
    const session = this.session;
    try {
      // Not the listener's server (a failover moved one connection and not yet the other): wait
      // for the listener's next connection, which calls this again.
      if (runId(await this.reader.info('server')) !== server) return;
      await this.reader.call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', String(id), 'OPTIN');
    } catch (e) {
      // A connection that closed meanwhile is no refusal: its next `ready` calls this again.
      if (session === this.session) this.failed(e, () => session === this.session && this.track());
      return;
    }
    // Only if neither connection closed meanwhile, and the listener is still the one named.
    if (session === this.session && this.listenerId === id && !this.closed) {
      this.live = true;
      this.setupFailures = 0;
      entityCacheTracking.set(1);
    }
  }
}
