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
 * Lists and the change feed (lists.ts, feed.ts) change in the same commit: a unit's list records are
 * read (and WATCHed) like its other reads, and its list members, list records and feed entries are
 * ops of the same MULTI on a single Redis, so a list or the feed never shows a change the entities
 * do not have, nor the other way round, and the feed's order is the order units committed. On
 * Cluster a list and a tenant's feed are slots of their own: their ops are groups of their own, and
 * the feed's groups are committed only after every other group succeeded, so that a feed entry
 * never names a change not yet readable (a failure in between leaves a change without its entry
 * until the replay, which writes it).
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
  encodeListRecord,
  encodeVersion,
  listedFacets,
  unavailable,
  type EntityTx,
  type HolderRef,
  type ListPosition,
  type ListRecord,
  type ListScan,
  type PendingEffect,
  type StoredDocument,
  type VersionStamp,
} from '@otm/core';
import { errorText } from '../error-text.js';
import { redisFailure } from './errors.js';
import { addFeedEntry, addFeedTrim, type FeedChange } from './feed.js';
import { SEP, pad, type Keys } from './keys.js';
import { listBounds, listMember, parseListMember } from './lists.js';
import type { TrackedCache } from './tracked-cache.js';

/** A waiting effect as stored; a value that is not JSON can never be applied (not retryable). */
function decodePending(key: string, json: string): PendingEffect {
  try {
    return JSON.parse(json) as PendingEffect;
  } catch (e) {
    throw new AdapterError('redis', `a pending effect of ${key} cannot be decoded: ${errorText(e)}`, { retryable: false, cause: e });
  }
}

/** A list record as stored; a value that is not JSON can never be used (not retryable). */
function decodeListRecord(key: string, json: string): ListRecord {
  try {
    return JSON.parse(json) as ListRecord;
  } catch (e) {
    throw new AdapterError('redis', `the list record ${key} cannot be decoded: ${errorText(e)}`, { retryable: false, cause: e });
  }
}

/** Times a unit is run when other processes keep changing the keys it read. */
const UNIT_ATTEMPTS = 10;

/**
 * One write of a unit; `tag` groups the writes of one slot on Cluster: an entity's keys, a list,
 * or a tenant's feed (`of`: the feed's groups, and the set of tenants, are committed last, see the
 * top of this file).
 */
interface Op {
  readonly tag: string;
  readonly of: 'entity' | 'list' | 'feed';
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
  /** List records written by the unit, by key (null: removed). */
  private readonly listOverlay = new Map<string, ListRecord | null>();
  /**
   * The unit's changes for the feed, in the order of their last occurrence: one entry per version
   * put (the feed names the version, the query reads it, so a second put of it adds nothing) and
   * per delete, which also drops the puts of the entity before it.
   */
  private readonly changes = new Map<string, FeedChange>();

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
    /** How long the feed keeps changes (ms): a commit removes what is older. */
    private readonly feedRetentionMs: number,
    /** On the unit's own connection: WATCH each key before reading it (see `Units.run`). */
    private readonly watching = false,
  ) {}

  /**
   * The unit's writes, then the XADDs of its feed entries, all stamped with the time of the commit,
   * then the trimming of each tenant's feed (feed.ts) and the tenant's name in the set of tenants
   * (keys.ts `tenants`).
   */
  commitOps(): Op[] {
    if (this.changes.size === 0) return this.ops;
    const at = Date.now();
    const feed: Op[] = [];
    const tenants = new Set<string>();
    for (const c of this.changes.values()) {
      const key = this.keys.feed(c.tenant);
      tenants.add(c.tenant);
      feed.push({ tag: this.keys.tenantTag(c.tenant), of: 'feed', apply: (m) => addFeedEntry(m, key, c, at) });
    }
    const registry = this.keys.tenants();
    for (const tenant of tenants) {
      feed.push({
        tag: this.keys.tenantTag(tenant),
        of: 'feed',
        apply: (m) => addFeedTrim(m, this.keys, tenant, at, this.feedRetentionMs),
      });
      // The tenants that have entities, for the entity export (feed-export.ts): a SADD of a member
      // already there costs Redis next to nothing.
      feed.push({ tag: registry, of: 'feed', apply: (m) => void m.sadd(registry, tenant) });
    }
    return [...this.ops, ...feed];
  }

  private change(c: FeedChange): void {
    const entity = `${c.tenant}${SEP}${c.kind}${SEP}${c.key}${SEP}`;
    // Lifecycle ranks are 0 to 5 (lifecycle.ts).
    if (c.op === 'delete') for (let r = 0; r <= 5; r++) this.changes.delete(`${entity}p${r}`);
    const id = c.op === 'delete' ? `${entity}d` : `${entity}p${c.lifecycleRank}`;
    this.changes.delete(id);
    this.changes.set(id, c);
  }

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
    this.ops.push({
      tag: this.keys.tag(tenant, doc.kind, doc.key),
      of: 'entity',
      apply: (m) => void m.hset(ek, String(doc.lifecycleRank), value),
    });
    this.change({ tenant, op: 'put', kind: doc.kind, key: doc.key, lifecycleRank: doc.lifecycleRank });
  }

  delete(tenant: string, kind: KindSegment, key: string): void {
    const ek = this.keys.entity(tenant, kind, key);
    this.overlay.set(ek, { deleted: true, versions: new Map() });
    this.ops.push({ tag: this.keys.tag(tenant, kind, key), of: 'entity', apply: (m) => void m.del(ek) });
    this.change({ tenant, op: 'delete', kind, key, lifecycleRank: 0 });
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
      of: 'entity',
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
      of: 'entity',
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

  /** A list as committed (the unit's own writes are not in it); not WATCHed: a restriction's match is looked for again when it waits. */
  async list(scan: ListScan): Promise<ListPosition[]> {
    const bounds = listBounds(scan);
    if (bounds === undefined || !(scan.limit > 0)) return [];
    const members = await this.guard(
      this.redis.zrangebylex(
        this.keys.list(scan.tenant, scan.kind, scan.facet),
        bounds.min,
        bounds.max,
        'LIMIT',
        0,
        Math.floor(scan.limit),
      ),
    );
    return members.map(parseListMember);
  }

  /**
   * The list records of the entities, through the unit's overlay; those not written by the unit
   * are read (and WATCHed) together: one GET each, sent at once (MGET would need one slot on
   * Cluster), one round trip.
   */
  async listRecords(
    tenant: string,
    refs: ReadonlyArray<{ readonly kind: KindSegment; readonly key: string }>,
  ): Promise<Array<ListRecord | undefined>> {
    const keys = refs.map((r) => this.keys.listRecord(tenant, r.kind, r.key));
    const unread = [...new Set(keys.filter((k) => !this.listOverlay.has(k)))];
    const stored = new Map<string, string | null>();
    if (unread.length > 0) {
      const values = await this.watched(unread, () => Promise.all(unread.map((k) => this.redis.get(k))));
      unread.forEach((k, i) => stored.set(k, values[i] ?? null));
    }
    return keys.map((k) => {
      const own = this.listOverlay.get(k);
      if (own !== undefined) return own ?? undefined;
      const raw = stored.get(k);
      return raw === null || raw === undefined ? undefined : decodeListRecord(k, raw);
    });
  }

  /**
   * Moves the entity's members from `previous`'s lists (at its time) to `next`'s, and keeps `next`
   * as its record; a member that stays the same is left alone.
   */
  setListRecord(tenant: string, kind: KindSegment, key: string, next: ListRecord | undefined, previous: ListRecord | undefined): void {
    const rk = this.keys.listRecord(tenant, kind, key);
    this.listOverlay.set(rk, next ?? null);
    const members = (r: ListRecord | undefined) => new Map(r === undefined ? [] : listedFacets(r).map((f) => [f, listMember(r.at, key)]));
    const before = members(previous);
    const after = members(next);
    for (const [facet, member] of before) {
      if (after.get(facet) === member) continue;
      const lk = this.keys.list(tenant, kind, facet);
      this.ops.push({ tag: this.keys.listTag(tenant, kind, facet), of: 'list', apply: (m) => void m.zrem(lk, member) });
    }
    for (const [facet, member] of after) {
      if (before.get(facet) === member) continue;
      const lk = this.keys.list(tenant, kind, facet);
      this.ops.push({ tag: this.keys.listTag(tenant, kind, facet), of: 'list', apply: (m) => void m.zadd(lk, 0, member) });
    }
    const value = next === undefined ? undefined : encodeListRecord(next);
    this.ops.push({
      tag: this.keys.tag(tenant, kind, key),
      of: 'entity',
      apply: (m) => void (value === undefined ? m.del(rk) : m.set(rk, value)),
    });
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
  /** How long the feed keeps changes (ms). */
  readonly feedRetentionMs: number;
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
    const { redis, keys, guard, feedRetentionMs } = this.ctx;
    if (redis instanceof Cluster) {
      const tx = new RedisTx(redis, keys, guard, feedRetentionMs);
      const result = await work(tx);
      if (tx.ops.length === 0) return result;
      const ops = tx.commitOps();
      const groups = (selected: readonly Op[]) => {
        const byTag = new Map<string, Op[]>();
        for (const op of selected) {
          const group = byTag.get(op.tag);
          if (group === undefined) byTag.set(op.tag, [op]);
          else group.push(op);
        }
        return [...byTag.values()];
      };
      await Promise.all(groups(ops.filter((op) => op.of !== 'feed')).map((group) => this.exec(redis, group)));
      await Promise.all(groups(ops.filter((op) => op.of === 'feed')).map((group) => this.exec(redis, group)));
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
      const tx = new RedisTx(conn, this.ctx.keys, this.ctx.guard, this.ctx.feedRetentionMs, true);
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
      if (await this.exec(conn, tx.commitOps())) {
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
      if (cache) for (const op of ops) if (op.of === 'entity') cache.drop(keys.entityOfTag(op.tag));
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
