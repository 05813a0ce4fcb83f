/**
 * Request-rate quotas (OTM_RATE_LIMIT per credential, OTM_TENANT_RATE_LIMIT per tenant), counted by
 * a RateLimiter (in-process, or Redis). A plugin of the root (fastify-plugin), after authentication.
 */
import { hash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import {
  rateLimitFailures,
  rateLimited,
  tooManyRequests,
  type Logger,
  type Principal,
  type RateBucket,
  type RateLimit,
  type RateLimiter,
} from '@otm/core';

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Takes `cost` more from the quotas of the request's credential and tenant (a bulk request's
     * documents beyond the one its arrival took): sets the RateLimit-* headers on `reply`, or throws
     * the 429. Nothing when no quota is set.
     */
    chargeQuota(req: FastifyRequest, reply: FastifyReply, cost: number, documents?: number): Promise<void>;
  }
}

/** The quotas of the authenticated routes, and the limiter that counts them (in-process, or Redis). */
export interface Quotas {
  /** Per credential (Principal.quotaKey, else Principal.id). */
  readonly perCredential?: RateLimit;
  /** Per tenant, all its credentials together. */
  readonly perTenant?: RateLimit;
  readonly limiter: RateLimiter;
}

export interface QuotaOptions {
  /** None when undefined, or when both limits are unset. */
  readonly quotas: Quotas | undefined;
  readonly logger: Logger;
}

/** What the quota of a credential counts by: never the credential, a hash of what identifies it. */
const credentialKey = (p: Principal): string | undefined => {
  const id = p.quotaKey ?? p.id;
  return id === undefined ? undefined : hash('sha256', id, 'hex').slice(0, 32);
};

/**
 * The quotas: every authenticated route (the ones with a `scope`; never /healthz, /readyz,
 * /metrics, openapi.json, the docs or the pages) takes 1 from the credential's and the tenant's
 * quota once the request is authenticated; a bulk request takes its other documents when it has
 * counted them (`chargeQuota`). Answers carry the RateLimit-* headers of the quota with the least
 * left; a refused request gets 429 `tooManyRequests` with Retry-After. When the limiter fails (Redis
 * down or slow) the request goes through: quotas fail open, counted in otm_rate_limit_failures_total
 * and logged at most once a minute.
 */
export const quotas = fp<QuotaOptions>(
  // eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
  async (app: FastifyInstance, { quotas, logger }) => {
    const { perCredential, perTenant } = quotas ?? {};
    if (quotas === undefined || (perCredential === undefined && perTenant === undefined)) {
      app.decorate('chargeQuota', () => Promise.resolve());
      return;
    }
    let warnedAt = -Infinity;
    const charge = async (req: FastifyRequest, reply: FastifyReply, cost: number, documents = cost): Promise<void> => {
      const p = req.principal;
      if (p === undefined || cost <= 0) return;
      const buckets: RateBucket[] = [];
      const names: string[] = [];
      const cred = perCredential === undefined ? undefined : credentialKey(p);
      if (cred !== undefined) {
        buckets.push({ key: `${p.tenant}\0${cred}`, limit: perCredential! });
        names.push('credential');
      }
      if (perTenant !== undefined) {
        buckets.push({ key: p.tenant, limit: perTenant });
        names.push('tenant');
      }
      if (buckets.length === 0) return;
      let d;
      try {
        d = await quotas.limiter.take(buckets, cost);
      } catch (err) {
        rateLimitFailures.inc();
        const now = Date.now();
        if (now - warnedAt >= 60_000) {
          warnedAt = now;
          logger.warn({ err }, 'the quota check failed: requests go through unchecked until it works again');
        }
        return;
      }
      const limit = buckets[d.index]!.limit;
      const window = Math.ceil(limit.periodMs / 1000);
      const headers: Record<string, string> = {
        'ratelimit-limit': String(limit.count),
        'ratelimit-remaining': String(d.remaining),
        'ratelimit-reset': String(Math.ceil(d.resetMs / 1000)),
        'ratelimit-policy': `${limit.count};w=${window}`,
      };
      if (d.allowed) {
        reply.headers(headers);
        return;
      }
      const which = names[d.index]!;
      rateLimited.inc({ limit: which });
      const quota = `${which === 'tenant' ? "the tenant's quota (OTM_TENANT_RATE_LIMIT)" : "this credential's quota (OTM_RATE_LIMIT)"} of ${limit.count} a ${window === 60 ? 'minute' : window === 1 ? 'second' : `${window} s`}`;
      if (d.retryAfterMs === Infinity || documents > limit.count) {
        // A bulk request of more documents than one period's worth: no wait would let it through.
        headers['retry-after'] = String(window);
        throw tooManyRequests(
          `this request counts ${documents} documents, more than ${quota} lets through at once: send smaller bulk requests`,
          headers,
        );
      }
      headers['retry-after'] = String(Math.max(1, Math.ceil(d.retryAfterMs / 1000)));
      throw tooManyRequests(`more requests than ${quota}: try again in ${headers['retry-after']} s`, headers);
    };
    app.decorate('chargeQuota', charge);
    // After the authentication hook (hooks run in the order they were added).
    app.addHook('onRequest', async (req, reply) => {
      if (req.routeOptions.config?.scope === undefined) return;
      await charge(req, reply, 1);
    });
  },
  { name: 'otm-quotas', dependencies: ['otm-authentication'] },
);
