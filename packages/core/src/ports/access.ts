/** API keys and the slots of open streams. */

/**
 * An API key made with `otm keys create` (docs/auth.md): the key itself is shown once and never
 * kept; `hash` is its SHA-256 (hex), by which a presented key is looked up.
 */
export interface ApiKeyRecord {
  /** A random UUID: what `otm keys list` shows and `otm keys revoke` takes. */
  readonly id: string;
  readonly name?: string;
  readonly tenant: string;
  readonly scopes: readonly string[];
  readonly hash: string;
  /** ISO 8601 times. */
  readonly createdAt: string;
  readonly expiresAt?: string;
  readonly revokedAt?: string;
}

/** API keys, beside the entity store (the LMDB environment, or Redis). */
export interface ApiKeyStore {
  create(record: ApiKeyRecord): Promise<void>;
  /** The key whose SHA-256 (hex) is `hash`, revoked or not. */
  byHash(hash: string): Promise<ApiKeyRecord | undefined>;
  /** Every key, or a tenant's, oldest first. */
  list(tenant?: string): Promise<ApiKeyRecord[]>;
  /** Marks it revoked at `at` (ISO; kept if it was revoked before); undefined when there is no such key. */
  revoke(id: string, at: string): Promise<ApiKeyRecord | undefined>;
}

/**
 * One open stream (GET /api/v5/stream) as it is counted against its token's OTM_STREAMS_PER_TOKEN.
 */
export interface StreamSlot {
  /**
   * Which token holds it: a reference that is never the token, nor a plain hash of it (query's
   * `StreamTickets.ref`); the slots of a token are counted together, whatever tenant they are for.
   */
  readonly owner: string;
  /** The stream's id, random, unique in the deployment. */
  readonly id: string;
}

/**
 * The slots of open streams, per token: in the process (`MemoryStreamSlots`,
 * packages/embedded/src/stream-slots.ts: the embedded deployment and the default) or in Redis,
 * shared by every query process (`RedisStreamSlots`, packages/distributed/src/redis/stream-slots.ts). A slot is held for a time
 * (`ttlMs`, on the store's clock) and renewed while its stream is open, so that the slots of a
 * process that died free themselves once that time is over; a stream that closes releases its
 * slot at once. Rejects when the store cannot be reached.
 */
export interface StreamSlots {
  /**
   * Takes `slot` for `ttlMs` if its token holds fewer than `limit` slots (expired ones do not
   * count); whether it was taken. A slot already held is renewed, and taken.
   */
  acquire(slot: StreamSlot, limit: number, ttlMs: number): Promise<boolean>;
  /**
   * Holds every one of `slots` for `ttlMs` from now, taking again, without counting, any that
   * expired or went missing meanwhile (a stream let through while the store failed, or one whose
   * renewals could not reach it for a while): a stream that is open holds its slot.
   */
  renew(slots: readonly StreamSlot[], ttlMs: number): Promise<void>;
  /** Frees the slot at once (nothing when it is not held). */
  release(slot: StreamSlot): Promise<void>;
}
