/**
 * The change feed of the Redis entity store (`EntityStore.feed`): one Redis stream per tenant
 * (`P:f:{t}`, keys.ts), one stream entry per change, its id the feed's cursor.
 *
 * What is written: a unit adds an entry for every version it puts and every entity it deletes,
 * inside its own MULTI/EXEC on a single Redis (transactions.ts), so the stream's order is the order
 * in which units committed and a change is in the feed exactly when it is in the store. The
 * telemetry worker adds the puts of the events it stored in ClickHouse (`append`, after their
 * insert) through a Lua script that runs the XADDs of up to APPEND_CHUNK entries in Redis: one
 * command for hundreds of entries, which saves most of the CPU the worker's client (ioredis) spends
 * on a command each (docs/PERFORMANCE.md). An entry holds `op`, `kind`, `key`, `rank` and `at` (when the change was applied, ms),
 * never the document: the query reads the version it names, so the feed costs little memory per
 * change and a reader always gets the current document.
 *
 * Retention: each commit, and each `append` (at the end of its last script call), ends with a
 * small script that removes the tenant's changes older than `retentionMs` (XTRIM MINID; nothing to
 * do costs one seek: TRIM_FUNCTION) and records the id of the newest change it removed in
 * `P:ff:{t}`, the feed's floor. A read after a cursor below the floor would miss changes: it is
 * answered `cursorExpired` (410), and the reader starts again. A cursor at or above the floor
 * never expires, also when the change it names was removed (a tenant quiet for longer than the
 * retention: nothing after the cursor was lost). This is the embedded feed's rule
 * (packages/embedded/src/feed.ts). XINFO STREAM could not tell it: Redis counts what trimming
 * removed but not up to where (its `max-deleted-entry-id` moves on XDEL only). The stream and its
 * floor share the tenant's hash tag, so the scripts touch one slot on Redis Cluster.
 *
 * Memory: Redis keeps stream entries in listpacks of up to 100 entries that store only the
 * difference to the node's first id and, when the field names are those of the node's first entry,
 * no field names; values cost their bytes (a UUID key: 37), small numbers one or two, `at` about 9.
 * Measured with MEMORY USAGE on Redis 7.0 (test/redis/store.test.ts "costs about 80 bytes"),
 * 100,000 puts of events with UUID keys: 79.4 to 81.4 bytes an entry (7.6 to 7.8 MiB); without
 * `at` it would be 69. At 1,000 location events a second, 7 days (the default retention) hold 605
 * million entries: about 45 GiB of Redis memory; one day 6.4 GiB. Size OTM_FEED_RETENTION for the
 * telemetry rate.
 *
 * Reading: XRANGE from just after the cursor. With a filter on kinds, entries of other kinds are
 * skipped, but a read looks at no more than FEED_SCAN_FACTOR × limit entries, and its `next` is the
 * last entry looked at, so a reader of a rare kind moves forward without any one read costing much.
 */
import { Cluster, Redis, type ChainableCommander } from 'ioredis';
import type { KindSegment } from '@otm/model';
import {
  AdapterError,
  cursorExpired,
  invalidDocument,
  type ChangeFeed,
  type FeedEntry,
  type FeedPage,
  type FeedRead,
  type TelemetrySideEffects,
} from '@otm/core';
import { redisFailure } from './errors.js';
import type { Keys } from './keys.js';
import { LuaScript } from './script.js';

/** Default of `RedisEntityStoreOptions.feedRetentionMs`: 7 days. */
export const DEFAULT_FEED_RETENTION_MS = 7 * 86_400_000;

/** A read with a filter on kinds looks at no more than this many entries per entry asked for. */
export const FEED_SCAN_FACTOR = 20;

/** Entries asked for at once while skipping other kinds. */
const SCAN_CHUNK = 1_000;

/** One change as a unit or the telemetry worker records it. */
export interface FeedChange {
  readonly tenant: string;
  readonly op: 'put' | 'delete';
  readonly kind: KindSegment;
  readonly key: string;
  /** The version's lifecycle rank (a put; 0 for a delete). */
  readonly lifecycleRank: number;
}

/**
 * Entries appended by one script call (`append`). A script blocks Redis while it runs: a call of
 * 500 takes about 2 ms (Redis 7.0, appendfsync always).
 */
const APPEND_CHUNK = 500;

/** The oldest time a trim keeps (ms), as the scripts take it. */
const oldestKept = (now: number, retentionMs: number): string => String(Math.max(0, Math.floor(now - retentionMs)));

/**
 * The trimming of a feed, as a Lua function of the scripts below. KEYS[1]: the stream, KEYS[2]: its
 * floor; `min`: the oldest time kept (ms). Removes the entries before that time and records the id
 * of the newest of them (exact XTRIM: an approximate one keeps some of them, and which is then the
 * newest removed is not known).
 *
 * The XRANGE first: whether the oldest entry is older than `min` is one seek to the stream's start.
 * XREVRANGE alone would cost a walk over the whole stream when nothing is that old (the common
 * case): Redis seeks a reverse range's end among the stream's nodes and, when every node is newer,
 * starts at the last entry and compares each one on its way down, on every commit and append
 * (docs/PERFORMANCE.md).
 */
const TRIM_FUNCTION = `
local function trim(min)
  if #redis.call('XRANGE', KEYS[1], '-', '(' .. min .. '-0', 'COUNT', 1) == 0 then return 0 end
  local old = redis.call('XREVRANGE', KEYS[1], '(' .. min .. '-0', '-', 'COUNT', 1)
  redis.call('SET', KEYS[2], old[1][1])
  return redis.call('XTRIM', KEYS[1], 'MINID', min .. '-0')
end
`;

/** ARGV[1]: the oldest time kept (ms). */
const TRIM_FEED = `${TRIM_FUNCTION}return trim(ARGV[1])
`;

/**
 * ARGV[1]: the oldest time kept (ms), or '' not to trim; ARGV[2]: `at`; then `op`, `kind`, `key`,
 * `rank` of each entry. The XADDs of `addFeedEntry`, in the order given, then the trimming.
 */
const APPEND_FEED = new LuaScript(`${TRIM_FUNCTION}
local at = ARGV[2]
for i = 3, #ARGV, 4 do
  redis.call('XADD', KEYS[1], '*', 'op', ARGV[i], 'kind', ARGV[i + 1], 'key', ARGV[i + 2], 'rank', ARGV[i + 3], 'at', at)
end
if ARGV[1] ~= '' then trim(ARGV[1]) end
return (#ARGV - 2) / 4
`);

/**
 * Adds the XADD of `change` to a MULTI or pipeline: an id given by Redis, then the fields, the same
 * ones in the same order for every entry (so the stream keeps their names once per node).
 */
export function addFeedEntry(m: ChainableCommander, key: string, change: FeedChange, at: number): void {
  void m.xadd(key, '*', 'op', change.op, 'kind', change.kind, 'key', change.key, 'rank', String(change.lifecycleRank), 'at', String(at));
}

/**
 * Adds the trimming of a tenant's feed to what is older than `retentionMs` before `now`. EVAL, not
 * EVALSHA: inside MULTI a NOSCRIPT could not be answered by sending the script (Redis keeps the
 * compiled script, so the body costs only its bytes on the wire).
 */
export function addFeedTrim(m: ChainableCommander, keys: Keys, tenant: string, now: number, retentionMs: number): void {
  void m.eval(TRIM_FEED, 2, keys.feed(tenant), keys.feedFloor(tenant), oldestKept(now, retentionMs));
}

/** A stream entry id as two numbers (ms, sequence). */
type StreamId = readonly [bigint, bigint];
const STREAM_ID = /^(\d{1,20})-(\d{1,20})$/;
const U64_MAX = 2n ** 64n - 1n;

function parseStreamId(s: string): StreamId | undefined {
  const m = STREAM_ID.exec(s);
  if (!m) return undefined;
  const ms = BigInt(m[1]!);
  const seq = BigInt(m[2]!);
  return ms > U64_MAX || seq > U64_MAX ? undefined : [ms, seq];
}

const before = (a: StreamId, b: StreamId): boolean => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);

/** The cursor of a read, or a 400 naming `cursor`. */
function parseCursor(cursor: string): StreamId {
  const id = parseStreamId(cursor);
  if (id === undefined) {
    throw invalidDocument([
      { type: 'invalidField', field: 'cursor', message: `not a cursor of this change feed: ${JSON.stringify(cursor)}` },
    ]);
  }
  return id;
}

function decodeEntry(stream: string, id: string, fields: readonly string[]): FeedEntry {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]!] = fields[i + 1]!;
  const { op, kind, key } = f;
  if ((op !== 'put' && op !== 'delete') || kind === undefined || key === undefined) {
    throw new AdapterError('redis', `feed entry ${id} of ${stream} cannot be decoded`, { retryable: false });
  }
  const at = Number(f.at ?? 0);
  return op === 'put'
    ? { cursor: id, at, op, kind: kind as KindSegment, key, lifecycleRank: Number(f.rank ?? 0) }
    : { cursor: id, at, op, kind: kind as KindSegment, key };
}

/** The feeds of one store. */
export class RedisFeed implements ChangeFeed {
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
    private readonly retentionMs: number,
  ) {}

  /**
   * XRANGE of up to `count` entries from `start`, then the floor, in one round trip (one slot):
   * read after the entries, a floor that is not above the cursor says that nothing the XRANGE
   * needed had been removed when it ran (retention only ever removes the oldest).
   */
  private async range(
    tenant: string,
    start: string,
    count: number,
  ): Promise<{ raw: Array<[string, string[]]>; floor: StreamId | undefined }> {
    const replies =
      (await this.guard(
        this.redis.pipeline().xrange(this.keys.feed(tenant), start, '+', 'COUNT', count).get(this.keys.feedFloor(tenant)).exec(),
      )) ?? [];
    for (const [err] of replies) if (err) throw redisFailure(err);
    const raw = (replies[0]?.[1] ?? []) as Array<[string, string[]]>;
    const floor = replies[1]?.[1];
    return { raw, floor: typeof floor === 'string' ? parseStreamId(floor) : undefined };
  }

  /**
   * The tenant's end (ChangeFeed.head): the id of the newest entry (XREVRANGE … COUNT 1), else the
   * floor (every entry trimmed: a read after it is not expired), else `0-0`; one round trip.
   */
  async head(tenant: string): Promise<string> {
    const replies =
      (await this.guard(
        this.redis.pipeline().xrevrange(this.keys.feed(tenant), '+', '-', 'COUNT', 1).get(this.keys.feedFloor(tenant)).exec(),
      )) ?? [];
    for (const [err] of replies) if (err) throw redisFailure(err);
    const newest = (replies[0]?.[1] ?? []) as Array<[string, string[]]>;
    if (newest[0] !== undefined) return newest[0][0];
    const floor = replies[1]?.[1];
    return typeof floor === 'string' ? floor : '0-0';
  }

  async read(q: FeedRead): Promise<FeedPage> {
    let from = q.after === undefined ? undefined : parseCursor(q.after);
    if (!(q.limit > 0)) return { entries: [] };
    const stream = this.keys.feed(q.tenant);
    const budget = q.kinds === undefined ? q.limit : FEED_SCAN_FACTOR * q.limit;
    const entries: FeedEntry[] = [];
    let next: string | undefined;
    let start = q.after === undefined ? '-' : `(${q.after}`;
    let looked = 0;
    while (looked < budget && entries.length < q.limit) {
      const count = q.kinds === undefined ? q.limit : Math.min(budget - looked, Math.max(q.limit, SCAN_CHUNK));
      const { raw, floor } = await this.range(q.tenant, start, count);
      if (from !== undefined && floor !== undefined && before(from, floor)) {
        // The reader's own cursor: it missed changes. Further into a read (retention caught up with
        // it while it skipped other kinds): the page so far is whole, the next read is told.
        if (next === undefined) throw cursorExpired(`the change feed no longer holds the changes after cursor ${q.after}: start again`);
        break;
      }
      for (const [id, fields] of raw) {
        looked++;
        next = id;
        const e = decodeEntry(stream, id, fields);
        if (q.kinds === undefined || q.kinds.has(e.kind)) entries.push(e);
        if (entries.length >= q.limit) break;
      }
      if (raw.length < count || next === undefined) break;
      start = `(${next}`;
      from = parseStreamId(next);
    }
    return next === undefined ? { entries } : { entries, next };
  }

  /**
   * Appends changes, in the order given: a tenant's entries by one script call (APPEND_FEED) per
   * APPEND_CHUNK of them, which runs their XADDs in Redis and, in the last call, the trimming; one
   * call after the other (a call sent again after NOSCRIPT must not pass the next), tenants at once.
   */
  async append(changes: Parameters<TelemetrySideEffects['appendFeed']>[0]): Promise<void> {
    if (changes.length === 0) return;
    const now = Date.now();
    const at = String(now);
    const chunks = new Map<string, string[][]>();
    for (const c of changes) {
      let list = chunks.get(c.tenant);
      if (list === undefined) chunks.set(c.tenant, (list = []));
      let args = list[list.length - 1];
      if (args === undefined || args.length >= 2 + 4 * APPEND_CHUNK) list.push((args = ['', at]));
      args.push(c.op, c.kind, c.key, String(c.lifecycleRank));
    }
    const oldest = oldestKept(now, this.retentionMs);
    await Promise.all(
      [...chunks].map(async ([tenant, list]) => {
        const keys = [this.keys.feed(tenant), this.keys.feedFloor(tenant)];
        list[list.length - 1]![0] = oldest;
        for (const args of list) await this.guard(APPEND_FEED.run(this.redis, keys, args));
      }),
    );
  }
}
