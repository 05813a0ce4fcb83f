/**
 * The entity store of the distributed deployment on Redis (ioredis). Same semantics as the
 * embedded LMDB store (packages/embedded/src/lmdb-store.ts), same value encoding.
 *
 * Keys (`P` = the key prefix, default `otm`; `{t:k:id}` = tenant, kind and storage key, escaped,
 * used as the Redis Cluster hash tag so that every key of one entity lives in one slot):
 * - `P:e:{t:k:id}` hash: field = lifecycle rank `0`..`5`, value = `${modified} ${acceptedAt}\n${json}`
 *   (the version stamp, then the document as answered). GET without a rank takes the highest.
 * - `P:h:{t:k:id}` set: the entities holding this one inline, members `holderKind\0holderKey\0rank`.
 * - `P:p:{t:k:id}` sorted set + `P:pe:{t:k:id}` hash: effects waiting for this entity. Score =
 *   acceptedAt, member = `${acceptedAt padded to 15 digits}\0${eventKey}` (so equal scores are
 *   ordered by event key, exactly like the LMDB key), the hash maps the member to the effect's JSON.
 *
 * A unit of work reads Redis through an overlay of its own writes and commits them all in one
 * MULTI/EXEC: atomic and isolated on a single Redis (primary). Units on one entity are mostly
 * serialised by the bus (one partition per key, one consumer per partition); an entity held inline
 * by documents of two partitions is not, so on a single Redis the commit is also conditional: the
 * unit WATCHes every key it reads and runs again if another worker changed one before its EXEC.
 *
 * Redis Cluster: a unit may span entities in different slots, and MULTI cannot cross slots. With
 * an ioredis `Cluster` client the writes are grouped by hash tag (one entity = one slot) and each
 * group is committed in its own MULTI/EXEC, all groups in parallel: every entity changes
 * atomically, the unit as a whole does not. A worker that dies between groups leaves some entities
 * of the batch written and others not; the batch is then replayed (offsets are committed only
 * after the unit resolved) and the replay is idempotent (puts by id and rank, sets, sorted sets), so
 * the state converges to the same result.
 *
 * Durability: `unit` resolves when Redis answered EXEC, so a write is as durable as the server's
 * persistence: run Redis with `appendonly yes` and `appendfsync always` (every acknowledged write
 * survives a crash of the server) or `everysec` (up to ~1 s of acknowledged writes can be lost on a
 * power loss, not on a process crash). With replicas, set `waitForReplicas` so that a unit also
 * waits (`WAIT n ms`) until n replicas have the writes; if they do not confirm in time the unit
 * rejects with a retryable error (the writes stay on the primary; the replay is harmless).
 */
import { Cluster, Redis, type ChainableCommander, type RedisOptions } from 'ioredis';
import type { KindSegment } from '@otm/model';
import { decodeVersion, decodeVersionBytes, encodeVersion, unavailable, type EntityStore, type EntityTx, type HolderRef, type PendingEffect, type StoredDocument, type VersionStamp } from '@otm/core';
import { TrackedCache } from './tracked-cache.js';

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
}

const SEP = '\u0000';
const pad = (n: number) => String(Math.max(0, Math.trunc(n))).padStart(15, '0');
/** Escapes what would break the hash tag or the `:` separators. */
const esc = (s: string) => s.replace(/[%:{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);



const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

class Keys {
  constructor(private readonly prefix: string) {}
  tag(tenant: string, kind: string, key: string) {
    return `{${esc(tenant)}:${kind}:${esc(key)}}`;
  }
  entity(t: string, k: string, id: string) {
    return this.entityOfTag(this.tag(t, k, id));
  }
  entityOfTag(tag: string) {
    return `${this.prefix}:e:${tag}`;
  }
  holders(t: string, k: string, id: string) {
    return `${this.prefix}:h:${this.tag(t, k, id)}`;
  }
  pending(t: string, k: string, id: string) {
    return `${this.prefix}:p:${this.tag(t, k, id)}`;
  }
  pendingEffects(t: string, k: string, id: string) {
    return `${this.prefix}:pe:${this.tag(t, k, id)}`;
  }
}

/** Times a unit is run when other processes keep changing the keys it read. */
const UNIT_ATTEMPTS = 10;

/** One write of a unit; `tag` groups the writes of one entity (one cluster slot). */
interface Op {
  readonly tag: string;
  apply(m: ChainableCommander): void;
}

interface Overlay {
  deleted: boolean;
  versions: Map<number, StoredDocument>;
}

class RedisTx implements EntityTx {
  readonly ops: Op[] = [];
  private readonly overlay = new Map<string, Overlay>();
  private readonly holderOverlay = new Map<string, Map<string, boolean>>();
  private readonly pendingOverlay = new Map<string, Map<string, PendingEffect | null>>();

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
    /** On the unit's own connection: WATCH each key before reading it (see RedisEntityStore.unit). */
    private readonly watching = false,
  ) {}

  /**
   * `read` preceded by WATCH of `keys` on the same connection (commands keep their order, so both
   * go out together); a failed WATCH fails the read, so a commit is never unconditional by accident.
   */
  private async watched<T>(keys: string[], read: () => Promise<T>): Promise<T> {
    if (!this.watching) return this.guard(read());
    const [, value] = await this.guard(Promise.all([(this.redis as Redis).watch(...keys), read()]));
    return value;
  }

  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const ek = this.keys.entity(tenant, kind, key);
    const o = this.overlay.get(ek);
    const stored = o?.deleted ? {} : await this.watched([ek], () => this.redis.hgetall(ek));
    const ranks = new Set<number>([...Object.keys(stored).map(Number), ...(o?.versions.keys() ?? [])]);
    const pick = lifecycleRank ?? Math.max(-1, ...ranks);
    if (!ranks.has(pick)) return undefined;
    const own = o?.versions.get(pick);
    if (own) return own;
    return decodeVersion(kind, key, pick, stored[String(pick)]!);
  }

  put(tenant: string, doc: StoredDocument & { readonly stamp: VersionStamp }): void {
    const ek = this.keys.entity(tenant, doc.kind, doc.key);
    const o = this.overlay.get(ek) ?? { deleted: false, versions: new Map() };
    o.versions.set(doc.lifecycleRank, doc);
    this.overlay.set(ek, o);
    const value = encodeVersion(doc.json, doc.stamp);
    this.ops.push({ tag: this.keys.tag(tenant, doc.kind, doc.key), apply: (m) => void m.hset(ek, String(doc.lifecycleRank), value) });
  }

  delete(tenant: string, kind: KindSegment, key: string): void {
    const ek = this.keys.entity(tenant, kind, key);
    this.overlay.set(ek, { deleted: true, versions: new Map() });
    this.ops.push({ tag: this.keys.tag(tenant, kind, key), apply: (m) => void m.del(ek) });
  }

  async holders(tenant: string, kind: KindSegment, key: string): Promise<HolderRef[]> {
    const hk = this.keys.holders(tenant, kind, key);
    const seen = new Map<string, boolean>();
    for (const member of await this.watched([hk], () => this.redis.smembers(hk))) seen.set(member, true);
    for (const [member, present] of this.holderOverlay.get(hk) ?? []) seen.set(member, present);
    const out: HolderRef[] = [];
    for (const [member, present] of seen) {
      if (!present) continue;
      const [hKind, hKey, rank] = member.split(SEP) as [KindSegment, string, string];
      out.push({ kind: hKind, key: hKey, lifecycleRank: Number(rank) });
    }
    return out;
  }

  private holder(tenant: string, child: { kind: KindSegment; key: string }, h: HolderRef, present: boolean) {
    const hk = this.keys.holders(tenant, child.kind, child.key);
    const member = `${h.kind}${SEP}${h.key}${SEP}${h.lifecycleRank}`;
    const m = this.holderOverlay.get(hk) ?? new Map<string, boolean>();
    m.set(member, present);
    this.holderOverlay.set(hk, m);
    this.ops.push({
      tag: this.keys.tag(tenant, child.kind, child.key),
      apply: (multi) => void (present ? multi.sadd(hk, member) : multi.srem(hk, member)),
    });
  }

  addHolder(tenant: string, child: { kind: KindSegment; key: string }, holder: HolderRef): void {
    this.holder(tenant, child, holder, true);
  }

  removeHolder(tenant: string, child: { kind: KindSegment; key: string }, holder: HolderRef): void {
    this.holder(tenant, child, holder, false);
  }

  async pending(tenant: string, kind: KindSegment, key: string): Promise<PendingEffect[]> {
    const pk = this.keys.pending(tenant, kind, key);
    const all = new Map<string, PendingEffect | null>();
    const members = await this.watched([pk, this.keys.pendingEffects(tenant, kind, key)], () => this.redis.zrange(pk, '0', '-1'));
    if (members.length > 0) {
      const values = await this.guard(this.redis.hmget(this.keys.pendingEffects(tenant, kind, key), ...members));
      members.forEach((member, i) => {
        const v = values[i];
        if (v) all.set(member, JSON.parse(v) as PendingEffect);
      });
    }
    for (const [member, v] of this.pendingOverlay.get(pk) ?? []) all.set(member, v);
    return [...all.entries()]
      .filter((e): e is [string, PendingEffect] => e[1] !== null)
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
      .map((e) => e[1]);
  }

  private pendingOp(tenant: string, kind: KindSegment, key: string, e: PendingEffect, add: boolean) {
    const pk = this.keys.pending(tenant, kind, key);
    const pek = this.keys.pendingEffects(tenant, kind, key);
    const member = `${pad(e.acceptedAt)}${SEP}${e.eventKey}`;
    const m = this.pendingOverlay.get(pk) ?? new Map<string, PendingEffect | null>();
    m.set(member, add ? e : null);
    this.pendingOverlay.set(pk, m);
    const json = add ? JSON.stringify(e) : '';
    this.ops.push({
      tag: this.keys.tag(tenant, kind, key),
      apply: (multi) => {
        if (add) multi.zadd(pk, e.acceptedAt, member).hset(pek, member, json);
        else multi.zrem(pk, member).hdel(pek, member);
      },
    });
  }

  addPending(tenant: string, kind: KindSegment, key: string, effect: PendingEffect): void {
    this.pendingOp(tenant, kind, key, effect, true);
  }

  removePending(tenant: string, kind: KindSegment, key: string, effect: PendingEffect): void {
    this.pendingOp(tenant, kind, key, effect, false);
  }
}

export class RedisEntityStore implements EntityStore {
  private readonly redis: Redis | Cluster;
  private readonly ownsClient: boolean;
  private readonly keys: Keys;
  private readonly commandTimeoutMs: number;
  private readonly opts: RedisEntityStoreOptions;
  private readonly cache: TrackedCache | undefined;

  constructor(opts: RedisEntityStoreOptions) {
    this.opts = opts;
    this.commandTimeoutMs = opts.commandTimeoutMs ?? 5_000;
    this.keys = new Keys(opts.prefix ?? 'otm');
    if (opts.client) {
      this.redis = opts.client;
      this.ownsClient = false;
    } else {
      if (!opts.url || !/^rediss?:\/\//.test(opts.url)) throw new Error(`RedisEntityStore: a redis:// URL is needed, got ${JSON.stringify(opts.url)}`);
      const options: RedisOptions = {
        // Bounded waits: a Redis that is down answers 503 (retried by the worker), never a hang.
        maxRetriesPerRequest: 1,
        connectTimeout: Math.min(this.commandTimeoutMs, 5_000),
        commandTimeout: this.commandTimeoutMs,
        lazyConnect: false,
        // Not on this connection, which serves GETs: ioredis gathers the commands of one tick into
        // a pipeline, which cost ~4 µs of CPU a command against 50 concurrent clients
        // (bench/diag/cpu-per-request.mjs get-trip-redis: 44.5 -> 36.8 µs per GET without it).
        enableAutoPipelining: false,
      };
      this.redis = new Redis(opts.url, options);
      // Connection errors surface through the commands; without a listener ioredis prints them.
      this.redis.on('error', () => {});
      this.ownsClient = true;
    }
    this.cache = opts.cacheLatest !== false && this.ownsClient && this.redis instanceof Redis ? new TrackedCache(this.redis, opts.warn) : undefined;
  }

  /**
   * Turns Redis failures into retryable 503s, and bounds the wait. A client this store made has
   * ioredis's own `commandTimeout`, so only the error needs mapping (no second timer per command:
   * a GET costs one Redis command); a client handed in may have no timeout, so its wait is bounded
   * here.
   */
  private guard = <T>(p: Promise<T>): Promise<T> => (this.ownsClient ? p.catch(this.toUnavailable) : this.bounded(p));

  private readonly toUnavailable = (e: unknown): never => {
    throw unavailable(`redis: ${errorText(e)}`, 2, e);
  };

  private async bounded<T>(p: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        p,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer within ${this.commandTimeoutMs} ms`)), this.commandTimeoutMs);
        }),
      ]);
    } catch (e) {
      return this.toUnavailable(e);
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
      const tracked = track ? this.redis.call('CLIENT', 'CACHING', 'YES').then(() => true, () => false) : undefined;
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

  /**
   * A unit of work. On a single Redis node the commit is conditional: the unit runs on a
   * connection of its own, every key it reads is WATCHed first, and EXEC fails if another process
   * changed one of them meanwhile (two workers applying documents of different partitions that
   * hold the same entity inline); the unit is then run again on the new state, up to
   * UNIT_ATTEMPTS times. Units of one store take that connection one at a time. With a Redis
   * Cluster client the writes are grouped by slot and not conditional (see the top of this file).
   */
  async unit<T>(work: (tx: EntityTx) => Promise<T>): Promise<T> {
    if (this.redis instanceof Cluster) {
      const tx = new RedisTx(this.redis, this.keys, this.guard);
      const result = await work(tx);
      if (tx.ops.length === 0) return result;
      const byTag = new Map<string, Op[]>();
      for (const op of tx.ops) byTag.set(op.tag, [...(byTag.get(op.tag) ?? []), op]);
      await Promise.all([...byTag.values()].map((ops) => this.exec(this.redis, ops)));
      return result;
    }
    const turn = this.unitTurn.then(() => this.conditionalUnit(work));
    this.unitTurn = turn.then(
      () => undefined,
      () => undefined,
    );
    return turn;
  }

  private unitTurn: Promise<void> = Promise.resolve();
  private unitConnection: Redis | undefined;

  private async conditionalUnit<T>(work: (tx: EntityTx) => Promise<T>): Promise<T> {
    const conn = (this.unitConnection ??= this.connectionForUnits());
    for (let attempt = 1; ; attempt++) {
      const tx = new RedisTx(conn, this.keys, this.guard, true);
      let result: T;
      try {
        result = await work(tx);
      } catch (e) {
        await conn.unwatch().catch(() => {});
        throw e;
      }
      if (tx.ops.length === 0) {
        await this.guard(conn.unwatch());
        return result;
      }
      if (await this.exec(conn, tx.ops)) {
        await this.waitForReplicas();
        return result;
      }
      if (attempt >= UNIT_ATTEMPTS) throw unavailable(`redis: the unit's keys kept changing (${attempt} attempts)`, 1);
    }
  }

  /** A second connection to the same server, for units (WATCH belongs to a connection). */
  private connectionForUnits(): Redis {
    // Units send their reads together (WATCH and the read, several reads at once): gathered into one write.
    const conn = (this.redis as Redis).duplicate({ enableAutoPipelining: true });
    conn.on('error', () => {});
    return conn;
  }

  private async waitForReplicas(): Promise<void> {
    const replicas = this.opts.waitForReplicas ?? 0;
    if (replicas > 0 && this.redis instanceof Redis) {
      const acked = await this.guard(this.redis.wait(replicas, this.opts.waitTimeoutMs ?? 1_000));
      if (acked < replicas) throw unavailable(`redis: only ${acked} of ${replicas} replicas confirmed the write`, 2);
    }
  }

  /** MULTI/EXEC of `ops`; false when EXEC was refused because a WATCHed key changed. */
  private async exec(conn: Redis | Cluster, ops: readonly Op[]): Promise<boolean> {
    const multi = conn.multi();
    for (const op of ops) op.apply(multi);
    let replies: Awaited<ReturnType<typeof multi.exec>>;
    try {
      replies = await this.guard(multi.exec());
    } finally {
      // Whatever EXEC did (even when it failed, some of it may be applied), this process's next
      // read of these entities asks Redis: it reads its own writes at once.
      if (this.cache) for (const op of ops) this.cache.drop(this.keys.entityOfTag(op.tag));
    }
    if (replies === null) return false;
    for (const [err] of replies) if (err) throw unavailable(`redis: ${errorText(err)}`, 2, err);
    return true;
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
    if (this.unitConnection) {
      await this.unitTurn;
      await this.unitConnection.quit().catch(() => this.unitConnection?.disconnect());
    }
    if (!this.ownsClient) return;
    try {
      await this.redis.quit();
    } catch {
      this.redis.disconnect();
    }
  }
}
