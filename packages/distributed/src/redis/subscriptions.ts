/**
 * Webhook subscriptions of the distributed deployment (the `SubscriptionStore` port) in Redis, on
 * the entity store's connection and key prefix (keys.ts):
 *
 * - `P:ws:{t}:<id>` hash, one subscription, a field a member: `id`, `tenant`, `url`, `kinds` (JSON,
 *   or absent: every kind), `filter` (JSON), `secret`, `state`, `reason`, `cursor`, `createdAt`,
 *   `rev`, `failingSince`;
 * - `P:wss:{t}` set: the tenant's subscription ids (its count is the tenant's limit);
 * - `P:wsd:{t}:<id>` list: the recent delivery attempts as JSON, newest first, kept to the newest
 *   `keep` by LPUSH then LTRIM;
 * - `P:wsl:{t}:<id>` string: the lease, the dispatcher delivering it (SET ... PX, renewed);
 * - `P:wsall` set: `tenant\0id` of every subscription, which dispatchers read to find work;
 * - `P:wsdisp` sorted set: the dispatchers alive, scored by when they stop counting unless they
 *   say so again, so that each takes its share.
 *
 * A subscription's keys share the tenant's hash tag, so each change is one Lua script on one slot
 * that checks what it must before it writes: `create` the tenant's count, `advance` the revision and
 * the cursor the dispatcher read (a replay, resume or pause since makes it a no-op, so the cursor
 * only moves as intended), `pause` the revision. `P:wsall` is in another slot on a Cluster: it is
 * added to before the subscription is made and removed from after it is deleted, so a member may
 * name a subscription that is gone (skipped), never the other way round.
 */
import type { Cluster, Redis } from 'ioredis';
import type { KindSegment } from '@otm/model';
import { AdapterError, type DeliveryAttempt, type SubscriptionStore, type WebhookFilter, type WebhookSubscription } from '@otm/core';
import { SEP, type Keys } from './keys.js';
import { releaseLease, takeLease } from './lease.js';
import { LuaScript } from './script.js';

/** KEYS[1]: the tenant's set, KEYS[2]: the hash; ARGV[1]: the limit, ARGV[2]: the id, then field, value, ... */
const CREATE = new LuaScript(`
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('SADD', KEYS[1], ARGV[2])
return 1
`);

/** KEYS[1]: the hash; ARGV[1]: rev, ARGV[2]: the cursor read ('' for none), ARGV[3]: the new cursor. */
const ADVANCE = new LuaScript(`
if redis.call('HGET', KEYS[1], 'rev') ~= ARGV[1] then return 0 end
local cur = redis.call('HGET', KEYS[1], 'cursor')
if cur == false then cur = '' end
if cur ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'cursor', ARGV[3])
redis.call('HDEL', KEYS[1], 'failingSince')
return 1
`);

/** KEYS[1]: the hash; ARGV[1]: rev, ARGV[2]: the reason. */
const PAUSE = new LuaScript(`
if redis.call('HGET', KEYS[1], 'rev') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'paused', 'reason', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return 1
`);

/** KEYS[1]: the hash. Active again, at the same cursor; the subscription after, or nil. */
const RESUME = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
redis.call('HSET', KEYS[1], 'state', 'active')
redis.call('HDEL', KEYS[1], 'reason', 'failingSince')
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return redis.call('HGETALL', KEYS[1])
`);

/** KEYS[1]: the hash; ARGV[1]: the cursor. The subscription after, or nil. */
const REPLAY = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
redis.call('HSET', KEYS[1], 'cursor', ARGV[1])
redis.call('HDEL', KEYS[1], 'failingSince')
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return redis.call('HGETALL', KEYS[1])
`);

/** KEYS[1]: the hash, KEYS[2]: the list; ARGV[1]: the attempt's JSON, ARGV[2]: how many to keep, ARGV[3]: '1' if it failed, ARGV[4]: its time. */
const RECORD = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('LPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[2]) - 1)
if ARGV[3] == '1' then redis.call('HSETNX', KEYS[1], 'failingSince', ARGV[4]) end
return 1
`);

/** KEYS[1]: the dispatchers' sorted set; ARGV[1]: the owner, ARGV[2]: now (ms), ARGV[3]: ttl (ms). */
const ALIVE = new LuaScript(`
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
return redis.call('ZCARD', KEYS[1])
`);

/** The fields of a subscription, as HSET takes them (absent members left out). */
function fields(s: WebhookSubscription): string[] {
  const out = [
    'id',
    s.id,
    'tenant',
    s.tenant,
    'url',
    s.url,
    'filter',
    JSON.stringify(s.filter),
    'secret',
    s.secret,
    'state',
    s.state,
    'createdAt',
    String(s.createdAt),
    'rev',
    String(s.rev),
  ];
  if (s.kinds !== undefined) out.push('kinds', JSON.stringify(s.kinds));
  if (s.reason !== undefined) out.push('reason', s.reason);
  if (s.cursor !== undefined) out.push('cursor', s.cursor);
  if (s.failingSince !== undefined) out.push('failingSince', String(s.failingSince));
  return out;
}

/** A subscription from its hash (HGETALL as an object, or as the flat array a script returns); undefined when empty. */
function decode(raw: unknown): WebhookSubscription | undefined {
  let f: Record<string, string>;
  if (Array.isArray(raw)) {
    f = {};
    for (let i = 0; i + 1 < raw.length; i += 2) f[String(raw[i])] = String(raw[i + 1]);
  } else if (raw !== null && typeof raw === 'object') f = raw as Record<string, string>;
  else return undefined;
  if (f.id === undefined || f.tenant === undefined || f.url === undefined) return undefined;
  try {
    return {
      id: f.id,
      tenant: f.tenant,
      url: f.url,
      ...(f.kinds === undefined ? {} : { kinds: JSON.parse(f.kinds) as KindSegment[] }),
      filter: JSON.parse(f.filter ?? '{}') as WebhookFilter,
      secret: f.secret ?? '',
      state: f.state === 'paused' ? 'paused' : 'active',
      ...(f.reason === undefined ? {} : { reason: f.reason }),
      ...(f.cursor === undefined ? {} : { cursor: f.cursor }),
      createdAt: Number(f.createdAt ?? 0),
      rev: Number(f.rev ?? 0),
      ...(f.failingSince === undefined ? {} : { failingSince: Number(f.failingSince) }),
    };
  } catch (e) {
    throw new AdapterError('redis', `webhook subscription ${f.id} cannot be decoded`, { retryable: false, cause: e });
  }
}

export class RedisSubscriptionStore implements SubscriptionStore {
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
  ) {}

  async create(sub: WebhookSubscription, maxPerTenant: number): Promise<boolean> {
    const all = this.keys.allWebhooks();
    const member = `${sub.tenant}${SEP}${sub.id}`;
    await this.guard(this.redis.sadd(all, member));
    const made = await this.guard(
      CREATE.run(
        this.redis,
        [this.keys.webhooksOf(sub.tenant), this.keys.webhook(sub.tenant, sub.id)],
        [String(maxPerTenant), sub.id, ...fields(sub)],
      ),
    );
    if (made !== 1) await this.guard(this.redis.srem(all, member));
    return made === 1;
  }

  async get(tenant: string, id: string): Promise<WebhookSubscription | undefined> {
    return decode(await this.guard(this.redis.hgetall(this.keys.webhook(tenant, id))));
  }

  async list(tenant: string): Promise<WebhookSubscription[]> {
    const ids = await this.guard(this.redis.smembers(this.keys.webhooksOf(tenant)));
    if (ids.length === 0) return [];
    const p = this.redis.pipeline();
    for (const id of ids) p.hgetall(this.keys.webhook(tenant, id));
    const replies = (await this.guard(p.exec())) ?? [];
    const out: WebhookSubscription[] = [];
    for (const [err, raw] of replies) {
      if (err) throw err;
      const s = decode(raw);
      if (s !== undefined) out.push(s);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
  }

  async all(): Promise<Array<{ tenant: string; id: string }>> {
    const members = await this.guard(this.redis.smembers(this.keys.allWebhooks()));
    return members.flatMap((m) => {
      const at = m.indexOf(SEP);
      return at < 0 ? [] : [{ tenant: m.slice(0, at), id: m.slice(at + 1) }];
    });
  }

  async delete(tenant: string, id: string): Promise<boolean> {
    const replies =
      (await this.guard(
        this.redis
          .multi()
          .del(this.keys.webhook(tenant, id))
          .srem(this.keys.webhooksOf(tenant), id)
          .del(this.keys.webhookDeliveries(tenant, id))
          .del(this.keys.webhookLease(tenant, id))
          .exec(),
      )) ?? [];
    for (const [err] of replies) if (err) throw err;
    await this.guard(this.redis.srem(this.keys.allWebhooks(), `${tenant}${SEP}${id}`));
    return replies[0]?.[1] === 1;
  }

  async advance(tenant: string, id: string, rev: number, from: string | undefined, to: string): Promise<boolean> {
    return (await this.guard(ADVANCE.run(this.redis, [this.keys.webhook(tenant, id)], [String(rev), from ?? '', to]))) === 1;
  }

  async pause(tenant: string, id: string, rev: number, reason: string): Promise<boolean> {
    return (await this.guard(PAUSE.run(this.redis, [this.keys.webhook(tenant, id)], [String(rev), reason]))) === 1;
  }

  async resume(tenant: string, id: string): Promise<WebhookSubscription | undefined> {
    return decode(await this.guard(RESUME.run(this.redis, [this.keys.webhook(tenant, id)], [])));
  }

  async replay(tenant: string, id: string, cursor: string): Promise<WebhookSubscription | undefined> {
    return decode(await this.guard(REPLAY.run(this.redis, [this.keys.webhook(tenant, id)], [cursor])));
  }

  async recordDelivery(tenant: string, id: string, attempt: DeliveryAttempt, keep: number): Promise<void> {
    await this.guard(
      RECORD.run(
        this.redis,
        [this.keys.webhook(tenant, id), this.keys.webhookDeliveries(tenant, id)],
        [JSON.stringify(attempt), String(Math.max(1, keep)), attempt.outcome === 'delivered' ? '0' : '1', String(attempt.at)],
      ),
    );
  }

  async deliveries(tenant: string, id: string, limit: number): Promise<DeliveryAttempt[]> {
    if (!(limit > 0)) return [];
    const raw = await this.guard(this.redis.lrange(this.keys.webhookDeliveries(tenant, id), 0, limit - 1));
    return raw.map((r) => JSON.parse(r) as DeliveryAttempt);
  }

  async lease(tenant: string, id: string, owner: string, ms: number): Promise<boolean> {
    return this.guard(takeLease(this.redis, this.keys.webhookLease(tenant, id), owner, ms));
  }

  async release(tenant: string, id: string, owner: string): Promise<void> {
    await this.guard(releaseLease(this.redis, this.keys.webhookLease(tenant, id), owner));
  }

  async dispatchers(owner: string, ttlMs: number): Promise<number> {
    const n = await this.guard(
      ALIVE.run(this.redis, [this.keys.webhookDispatchers()], [owner, String(Date.now()), String(Math.round(ttlMs))]),
    );
    return Math.max(1, Number(n));
  }
}
