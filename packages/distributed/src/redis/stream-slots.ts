/**
 * The slots of open streams (GET /api/v5/stream, OTM_STREAMS_PER_TOKEN) shared by every query
 * process of the deployment: the `StreamSlots` port on the entity store's connection and key
 * prefix. One sorted set a token, `P:ss:{<owner>}` (`owner` the token's reference, never the
 * token; a Redis Cluster hash tag of its own): members the ids of its open streams, scores
 * the time each expires (ms, Redis's clock, the one clock of all processes). Taking a slot is one
 * Lua script (drop the expired members, count, add when under the limit), so that two processes
 * cannot both take the last one; each process renews its streams' members on the stream heartbeat,
 * well within their expiry, so that the streams of a process that died stop counting once it is
 * over; a stream that closes removes its member (ZREM). The key itself expires with its
 * longest-lived member.
 */
import type { Cluster, Redis } from 'ioredis';
import type { StreamSlot, StreamSlots } from '@otm/core';
import { streamSlotFailures } from './metrics.js';
import { LuaScript } from './script.js';

/** Redis's time in ms; needs `redis.replicate_commands` before writes on Redis < 5. */
const NOW = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`;

/** The key lives at least as long as the member just given `ttl`. */
const KEEP_KEY = `
local pttl = redis.call('PTTL', KEYS[1])
if pttl < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
`;

/**
 * KEYS: the token's set; ARGV: the stream's id, the limit, the time to hold it (ms). Reply: 1
 * taken (or already held: renewed), 0 refused (the limit is held by live streams).
 */
const ACQUIRE = new LuaScript(`${NOW}
local limit = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
${KEEP_KEY}
return 1
`);

/** KEYS: the token's set; ARGV: the time to hold them (ms), then the ids. Adds those missing. */
const RENEW = new LuaScript(`${NOW}
local ttl = tonumber(ARGV[1])
local args = {}
for i = 2, #ARGV do
  args[#args + 1] = now + ttl
  args[#args + 1] = ARGV[i]
end
redis.call('ZADD', KEYS[1], unpack(args))
${KEEP_KEY}
return 1
`);

/** Ids renewed in one script call (each is two values on Lua's stack). */
const RENEW_CHUNK = 1_000;

const esc = (s: string) => s.replace(/[%:{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

export class RedisStreamSlots implements StreamSlots {
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly prefix: string,
    /** Longest wait for Redis (ms); then the call rejects (and the stream opens unchecked: query's stream.ts). */
    private readonly timeoutMs = 1_000,
  ) {}

  /** The token's set: `P:ss:{<owner>}`. */
  key(owner: string): string {
    return `${this.prefix}:ss:{${esc(owner)}}`;
  }

  async acquire(slot: StreamSlot, limit: number, ttlMs: number): Promise<boolean> {
    const reply = await this.bounded(
      ACQUIRE.run(this.redis, [this.key(slot.owner)], [slot.id, String(limit), String(Math.ceil(ttlMs))]),
      'acquire',
    );
    return Number(reply) === 1;
  }

  async renew(slots: readonly StreamSlot[], ttlMs: number): Promise<void> {
    const byKey = new Map<string, string[]>();
    for (const s of slots) {
      const key = this.key(s.owner);
      let ids = byKey.get(key);
      if (ids === undefined) byKey.set(key, (ids = []));
      ids.push(s.id);
    }
    const ttl = String(Math.ceil(ttlMs));
    const runs: Promise<unknown>[] = [];
    for (const [key, ids] of byKey) {
      for (let i = 0; i < ids.length; i += RENEW_CHUNK) runs.push(RENEW.run(this.redis, [key], [ttl, ...ids.slice(i, i + RENEW_CHUNK)]));
    }
    // Each run goes on whatever the others come to; the hub tries them all again at its next renewal.
    await this.bounded(Promise.all(runs), 'renew');
  }

  async release(slot: StreamSlot): Promise<void> {
    await this.bounded(this.redis.zrem(this.key(slot.owner), slot.id), 'release');
  }

  /** `work`, or a rejection after `timeoutMs`; a failure is counted in otm_stream_slot_failures_total{op}. */
  private async bounded<T>(work: Promise<T>, op: 'acquire' | 'renew' | 'release'): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`Redis did not answer the stream slots' ${op} within ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
      // A release as the process stops does not hold it up.
      timer.unref();
    });
    try {
      return await Promise.race([work, timeout]);
    } catch (e) {
      streamSlotFailures.inc({ op });
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }
}
