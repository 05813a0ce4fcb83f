/**
 * A lease in Redis: a string key holding its owner, with an expiry (SET ... PX). The owner takes it
 * when it is free and renews it while it holds it; others wait until it expires or is given up.
 * Used for the change feed's export (feed-export.ts) and each webhook subscription (subscriptions.ts).
 */
import type { Cluster, Redis } from 'ioredis';
import { LuaScript } from './script.js';

/** KEYS[1]: the lease; ARGV[1]: the owner, ARGV[2]: ms. Takes a free lease or renews one's own. */
const LEASE = new LuaScript(`
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`);

/** KEYS[1]: the lease; ARGV[1]: the owner. Gives up one's own lease. */
const RELEASE = new LuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`);

/** Takes the lease `key` for `owner` for `ms` (at least 1 ms) if it is free, or renews it if `owner` holds it; whether `owner` holds it now. */
export async function takeLease(redis: Redis | Cluster, key: string, owner: string, ms: number): Promise<boolean> {
  return (await LEASE.run(redis, [key], [owner, String(Math.max(1, Math.round(ms)))])) === 1;
}

/** Gives up the lease `key` if `owner` holds it. */
export async function releaseLease(redis: Redis | Cluster, key: string, owner: string): Promise<void> {
  await RELEASE.run(redis, [key], [owner]);
}
