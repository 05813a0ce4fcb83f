/**
 * Request-rate quotas (OTM_RATE_LIMIT per credential, OTM_TENANT_RATE_LIMIT per tenant): a limit
 * `count/period`, and a limiter that takes a request's cost from the limits that apply to it.
 *
 * The algorithm is GCRA (the generic cell rate algorithm, a token bucket kept as one timestamp):
 * each limit has a "theoretical arrival time" (TAT); a request of cost `c` moves it to
 * `max(TAT, now) + c * T`, with `T = period / count`, and is let through when the new TAT is at
 * most one period ahead of now (a burst of one period's worth, `count`, then `count` a period).
 * A request refused moves nothing. Several limits are taken together: all of them, or none. The
 * limiters: the process's own (embedded rate-limit.ts) and Redis's (distributed redis/rate-limit.ts).
 */
import { Counter } from 'prom-client';
import { registry } from './metrics.js';

/** `count` requests (or bulk documents) a `periodMs`. */
export interface RateLimit {
  readonly count: number;
  readonly periodMs: number;
}

const UNITS: Record<string, number> = { s: 1_000, m: 60_000 };

/** `1000/s`, `60000/m` (also `10/5s`): throws an Error saying what is expected. */
export function parseRateLimit(spec: string): RateLimit {
  const m = /^(\d{1,9})\/(\d{1,4})?([sm])$/.exec(spec.trim());
  const count = m ? Number(m[1]) : NaN;
  const periodMs = m ? Number(m[2] ?? '1') * UNITS[m[3]!]! : NaN;
  if (!(count >= 1 && periodMs >= 1_000 && periodMs <= 3_600_000)) {
    throw new Error(`must be a count a second or a minute such as 1000/s or 60000/m (at least 1, a period up to 60m), got '${spec}'`);
  }
  return { count, periodMs };
}

/** One limit a request is counted against: its counter's name (`key`) and the limit. */
export interface RateBucket {
  readonly key: string;
  readonly limit: RateLimit;
}

/** What taking a cost from some buckets came to. */
export interface RateDecision {
  readonly allowed: boolean;
  /** The bucket reported in the RateLimit-* headers: the refusing one, else the one with the least left. */
  readonly index: number;
  /** What that bucket has left after this request (0 when refused). */
  readonly remaining: number;
  /** Milliseconds until that bucket is full again. */
  readonly resetMs: number;
  /** Refused: milliseconds until the same request would be let through (Infinity: never, it costs more than a burst). */
  readonly retryAfterMs: number;
}

export interface RateLimiter {
  /** Takes `cost` from every bucket, or from none when one has not enough left. */
  take(buckets: readonly RateBucket[], cost: number): Promise<RateDecision>;
}

/** The GCRA step for buckets whose TATs (ms, 0: none yet) are `tats`; the new TATs when allowed. */
export function gcra(
  buckets: readonly RateBucket[],
  tats: readonly number[],
  cost: number,
  now: number,
): RateDecision & { readonly tats: number[] } {
  const next: number[] = [];
  let best: RateDecision | undefined;
  for (let i = 0; i < buckets.length; i++) {
    const { count, periodMs } = buckets[i]!.limit;
    const t = periodMs / count;
    const tat = Math.max(tats[i] ?? 0, now) + cost * t;
    next.push(tat);
    const ahead = tat - now;
    if (ahead > periodMs) {
      const retryAfterMs = cost > count ? Infinity : ahead - periodMs;
      const refusal = { allowed: false, index: i, remaining: 0, resetMs: Math.max(0, (tats[i] ?? 0) - now), retryAfterMs };
      if (best === undefined || best.allowed || retryAfterMs > best.retryAfterMs) best = refusal;
      continue;
    }
    const remaining = Math.floor((periodMs - ahead) / t + 1e-9);
    if (best === undefined || (best.allowed && remaining < best.remaining)) {
      best = { allowed: true, index: i, remaining, resetMs: ahead, retryAfterMs: 0 };
    }
  }
  const b = best ?? { allowed: true, index: -1, remaining: 0, resetMs: 0, retryAfterMs: 0 };
  // Members named: a spread followed by `tats` costs far more in V8 (docs/PERFORMANCE.md, object spreads).
  return { allowed: b.allowed, index: b.index, remaining: b.remaining, resetMs: b.resetMs, retryAfterMs: b.retryAfterMs, tats: next };
}

/** Requests refused by a quota, by which one (`credential`, `tenant`). */
export const rateLimited = new Counter({
  name: 'otm_rate_limited_total',
  help: 'Requests answered 429 by a quota (OTM_RATE_LIMIT: credential, OTM_TENANT_RATE_LIMIT: tenant)',
  labelNames: ['limit'] as const,
  registers: [registry],
});

/** Requests let through unchecked because the shared limiter (Redis) failed: quotas fail open. */
export const rateLimitFailures = new Counter({
  name: 'otm_rate_limit_failures_total',
  help: 'Requests let through without a quota check because the limiter (Redis) failed',
  registers: [registry],
});
