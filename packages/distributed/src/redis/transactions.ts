/**
 * Units of work of the Redis entity store (`EntityStore.unit`): a unit reads Redis through an
 * overlay of its own writes (`RedisTx`) and commits them all in one MULTI/EXEC (`Units`).
 *
 * On a single Redis (primary) the commit is atomic and isolated. Units on one entity are mostly
 * serialised by the bus (one partition per key, one consumer per partition); an entity held inline
 * by documents of two partitions is not, so on a single Redis the commit is also conditional: the
 * unit WATCHes every key it reads and runs again if another worker changed one before its EXEC.
 *
 * Redis Cluster: a unit may span entities in different slots, and MULTI cannot cross slots. With
 * an ioredis `Cluster` client the writes are grouped by hash tag (one entity = one slot, keys.ts)
 * and each group is committed in its own MULTI/EXEC, all groups in parallel: every entity changes
 * atomically, the unit as a whole does not. A worker that dies between groups leaves some entities
 * of the batch written and others not; the batch is then replayed (offsets are committed only
 * after the unit resolved) and the replay is idempotent (puts by id and rank, sets, sorted sets), so
 * the state converges to the same result.
 *
 * Durability: a unit resolves when Redis answered EXEC, so a write is as durable as the server's
 * persistence: run Redis with `appendonly yes` and `appendfsync always` (every acknowledged write
 * survives a crash of the server) or `everysec` (up to about a second of acknowledged writes can
 * be lost on a power loss, not on a process crash). With replicas, set `waitForReplicas` so that a
 * unit also waits (`WAIT n ms`) until n replicas have the writes; if they do not confirm in time the
 * unit rejects with a retryable error (the writes stay on the primary; the replay is harmless).
 */
import { Cluster, Redis, type ChainableCommander } from 'ioredis';
import type { KindSegment } from '@otm/model';
import {
  AdapterError,
  decodeVersion,
  encodeVersion,
  unavailable,
  type EntityTx,
  type HolderRef,
  type PendingEffect,
  type StoredDocument,
  type VersionStamp,
} from '@otm/core';
import { errorText } from '../error-text.js';
import { redisFailure } from './errors.js';
import { SEP, pad, type Keys } from './keys.js';
import type { TrackedCache } from './tracked-cache.js';

/** A waiting effect as stored; a value that is not JSON can never be applied (not retryable). */
function decodePending(key: string, json: string): PendingEffect {
  try {
    return JSON.parse(json) as PendingEffect;
  } catch (e) {
    throw new AdapterError('redis', `a pending effect of ${key} cannot be decoded: ${errorText(e)}`, { retryable: false, cause: e });
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

/** A unit's view of Redis: its reads see its own writes (the overlays), its writes are queued as `ops`. */
export class RedisTx implements EntityTx {
  readonly ops: Op[] = [];
  private readonly overlay = new Map<string, Overlay>();
  private readonly holderOverlay = new Map<string, Map<string, boolean>>();
  private readonly pendingOverlay = new Map<string, Map<string, PendingEffect | null>>();

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
    /** On the unit's own connection: WATCH each key before reading it (see `Units.run`). */
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
        if (v) all.set(member, decodePending(pk, v));
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

/** What the units of a store share with it. */
export interface UnitContext {
  readonly redis: Redis | Cluster;
  readonly keys: Keys;
  /** Maps failures (errors.ts) and bounds waits, as for the store's own commands. */
  readonly guard: <T>(p: Promise<T>) => Promise<T>;
  /** The store's cache of latest versions, told of every key a unit writes. */
  readonly cache: TrackedCache | undefined;
  /** After each commit, WAIT for this many replicas (0: no wait), at most `waitTimeoutMs`. */
  readonly waitForReplicas: number;
  readonly waitTimeoutMs: number;
}

/** The units of work of one store, and the connection they run on. */
export class Units {
  private unitTurn: Promise<void> = Promise.resolve();
  private unitConnection: Redis | undefined;

  constructor(private readonly ctx: UnitContext) {}

  /**
   * Runs a unit of work. On a single Redis node the commit is conditional: the unit runs on a
   * connection of its own, every key it reads is WATCHed first, and EXEC fails if another process
   * changed one of them meanwhile (two workers applying documents of different partitions that
   * hold the same entity inline); the unit is then run again on the new state, up to
   * UNIT_ATTEMPTS times. Units of one store take that connection one at a time. With a Redis
   * Cluster client the writes are grouped by slot and not conditional (see the top of this file).
   */
  async run<T>(work: (tx: EntityTx) => Promise<T>): Promise<T> {
    const { redis, keys, guard } = this.ctx;
    if (redis instanceof Cluster) {
      const tx = new RedisTx(redis, keys, guard);
      const result = await work(tx);
      if (tx.ops.length === 0) return result;
      const byTag = new Map<string, Op[]>();
      for (const op of tx.ops) byTag.set(op.tag, [...(byTag.get(op.tag) ?? []), op]);
      await Promise.all([...byTag.values()].map((ops) => this.exec(redis, ops)));
      return result;
    }
    const turn = this.unitTurn.then(() => this.conditionalUnit(work));
    this.unitTurn = turn.then(
      () => undefined,
      () => undefined,
    );
    return turn;
  }

  private async conditionalUnit<T>(work: (tx: EntityTx) => Promise<T>): Promise<T> {
    const conn = (this.unitConnection ??= this.connectionForUnits());
    for (let attempt = 1; ; attempt++) {
      const tx = new RedisTx(conn, this.ctx.keys, this.ctx.guard, true);
      let result: T;
      try {
        result = await work(tx);
      } catch (e) {
        await conn.unwatch().catch(() => {});
        throw e;
      }
      if (tx.ops.length === 0) {
        await this.ctx.guard(conn.unwatch());
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
    const conn = (this.ctx.redis as Redis).duplicate({ enableAutoPipelining: true });
    conn.on('error', () => {});
    return conn;
  }

  private async waitForReplicas(): Promise<void> {
    const { redis, waitForReplicas: replicas, waitTimeoutMs } = this.ctx;
    if (replicas > 0 && redis instanceof Redis) {
      const acked = await this.ctx.guard(redis.wait(replicas, waitTimeoutMs));
      if (acked < replicas) throw unavailable(`redis: only ${acked} of ${replicas} replicas confirmed the write`, 2);
    }
  }

  /** MULTI/EXEC of `ops`; false when EXEC was refused because a WATCHed key changed. */
  private async exec(conn: Redis | Cluster, ops: readonly Op[]): Promise<boolean> {
    const { cache, keys } = this.ctx;
    const multi = conn.multi();
    for (const op of ops) op.apply(multi);
    let replies: Awaited<ReturnType<typeof multi.exec>>;
    try {
      replies = await this.ctx.guard(multi.exec());
    } finally {
      // Whatever EXEC did (even when it failed, some of it may be applied), this process's next
      // read of these entities asks Redis: it reads its own writes at once.
      if (cache) for (const op of ops) cache.drop(keys.entityOfTag(op.tag));
    }
    if (replies === null) return false;
    for (const [err] of replies) if (err) throw redisFailure(err);
    return true;
  }

  /** Waits for the unit under way, then closes the units' connection. */
  async close(): Promise<void> {
    if (!this.unitConnection) return;
    await this.unitTurn;
    await this.unitConnection.quit().catch(() => this.unitConnection?.disconnect());
  }
}
