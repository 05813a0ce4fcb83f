/**
 * Lists the entities stored without a list record: those a Redis of 0.1.0 holds, written before
 * lists existed (keys.ts: 0.1.0 wrote the `P:e:` hashes, no `P:lr:` record, no `P:l:` member, no
 * `P:tenants`). Run by `otm migrate` (RedisEntityStore `catchUpLists`); idempotent, and safe while
 * workers write.
 *
 * A SCAN of `P:e:{*}` (every master of a Cluster, as feed-export.ts finds the feeds) hands the
 * entities a few hundred at a time, so memory stays bounded whatever the keyspace. Of each batch,
 * the entities with a list record are dropped first (EXISTS, sent together). Each of the others is
 * read (HGETALL) and listed as a unit would list an entity it has just created: its record is
 * core's `listRecordOfVersions` (at the newest time one of its versions was accepted, under the
 * facets of each), written by the unit's own `setListRecord` with no previous record
 * (transactions.ts), so the members and the record are byte for byte what a unit writes, and its
 * tenant goes into `P:tenants`.
 *
 * Racing writers. A unit that writes an entity also writes its list record in the same commit, so
 * an entity that gained a record, or whose versions changed, since it was read has been taken care
 * of by someone else and is left alone:
 * - single Redis: the batch's hashes and records are WATCHed before they are read, and the writes
 *   of the batch are one MULTI/EXEC, refused when any of them changed; the batch is then read again
 *   (the changed entities now have a record, or no versions) and written, up to ATTEMPTS times.
 * - Cluster: a list is a slot of its own, so the members cannot be written with the record. They
 *   are added first; then a script in the entity's slot writes the record only if there is still
 *   none and the versions are the ones read (SHA-1 of each); if it refuses, the members just added
 *   are removed again, but for those the record now there names. A stop in between leaves members
 *   without a record, which the next run adds again (the same bytes) with the record; the query
 *   checks every filter against the document it answers, so such a member can at worst list an
 *   entity once more at its old time (lists.ts).
 *
 * SCAN may hand a key twice (when Redis grows its table meanwhile): the second time it has a
 * record and is skipped, but `entities` counts it twice.
 */
import { createHash } from 'node:crypto';
import { Cluster, Redis, type ChainableCommander } from 'ioredis';
import { isKindSegment, type KindSegment } from '@otm/model';
import {
  decodeListRecord,
  decodeVersion,
  encodeListRecord,
  listRecordOfVersions,
  listedFacets,
  unavailable,
  type ListRecord,
  type StoredDocument,
} from '@otm/core';
import { redisFailure } from './errors.js';
import type { Keys } from './keys.js';
import { listMember } from './lists.js';
import { LuaScript } from './script.js';
import { RedisTx } from './transactions.js';

/** What a catch-up did: the entities it found (`P:e:` hashes) and those it listed. */
export interface ListCatchUp {
  readonly entities: number;
  readonly listed: number;
}

export interface ListCatchUpOptions {
  /** Entities looked at together (EXISTS, HGETALL, one MULTI). Default 200. */
  readonly batch?: number;
  /** COUNT of each SCAN call. Default 1000. */
  readonly scanCount?: number;
}

/** Times a batch is read and written again on a single Redis when writers keep changing it. */
const ATTEMPTS = 10;

/**
 * KEYS[1]: the list record, KEYS[2]: the entity's hash; ARGV[1]: the record, ARGV[2]: the number of
 * versions n, then n pairs (rank, SHA-1 of the stored value). Writes the record only if there is
 * none and the hash holds exactly those versions; 1 if it wrote it, else 0.
 */
const RECORD_IF_UNCHANGED = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local n = tonumber(ARGV[2])
if redis.call('HLEN', KEYS[2]) ~= n then return 0 end
for i = 0, n - 1 do
  local v = redis.call('HGET', KEYS[2], ARGV[3 + 2 * i])
  if not v or redis.sha1hex(v) ~= ARGV[4 + 2 * i] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`);

/** An entity the SCAN found, and its keys. */
interface Found {
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  /** The hash of its versions. */
  readonly ek: string;
  /** Its list record. */
  readonly rk: string;
}

/** An entity to list: its record, made from the versions read (`raw`: rank -> stored value). */
interface ToList extends Found {
  readonly record: ListRecord;
  readonly raw: ReadonlyMap<number, Buffer>;
}

/** The record of an entity from its stored versions; undefined when it has none or one cannot be read. */
function recordOf(f: Found, all: Record<string, Buffer>): ToList | undefined {
  const raw = new Map<number, Buffer>();
  const versions: StoredDocument[] = [];
  for (const [field, value] of Object.entries(all)) {
    const rank = Number(field);
    if (!/^[0-5]$/.test(field)) return undefined;
    const version = decodeVersion(f.kind, f.key, rank, value.toString('utf8'));
    // A value without its stamp (`modified acceptedAt\n`) is not a version any store wrote.
    if (!value.includes(10) || !Number.isFinite(version.stamp?.modified) || !Number.isFinite(version.stamp?.acceptedAt)) return undefined;
    raw.set(rank, value);
    versions.push(version);
  }
  const record = listRecordOfVersions(f.kind, versions);
  return record === undefined ? undefined : { ...f, record, raw };
}

export class RedisListCatchUp {
  private readonly batch: number;
  private readonly scanCount: number;

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
    opts: ListCatchUpOptions = {},
  ) {
    this.batch = Math.max(1, Math.floor(opts.batch ?? 200));
    this.scanCount = Math.max(1, Math.floor(opts.scanCount ?? 1_000));
  }

  async run(): Promise<ListCatchUp> {
    let entities = 0;
    let listed = 0;
    // WATCH belongs to a connection: a single Redis's batches are written on one of their own.
    let conn: Redis | undefined;
    const write = async (found: Found[]) => {
      if (this.redis instanceof Cluster) return this.writeOnCluster(this.redis, found);
      conn ??= this.ownConnection(this.redis);
      return this.writeWatched(conn, found);
    };
    try {
      const nodes = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis];
      const pattern = this.keys.entityPattern();
      for (const node of nodes) {
        let cursor = '0';
        do {
          const [next, names] = await this.guard(node.scan(cursor, 'MATCH', pattern, 'COUNT', this.scanCount));
          cursor = next;
          const found: Found[] = [];
          for (const name of names) {
            const e = this.keys.entityOfKey(name);
            if (e === undefined || !isKindSegment(e.kind)) continue;
            found.push({ ...e, kind: e.kind, ek: name, rk: this.keys.listRecord(e.tenant, e.kind, e.key) });
          }
          entities += found.length;
          for (let i = 0; i < found.length; i += this.batch) listed += await write(found.slice(i, i + this.batch));
        } while (cursor !== '0');
      }
    } finally {
      if (conn) await conn.quit().catch(() => conn?.disconnect());
    }
    return { entities, listed };
  }

  private ownConnection(redis: Redis): Redis {
    const conn = redis.duplicate({ enableAutoPipelining: true });
    conn.on('error', () => {});
    return conn;
  }

  /** The entities of `found` without a list record (EXISTS of each, sent together). */
  private async unlisted(found: Found[]): Promise<Found[]> {
    const exists = await this.guard(Promise.all(found.map((f) => this.redis.exists(f.rk))));
    return found.filter((_, i) => exists[i] === 0);
  }

  /** The ops a unit would commit to list each entity, created now, and add its tenant to `P:tenants`. */
  private unitOps(conn: Redis | Cluster, todo: readonly ToList[]): RedisTx['ops'] {
    const tx = new RedisTx(conn, this.keys, this.guard, 1);
    for (const e of todo) tx.setListRecord(e.tenant, e.kind, e.key, e.record, undefined);
    return tx.ops;
  }

  /** Single Redis: lists the batch's unlisted entities in one MULTI, conditional on what was read. */
  private async writeWatched(conn: Redis, batch: Found[]): Promise<number> {
    let candidates = await this.unlisted(batch);
    for (let attempt = 1; candidates.length > 0; attempt++) {
      const watched = candidates.flatMap((f) => [f.ek, f.rk]);
      // WATCH first, then the reads, on the same connection (commands keep their order).
      const [, reads] = await this.guard(
        Promise.all([
          conn.watch(...watched),
          Promise.all(candidates.map((f) => Promise.all([conn.exists(f.rk), conn.hgetallBuffer(f.ek)]))),
        ]),
      );
      const todo: ToList[] = [];
      candidates.forEach((f, i) => {
        const [hasRecord, all] = reads[i]!;
        if (hasRecord !== 0) return;
        const e = recordOf(f, all);
        if (e !== undefined) todo.push(e);
      });
      if (todo.length === 0) {
        await this.guard(conn.unwatch());
        return 0;
      }
      const multi = conn.multi();
      for (const op of this.unitOps(conn, todo)) op.apply(multi);
      multi.sadd(this.keys.tenants(), ...new Set(todo.map((e) => e.tenant)));
      if (await this.exec(multi)) return todo.length;
      if (attempt >= ATTEMPTS) throw unavailable(`redis: the entities being listed kept changing (${attempt} attempts)`, 1);
      // Read again: those a writer changed have a record now (or no versions).
      candidates = todo;
    }
    return 0;
  }

  /** Cluster: lists each unlisted entity of the batch (members first, then the record if still absent). */
  private async writeOnCluster(cluster: Cluster, batch: Found[]): Promise<number> {
    const candidates = await this.unlisted(batch);
    const reads = await this.guard(Promise.all(candidates.map((f) => cluster.hgetallBuffer(f.ek))));
    const todo = candidates.flatMap((f, i) => recordOf(f, reads[i]!) ?? []);
    const done = await Promise.all(todo.map((e) => this.listOnCluster(cluster, e)));
    const tenants = [...new Set(todo.filter((_, i) => done[i]).map((e) => e.tenant))];
    if (tenants.length > 0) await this.guard(cluster.sadd(this.keys.tenants(), ...tenants));
    return done.filter(Boolean).length;
  }

  private async listOnCluster(cluster: Cluster, e: ToList): Promise<boolean> {
    // The members (each list its own slot, its own MULTI, as a unit commits them), then the record.
    const lists = this.unitOps(cluster, [e]).filter((op) => op.of === 'list');
    await Promise.all(
      lists.map(async (op) => {
        const multi = cluster.multi();
        op.apply(multi);
        await this.exec(multi);
      }),
    );
    const versions = [...e.raw].flatMap(([rank, value]) => [String(rank), createHash('sha1').update(value).digest('hex')]);
    const wrote = await this.guard(
      RECORD_IF_UNCHANGED.run(cluster, [e.rk, e.ek], [encodeListRecord(e.record), String(e.raw.size), ...versions]),
    );
    if (wrote === 1) return true;
    // Someone else listed it (or changed or removed it) meanwhile: take back the members added.
    const now = await this.guard(cluster.get(e.rk));
    const kept = new Set<string>();
    if (now !== null) {
      try {
        const r = decodeListRecord(now);
        for (const f of listedFacets(r)) kept.add(`${f}\u0000${listMember(r.at, e.key)}`);
      } catch {
        // A record that cannot be read names nothing.
      }
    }
    const member = listMember(e.record.at, e.key);
    await Promise.all(
      listedFacets(e.record)
        .filter((f) => !kept.has(`${f}\u0000${member}`))
        .map((f) => this.guard(cluster.zrem(this.keys.list(e.tenant, e.kind, f), member))),
    );
    return false;
  }

  /** EXEC of `multi`; false when a WATCHed key changed. */
  private async exec(multi: ChainableCommander): Promise<boolean> {
    const replies = await this.guard(multi.exec());
    if (replies === null) return false;
    for (const [err] of replies) if (err) throw redisFailure(err);
    return true;
  }
}
