/**
 * The quotas' limiter shared by every process of the deployment (OTM_RATE_LIMIT,
 * OTM_TENANT_RATE_LIMIT): GCRA (core's rate-limit.ts) in one Lua script, so that taking a cost from
 * the credential's and the tenant's bucket is atomic whichever ingress or query process asks. On
 * the entity store's connection and key prefix, one string key a bucket, in the tenant's slot:
 * `P:rl:{t}` (the tenant's), `P:rl:{t}:<credential>` (a credential's), each holding its TAT
 * (ms, Redis's clock) and expiring once it is in the past.
 */
import type { Cluster, Redis } from 'ioredis';
import type { RateBucket, RateDecision, RateLimiter } from '@otm/core';
import { LuaScript } from './script.js';

/**
 * KEYS: the buckets; ARGV: cost, then count and period (ms) of each bucket. Redis's clock (TIME)
 * is the one clock of all processes. Reply: allowed (0/1), index, remaining, resetMs,
 * retryAfterMs (-1: never, the cost is more than a burst).
 */
const GCRA = new LuaScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cost = tonumber(ARGV[1])
local tats = {}
local best = nil
for i = 1, #KEYS do
  local count = tonumber(ARGV[2 * i])
  local period = tonumber(ARGV[2 * i + 1])
  local step = period / count
  local old = tonumber(redis.call('GET', KEYS[i]) or '0')
  local tat = math.max(old, now) + cost * step
  tats[i] = tat
  local ahead = tat - now
  if ahead > period then
    local retry = -1
    if cost <= count then retry = math.ceil(ahead - period) end
    local reset = math.max(0, math.ceil(old - now))
    if best == nil or best[1] == 1 or retry == -1 or (best[5] ~= -1 and retry > best[5]) then best = {0, i - 1, 0, reset, retry} end
  else
    local remaining = math.floor((period - ahead) / step + 1e-9)
    if best == nil or (best[1] == 1 and remaining < best[3]) then best = {1, i - 1, remaining, math.ceil(ahead), 0} end
  end
end
if best[1] == 1 then
  for i = 1, #KEYS do
    redis.call('SET', KEYS[i], string.format('%.3f', tats[i]), 'PX', math.ceil(tats[i] - now) + 1000)
  end
end
return best
`);

const esc = (s: string) => s.replace(/[%:{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

export class RedisRateLimiter implements RateLimiter {
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly prefix: string,
    /** Longest wait for Redis (ms); then the take fails (and the quota check fails open). */
    private readonly timeoutMs = 500,
  ) {}

  /**
   * The buckets' keys: `RateBucket.key` is `<tenant>` or `<tenant>\0<credential>`; all of one
   * request's are the same tenant's (one slot on a Cluster).
   */
  private key(bucket: string): string {
    const nul = bucket.indexOf('\0');
    return nul < 0
      ? `${this.prefix}:rl:{${esc(bucket)}}`
      : `${this.prefix}:rl:{${esc(bucket.slice(0, nul))}}:${esc(bucket.slice(nul + 1))}`;
  }

  async take(buckets: readonly RateBucket[], cost: number): Promise<RateDecision> {
    const args = [String(cost)];
    for (const b of buckets) args.push(String(b.limit.count), String(b.limit.periodMs));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`Redis did not answer the quota check within ${this.timeoutMs} ms`)), this.timeoutMs);
    });
    try {
      const reply = (await Promise.race([
        GCRA.run(
          this.redis,
          buckets.map((b) => this.key(b.key)),
          args,
        ),
        timeout,
      ])) as number[];
      const [allowed, index, remaining, resetMs, retry] = reply.map(Number) as [number, number, number, number, number];
      return { allowed: allowed === 1, index, remaining, resetMs, retryAfterMs: retry < 0 ? Infinity : retry };
    } finally {
      clearTimeout(timer);
    }
  }
}
