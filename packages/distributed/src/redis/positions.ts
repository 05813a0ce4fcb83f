/**
 * Latest positions of vehicles on Redis (`EntityStore.positions`, and the telemetry worker's
 * `updatePositions`): one hash per tenant (`P:pos:{t}`, keys.ts), field = the vehicle's storage
 * key, value = its LatestPosition as JSON. A map of a fleet is one HGETALL, never a scan of events.
 *
 * Newer wins, decided in Redis: a Lua script replaces a vehicle's position only when the new fix is
 * not older than the one kept (event time, then event key), so telemetry workers of different
 * partitions, replays and late events may update in any order and the newest fix stays. Fixes are
 * first reduced to the newest per vehicle here, then sent a tenant at a time in chunks of
 * POSITION_CHUNK (a script blocks Redis while it runs; a chunk takes a few milliseconds), with
 * EVALSHA (script.ts). The chunks may run in any order: each fix is compared with what is kept.
 */
import { Cluster, Redis } from 'ioredis';
import { AdapterError, type LatestPosition, type PositionReader } from '@otm/core';
import { errorText } from '../error-text.js';
import type { Keys } from './keys.js';
import { LuaScript } from './script.js';

/** Vehicles per script call. */
const POSITION_CHUNK = 500;

/**
 * KEYS[1]: the tenant's hash; ARGV: vehicle, time, event key, JSON, for each fix. Keys are compared
 * byte by byte: Lua's `<` on strings follows the server's locale (Redis sets LC_COLLATE).
 */
const UPDATE_POSITIONS = new LuaScript(`
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local changed = 0
for i = 1, #ARGV, 4 do
  local vehicle, time, key = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local kept = redis.call('HGET', KEYS[1], vehicle)
  local newer = true
  if kept then
    local ok, old = pcall(cjson.decode, kept)
    if ok and type(old) == 'table' and type(old.time) == 'number' and type(old.eventKey) == 'string' then
      newer = time > old.time or (time == old.time and not before(key, old.eventKey))
    end
  end
  if newer then
    redis.call('HSET', KEYS[1], vehicle, ARGV[i + 3])
    changed = changed + 1
  end
end
return changed
`);

/** Whether fix `a` is not older than `b` (event time, then event key). */
const notOlder = (a: LatestPosition, b: LatestPosition): boolean => a.time > b.time || (a.time === b.time && a.eventKey >= b.eventKey);

/** The stored JSON of a position: its members in a fixed order. */
const positionJson = (p: LatestPosition): string =>
  JSON.stringify({
    vehicle: p.vehicle,
    time: p.time,
    lat: p.lat,
    lon: p.lon,
    speedKmh: p.speedKmh,
    heading: p.heading,
    eventKey: p.eventKey,
  });

export class RedisPositions implements PositionReader {
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
  ) {}

  async positions(tenant: string): Promise<LatestPosition[]> {
    const key = this.keys.positions(tenant);
    // As bytes: no string per value made by the client, one per value made here for JSON.parse.
    const all = await this.guard(this.redis.hgetallBuffer(key));
    const out: LatestPosition[] = [];
    for (const [vehicle, raw] of Object.entries(all)) {
      try {
        out.push(JSON.parse(raw.toString('utf8')) as LatestPosition);
      } catch (e) {
        throw new AdapterError('redis', `the position of ${vehicle} in ${key} cannot be decoded: ${errorText(e)}`, {
          retryable: false,
          cause: e,
        });
      }
    }
    return out.sort((a, b) => (a.vehicle < b.vehicle ? -1 : a.vehicle > b.vehicle ? 1 : 0));
  }

  /** Moves each vehicle's position forward (see the top of this file). */
  async update(fixes: ReadonlyArray<LatestPosition & { readonly tenant: string }>): Promise<void> {
    const newest = new Map<string, Map<string, LatestPosition>>();
    for (const f of fixes) {
      let vehicles = newest.get(f.tenant);
      if (vehicles === undefined) newest.set(f.tenant, (vehicles = new Map<string, LatestPosition>()));
      const kept = vehicles.get(f.vehicle);
      if (kept === undefined || notOlder(f, kept)) vehicles.set(f.vehicle, f);
    }
    const calls: Promise<unknown>[] = [];
    for (const [tenant, vehicles] of newest) {
      const key = this.keys.positions(tenant);
      const list = [...vehicles.values()];
      for (let i = 0; i < list.length; i += POSITION_CHUNK) {
        const args: string[] = [];
        for (const p of list.slice(i, i + POSITION_CHUNK)) args.push(p.vehicle, String(p.time), p.eventKey, positionJson(p));
        calls.push(this.guard(UPDATE_POSITIONS.run(this.redis, [key], args)));
      }
    }
    await Promise.all(calls);
  }
}
