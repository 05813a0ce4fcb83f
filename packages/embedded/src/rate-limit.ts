/** The request-rate limiter (core rate-limit.ts) of one process: Redis's twin is distributed redis/rate-limit.ts. */
import { gcra, type RateBucket, type RateDecision, type RateLimiter } from '@otm/core';

/** The limiter of one process: the buckets in a Map, expired ones swept as it grows. */
export class MemoryRateLimiter implements RateLimiter {
  private readonly tats = new Map<string, number>();
  private sweepAt = 10_000;

  constructor(private readonly clock: () => number = Date.now) {}

  take(buckets: readonly RateBucket[], cost: number): Promise<RateDecision> {
    const now = this.clock();
    const d = gcra(
      buckets,
      buckets.map((b) => this.tats.get(b.key) ?? 0),
      cost,
      now,
    );
    if (d.allowed) {
      buckets.forEach((b, i) => this.tats.set(b.key, d.tats[i]!));
      if (this.tats.size >= this.sweepAt) {
        // A TAT in the past is the same as none.
        for (const [k, tat] of this.tats) if (tat <= now) this.tats.delete(k);
        this.sweepAt = Math.max(10_000, this.tats.size * 2);
      }
    }
    return Promise.resolve(d);
  }
}
