/**
 * What the entity export (services/worker/src/entity-export.ts) needs of the Redis entity store
 * beyond its change feed (`FeedExport`): the tenants that have a feed, the export's cursor per
 * tenant, the order of feed cursors, and the export's lease.
 *
 * - Tenants: the set `P:tenants`, to which every unit of work adds the tenants it wrote for, in its
 *   own commit (transactions.ts), so a new tenant's first entity is found by the next pass (a
 *   tenant that only sent telemetry has no entity to copy, and is not in it).
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
import type { Cluster, Redis } from 'ioredis';
import { AdapterError, type FeedExport } from '@otm/core';
import type { Keys } from './keys.js';
import { releaseLease, takeLease } from './lease.js';

const STREAM_ID = /^(\d{1,15})-(\d{1,15})$/;

export class RedisFeedExport implements FeedExport {
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly keys: Keys,
    private readonly guard: <T>(p: Promise<T>) => Promise<T>,
  ) {}

  async tenants(): Promise<string[]> {
    return (await this.guard(this.redis.smembers(this.keys.tenants()))).sort();
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
