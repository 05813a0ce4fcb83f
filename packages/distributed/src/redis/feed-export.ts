/**
 * What the entity export (services/worker/src/entity-export.ts) needs of the Redis entity store
 * beyond its change feed (`FeedExport`): the tenants that have a feed, the export's cursor per
 * tenant, the order of feed cursors, and the export's lease.
 *
 * - Tenants: the set `P:tenants`, to which every unit of work adds the tenants it wrote for, in its
 *   own commit (transactions.ts), so a new tenant's first entity is found by the next pass; and,
 *   once in the life of this object, the tenants of the feeds a SCAN of `P:f:{*}` finds (every
 *   master of a Cluster), added to the set: feeds written before the set existed (an upgrade), and
 *   telemetry-only tenants (nothing to copy, a read of their feed a pass). A SCAN walks the whole
 *   keyspace whatever it matches, some seconds of Redis time for millions of keys, spread over
 *   calls of SCAN_COUNT keys: once a process, not once a pass.
 * - Cursor: `P:ax:{t}`, in the tenant's slot (its hash tag is the feed's), written only after the
 *   changes up to it are in ClickHouse: a crash in between copies them again (at least once; the
 *   table's ReplacingMergeTree drops the duplicates).
 * - Order: a feed cursor is a stream id `ms-seq`; `versionOf` is ms × 1,000,000 + seq, a UInt64
 *   that grows with the feed's order (a stream never gets a million entries within one
 *   millisecond: Redis adds a few hundred thousand a second at best).
 * - Lease: `P:axl` holds the exporter that works; every telemetry worker runs an exporter, the
 *   others wait until the lease expires or is given up, so the changes are copied once rather than
 *   once per worker (a second copy would be harmless, only wasted work).
 */
import { Cluster, Redis } from 'ioredis';
import { AdapterError, type FeedExport } from '@otm/core';
import type { Keys } from './keys.js';
import { releaseLease, takeLease } from './lease.js';

/** Keys looked at by one SCAN call. */
const SCAN_COUNT = 1_000;

const STREAM_ID = /^(\d{1,15})-(\d{1,15})$/;

export class RedisFeedExport implements FeedExport {
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
  ) {}

  /** Whether the feeds were looked for with a SCAN (`tenants`). */
  private scanned = false;

  async tenants(): Promise<string[]> {
    const registry = this.keys.tenants();
    if (!this.scanned) {
      // Kept in the set, so that a pass that fails after this one still finds them.
      const scanned = await this.scanFeeds();
      if (scanned.size > 0) await this.guard(this.redis.sadd(registry, ...scanned));
      this.scanned = true;
    }
    return (await this.guard(this.redis.smembers(registry))).sort();
  }

  /** The tenants of the feeds a SCAN finds. */
  private async scanFeeds(): Promise<Set<string>> {
    const nodes = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis];
    const pattern = this.keys.feedPattern();
    const found = new Set<string>();
    for (const node of nodes) {
      let cursor = '0';
      do {
        const [next, keys] = await this.guard(node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT));
        for (const key of keys) {
          const tenant = this.keys.tenantOfFeed(key);
          if (tenant !== undefined) found.add(tenant);
        }
        cursor = next;
      } while (cursor !== '0');
    }
    return found;
  }

  async cursor(tenant: string): Promise<string | undefined> {
    return (await this.guard(this.redis.get(this.keys.exportCursor(tenant)))) ?? undefined;
  }

  async saveCursor(tenant: string, cursor: string | undefined): Promise<void> {
    const key = this.keys.exportCursor(tenant);
    if (cursor === undefined) await this.guard(this.redis.del(key));
    else await this.guard(this.redis.set(key, cursor));
  }

  versionOf(cursor: string): bigint {
    const m = STREAM_ID.exec(cursor);
    if (!m) throw new AdapterError('redis', `not a cursor of the change feed: ${JSON.stringify(cursor)}`, { retryable: false });
    return BigInt(m[1]!) * 1_000_000n + BigInt(m[2]!);
  }

  async lease(owner: string, ms: number): Promise<boolean> {
    return this.guard(takeLease(this.redis, this.keys.exportLease(), owner, ms));
  }

  async release(owner: string): Promise<void> {
    await this.guard(releaseLease(this.redis, this.keys.exportLease(), owner));
  }
}
