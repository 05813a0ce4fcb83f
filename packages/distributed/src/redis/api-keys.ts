/**
 * API keys of the distributed deployment (the `ApiKeyStore` port) in Redis, on the entity store's
 * connection and key prefix, in one slot (hash tag `{apikeys}`) so that a change is one MULTI:
 *
 * - `P:ak:{apikeys}` hash: field = key id, value = the record as JSON (the key's SHA-256, never the key);
 * - `P:akh:{apikeys}` hash: field = SHA-256 (hex), value = key id.
 *
 * `otm keys` connects with REDIS_URL and writes them; every ingress and query process reads them
 * (ApiKeyAuthenticator keeps what it read for at most 5 s).
 */
import { Redis as IORedis, type Cluster, type Redis } from 'ioredis';
import type { ApiKeyRecord, ApiKeyStore } from '@otm/core';

export class RedisApiKeyStore implements ApiKeyStore {
  private readonly byId: string;
  private readonly byHashKey: string;

  constructor(
    private readonly redis: Redis | Cluster,
    prefix: string,
    private readonly guard: <T>(p: Promise<T>) => Promise<T> = (p) => p,
  ) {
    this.byId = `${prefix}:ak:{apikeys}`;
    this.byHashKey = `${prefix}:akh:{apikeys}`;
  }

  async create(record: ApiKeyRecord): Promise<void> {
    await this.guard(
      this.redis.multi().hset(this.byId, record.id, JSON.stringify(record)).hset(this.byHashKey, record.hash, record.id).exec(),
    );
  }

  async byHash(hash: string): Promise<ApiKeyRecord | undefined> {
    const id = await this.guard(this.redis.hget(this.byHashKey, hash));
    if (id === null) return undefined;
    const raw = await this.guard(this.redis.hget(this.byId, id));
    return raw === null ? undefined : (JSON.parse(raw) as ApiKeyRecord);
  }

  async list(tenant?: string): Promise<ApiKeyRecord[]> {
    const all = await this.guard(this.redis.hvals(this.byId));
    return all
      .map((raw) => JSON.parse(raw) as ApiKeyRecord)
      .filter((r) => tenant === undefined || r.tenant === tenant)
      .sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1));
  }

  async revoke(id: string, at: string): Promise<ApiKeyRecord | undefined> {
    // Read, then write only if unchanged since: two revocations at once keep the first time.
    for (;;) {
      const raw = await this.guard(this.redis.hget(this.byId, id));
      if (raw === null) return undefined;
      const r = JSON.parse(raw) as ApiKeyRecord;
      if (r.revokedAt !== undefined) return r;
      const next: ApiKeyRecord = { ...r, revokedAt: at };
      // A compare-and-set in one script: no WATCH (which a shared connection cannot hold safely).
      const done = await this.guard(
        this.redis.eval(
          "if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) return 1 end return 0",
          1,
          this.byId,
          id,
          raw,
          JSON.stringify(next),
        ),
      );
      if (done === 1) return next;
    }
  }
}

/** The API keys at `url`, on a connection of their own (for `otm keys`). */
export function openRedisApiKeyStore(url: string, prefix = 'otm'): { store: RedisApiKeyStore; close(): Promise<void> } {
  const redis = new IORedis(url, { maxRetriesPerRequest: 2 });
  redis.on('error', () => {});
  return {
    store: new RedisApiKeyStore(redis, prefix),
    close: async () => {
      await redis.quit();
    },
  };
}
