/**
 * API keys (`otm keys`) as bearer credentials: looked up by their SHA-256 in the ApiKeyStore.
 * What a lookup found (a key, or none) is kept for at most `cacheMs` (5 s): a key revoked, expired
 * or made on any process is seen by every process within that time (docs/auth.md).
 */
import { API_KEY_RE, apiKeyHash, apiKeyRefusal, type ApiKeyRecord, type ApiKeyStore } from '@otm/core';
import type { AuthOutcome, BearerAuthenticator } from './auth.js';

export const API_KEY_CACHE_MS = 5_000;
/** Most lookups kept; beyond, the oldest go first. */
const CACHE_MAX = 10_000;

export class ApiKeyAuthenticator implements BearerAuthenticator {
  private readonly cache = new Map<string, { record: ApiKeyRecord | undefined; until: number }>();

  constructor(
    private readonly store: ApiKeyStore,
    private readonly cacheMs = API_KEY_CACHE_MS,
  ) {}

  accepts(token: string): boolean {
    return API_KEY_RE.test(token);
  }

  async verify(token: string): Promise<AuthOutcome> {
    const hash = apiKeyHash(token);
    const now = Date.now();
    let hit = this.cache.get(hash);
    if (hit === undefined || hit.until <= now) {
      let record: ApiKeyRecord | undefined;
      try {
        record = await this.store.byHash(hash);
      } catch {
        return { status: 503, message: 'API keys cannot be checked for now: try again shortly' };
      }
      hit = { record, until: now + this.cacheMs };
      this.cache.delete(hash);
      if (this.cache.size >= CACHE_MAX) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(hash, hit);
    }
    const { record } = hit;
    if (record === undefined) return { status: 401, message: 'the bearer token is not valid: unknown API key' };
    const refusal = apiKeyRefusal(record, now);
    if (refusal !== undefined) return { status: 401, message: `the bearer token is not valid: ${refusal}` };
    return { principal: { tenant: record.tenant, scopes: new Set(record.scopes), id: `key:${record.id}` } };
  }
}
