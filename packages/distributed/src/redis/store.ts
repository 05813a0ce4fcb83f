/**
 * The entity store of the distributed deployment on Redis (ioredis): the `EntityStore` port, with
 * the same semantics as the embedded LMDB store (packages/embedded/src/lmdb-store.ts) and the same
 * value encoding. Its keys are laid out in `keys.ts`, units of work (MULTI/EXEC) are
 * `transactions.ts`, the cache of latest versions `tracked-cache.ts`, lists by facet `lists.ts`, the change feed `feed.ts` (and what the entity export needs besides it, `feed-export.ts`), latest
 * positions `positions.ts`, the typing of failures `errors.ts`.
 * The store owns the connection GETs are read on (or uses one handed in), the units' connection
 * and the cache's listening connection; `close()` ends those it made.
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { KindSegment } from '@otm/model';
import {
  AdapterError,
  WriteState,
  type Monitored,
  decodeVersionBytes,
  type EntityStore,
  type EntityTx,
  type ListPosition,
  type ListScan,
  type StoredDocument,
  type TelemetrySideEffects,
} from '@otm/core';
import { redisFailure } from './errors.js';
import { DEFAULT_FEED_RETENTION_MS, RedisFeed } from './feed.js';
import { RedisFeedExport } from './feed-export.js';
import { Keys } from './keys.js';
import { listBounds, parseListMember } from './lists.js';
import { RedisPositions } from './positions.js';
import { RedisSubscriptionStore } from './subscriptions.js';
import { RedisRateLimiter } from './rate-limit.js';
import { RedisStreamSlots } from './stream-slots.js';
import { RedisApiKeyStore } from './api-keys.js';
import { TrackedCache } from './tracked-cache.js';
import { Units } from './transactions.js';

export interface RedisEntityStoreOptions {
  /** `redis://[user:password@]host:port[/db]` (or `rediss://`). Ignored when `client` is given. */
  readonly url?: string;
  /** A ready ioredis client (single node or Cluster); the store does not close it. */
  readonly client?: Redis | Cluster;
  /** Prefix of every key. Default `otm`. */
  readonly prefix?: string;
  /** Bound on each command (ms); a slower answer is a retryable 503. Default 5000. */
  readonly commandTimeoutMs?: number;
  /** After each commit, WAIT for this many replicas (default 0: no wait). */
  readonly waitForReplicas?: number;
  /** How long WAIT may take (ms). Default 1000. */
  readonly waitTimeoutMs?: number;
  /**
   * Keep the latest version of recently read entities in this process, dropped when Redis says
   * they changed (tracked-cache.ts; Redis 6 or later, a single node, a client this store makes).
   * Default true.
   */
  readonly cacheLatest?: boolean;
  /** Told when the cache cannot be used (the server refused CLIENT TRACKING, say). */
  readonly warn?: (message: string) => void;
  /**
   * How long the change feed keeps changes (ms; OTM_FEED_RETENTION). Default 7 days. Every change
   * kept costs Redis memory (feed.ts says how much).
   */
  readonly feedRetentionMs?: number;
}

export class RedisEntityStore implements EntityStore {
  private readonly redis: Redis | Cluster;
  private readonly ownsClient: boolean;
  private readonly keys: Keys;
  private readonly commandTimeoutMs: number;
  private readonly cache: TrackedCache | undefined;
  private readonly units: Units;
  readonly feed: RedisFeed;
  /** What the entity export needs besides the feed (feed-export.ts). */
  readonly feedExport: RedisFeedExport;
  readonly positions: RedisPositions;
  readonly telemetry: TelemetrySideEffects;
  /** Webhook subscriptions, on this store's connection and key prefix (subscriptions.ts). */
  readonly subscriptions: RedisSubscriptionStore;
  /** API keys (`otm keys`), on this store's connection and key prefix (api-keys.ts). */
  readonly apiKeys: RedisApiKeyStore;
  /** The quotas' limiter, shared by every process on this Redis (rate-limit.ts). */
  readonly rateLimiter: RedisRateLimiter;
  /** The slots of open streams (OTM_STREAMS_PER_TOKEN), shared by every process on this Redis (stream-slots.ts). */
  readonly streamSlots: RedisStreamSlots;

  constructor(opts: RedisEntityStoreOptions) {
    this.commandTimeoutMs = opts.commandTimeoutMs ?? 5_000;
    this.keys = new Keys(opts.prefix ?? 'otm');
    if (opts.client) {
      this.redis = opts.client;
      this.ownsClient = false;
    } else {
      if (!opts.url || !/^rediss?:\/\//.test(opts.url)) {
        throw new AdapterError('redis', `RedisEntityStore: a redis:// URL is needed, got ${JSON.stringify(opts.url)}`, {
          retryable: false,
        });
      }
      const options: RedisOptions = {
        // Bounded waits: a Redis that is down answers 503 (retried by the worker), never a hang.
        maxRetriesPerRequest: 1,
        connectTimeout: Math.min(this.commandTimeoutMs, 5_000),
        commandTimeout: this.commandTimeoutMs,
        lazyConnect: false,
        // Not on this connection, which serves GETs: ioredis gathers the commands of one tick into
        // a pipeline, which costs more CPU a command than it saves when GETs come from many
        // concurrent clients (`bench/diag/http/cpu-per-request.mjs get-trip-redis` compares them).
        enableAutoPipelining: false,
      };
      this.redis = new Redis(opts.url, options);
      // Connection errors surface through the commands; without a listener ioredis prints them.
      this.redis.on('error', () => {});
      this.ownsClient = true;
    }
    this.cache =
      opts.cacheLatest !== false && this.ownsClient && this.redis instanceof Redis ? new TrackedCache(this.redis, opts.warn) : undefined;
    const feedRetentionMs = opts.feedRetentionMs ?? DEFAULT_FEED_RETENTION_MS;
    if (!(feedRetentionMs > 0)) {
      throw new AdapterError('redis', `RedisEntityStore: feedRetentionMs must be positive, got ${feedRetentionMs}`, { retryable: false });
    }
    this.units = new Units({
      redis: this.redis,
      keys: this.keys,
      guard: this.guard,
      cache: this.cache,
      waitForReplicas: opts.waitForReplicas ?? 0,
      waitTimeoutMs: opts.waitTimeoutMs ?? 1_000,
      feedRetentionMs,
    });
    this.feed = new RedisFeed(this.redis, this.keys, this.guard, feedRetentionMs);
    this.feedExport = new RedisFeedExport(this.redis, this.keys, this.guard);
    this.positions = new RedisPositions(this.redis, this.keys, this.guard);
    this.subscriptions = new RedisSubscriptionStore(this.redis, this.keys, this.guard);
    this.apiKeys = new RedisApiKeyStore(this.redis, opts.prefix ?? 'otm', this.guard);
    this.rateLimiter = new RedisRateLimiter(this.redis, opts.prefix ?? 'otm');
    this.streamSlots = new RedisStreamSlots(this.redis, opts.prefix ?? 'otm');
    this.telemetry = {
      appendFeed: (entries) => this.wrote(this.feed.append(entries)),
      updatePositions: (fixes) => this.wrote(this.positions.update(fixes)),
    };
  }

  /**
   * Turns Redis failures into typed errors (errors.ts: mostly retryable 503s), and bounds the
   * wait. A client this store made has ioredis's own `commandTimeout`, so only the error needs
   * mapping (no second timer per command: a GET costs one Redis command); a client handed in may
   * have no timeout, so its wait is bounded here.
   */
  private guard = <T>(p: Promise<T>): Promise<T> => (this.ownsClient ? p.catch(this.toFailure) : this.bounded(p));

  private readonly toFailure = (e: unknown): never => {
    throw redisFailure(e, this.writes);
  };

  /** Whether Redis takes writes: down from one refused for lack of memory until a write succeeds (errors.ts). */
  readonly writes = new WriteState('redis');

  /** The store's write state, for the process's /readyz (core/health.ts). */
  parts(): Monitored[] {
    return [this.writes.part];
  }

  /** A write's outcome: a success tells the write state Redis takes writes again. */
  private wrote<T>(p: Promise<T>): Promise<T> {
    return p.then((r) => {
      this.writes.ok();
      return r;
    });
  }

  private async bounded<T>(p: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        p,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new AdapterError('redis', `no answer within ${this.commandTimeoutMs} ms`, { retryable: true })),
            this.commandTimeoutMs,
          );
        }),
      ]);
    } catch (e) {
      return this.toFailure(e);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Whether GETs may be answered from this process's cache now (Redis confirmed tracking). */
  get cachingLatest(): boolean {
    return this.cache?.tracking ?? false;
  }

  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const ek = this.keys.entity(tenant, kind, key);
    if (lifecycleRank !== undefined) {
      const raw = await this.guard(this.redis.hgetBuffer(ek, String(lifecycleRank)));
      return raw === null ? undefined : decodeVersionBytes(kind, key, lifecycleRank, raw);
    }
    // Events are not kept: the query asks here first for every event, and most are in ClickHouse.
    const cache = kind === 'events' ? undefined : this.cache;
    const cached = cache?.get(ek);
    if (cached !== undefined) return cached;
    const read = async (track: boolean): Promise<StoredDocument | undefined> => {
      // Tracked by Redis only when asked just before the read, on the same connection (OPTIN).
      const tracked = track
        ? this.redis.call('CLIENT', 'CACHING', 'YES').then(
            () => true,
            () => false,
          )
        : undefined;
      // As bytes: the answer is sent as it was stored, with no UTF-8 decoding and encoding again.
      const all = await this.guard(this.redis.hgetallBuffer(ek));
      if (tracked !== undefined && !(await tracked)) cache!.drop(ek);
      const ranks = Object.keys(all).map(Number);
      if (ranks.length === 0) return undefined;
      const top = Math.max(...ranks);
      return decodeVersionBytes(kind, key, top, all[String(top)]!);
    };
    return cache ? cache.read(ek, read) : read(false);
  }

  /** A page of a list: one ZRANGEBYLEX (lists.ts). */
  async list(scan: ListScan): Promise<ListPosition[]> {
    const bounds = listBounds(scan);
    if (bounds === undefined || !(scan.limit > 0)) return [];
    const key = this.keys.list(scan.tenant, scan.kind, scan.facet);
    const members = await this.guard(this.redis.zrangebylex(key, bounds.min, bounds.max, 'LIMIT', 0, Math.floor(scan.limit)));
    return members.map(parseListMember);
  }

  /** A unit of work: reads through its own writes, one MULTI/EXEC (transactions.ts). */
  unit<T>(work: (tx: EntityTx) => Promise<T>): Promise<T> {
    return this.wrote(this.units.run(work));
  }

  async ready(): Promise<boolean> {
    try {
      return (await this.guard(this.redis.ping())) === 'PONG';
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.cache?.close();
    await this.units.close();
    if (!this.ownsClient) return;
    try {
      await this.redis.quit();
    } catch {
      this.redis.disconnect();
    }
  }
}
