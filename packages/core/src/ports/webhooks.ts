/** Webhook subscriptions and their delivery attempts. */
import type { KindSegment } from '@otm/model';

/** Which changes a webhook subscription takes besides its kinds; ids as storage keys. */
export interface WebhookFilter {
  /** Changes whose document names this vehicle: the vehicle itself, and documents with it as their `vehicle`. */
  readonly vehicle?: string;
  /** The trip itself, and events linked to it. */
  readonly trip?: string;
  /** Events of this eventType only. */
  readonly eventType?: string;
}

/**
 * A webhook subscription (POST /api/v5/subscriptions): where a tenant's changes go, which ones,
 * signed with which secret, and how far they went.
 */
export interface WebhookSubscription {
  readonly id: string;
  readonly tenant: string;
  readonly url: string;
  /** Only changes of these kinds; undefined: every kind. */
  readonly kinds?: readonly KindSegment[];
  readonly filter: WebhookFilter;
  readonly secret: string;
  readonly state: 'active' | 'paused';
  /** Why it was paused (the dispatcher's last failure once the retry window was over). */
  readonly reason?: string;
  /** The feed cursor of the last change delivered (or passed over); undefined: from the oldest change kept. */
  readonly cursor?: string;
  /** When it was made (ms since the epoch). */
  readonly createdAt: number;
  /**
   * Grows with every change of the cursor or state that is not the dispatcher's own moving on
   * (replay, resume, pause): a dispatcher's `advance` names the revision it read, so that it never
   * overwrites a replay that came meanwhile.
   */
  readonly rev: number;
  /** When the first failed attempt of the batch now being retried was made (ms); undefined while deliveries succeed. */
  readonly failingSince?: number;
}

/** One attempt at delivering a batch of changes to a subscription's URL. */
export interface DeliveryAttempt {
  /** The batch's id (the `OTM-Delivery` header); the same for every attempt at the same batch in one dispatcher. */
  readonly id: string;
  /** When the attempt started (ms since the epoch). */
  readonly at: number;
  /** 1 for the first attempt at the batch, then 2, 3, ... */
  readonly attempt: number;
  /** Changes in the batch, and the cursors of its first and last. */
  readonly changes: number;
  readonly firstCursor: string;
  readonly lastCursor: string;
  /** `delivered`: a 2xx answer; `failed`: another answer, a timeout or a connection error; `refused`: the target's address is not allowed. */
  readonly outcome: 'delivered' | 'failed' | 'refused';
  /** The answer's HTTP status, when one came. */
  readonly status?: number;
  /** What went wrong (no answer, a refused address), in words. */
  readonly error?: string;
  readonly durationMs: number;
}

/**
 * Where webhook subscriptions are kept (the embedded LMDB environment, or Redis), with the recent
 * delivery attempts of each, and the leases that share them among dispatchers. Every change of a
 * subscription is durable when its promise resolves.
 */
export interface SubscriptionStore {
  /**
   * Adds a subscription unless its tenant has `maxPerTenant` already (then false; nothing stored).
   * `id` is new (a random UUID).
   */
  create(sub: WebhookSubscription, maxPerTenant: number): Promise<boolean>;
  get(tenant: string, id: string): Promise<WebhookSubscription | undefined>;
  /** The tenant's subscriptions, oldest first. */
  list(tenant: string): Promise<WebhookSubscription[]>;
  /** Every subscription of every tenant (tenant and id), for the dispatchers. */
  all(): Promise<Array<{ readonly tenant: string; readonly id: string }>>;
  /** Removes the subscription, its deliveries and its lease; false when there was none. */
  delete(tenant: string, id: string): Promise<boolean>;
  /**
   * The dispatcher's moving on: sets the cursor to `to` and forgets `failingSince`, only if the
   * subscription still has revision `rev` and cursor `from` (else false: it was replayed, resumed,
   * paused or deleted meanwhile, and nothing changes).
   */
  advance(tenant: string, id: string, rev: number, from: string | undefined, to: string): Promise<boolean>;
  /** Pauses it with the reason, only if it still has revision `rev` (else false). */
  pause(tenant: string, id: string, rev: number, reason: string): Promise<boolean>;
  /** Makes it active again at the same cursor (forgets `reason` and `failingSince`); undefined when there is none. */
  resume(tenant: string, id: string): Promise<WebhookSubscription | undefined>;
  /** Sets its cursor (back) to `cursor` (forgets `failingSince`); undefined when there is none. */
  replay(tenant: string, id: string, cursor: string): Promise<WebhookSubscription | undefined>;
  /**
   * Records an attempt (the newest `keep` are kept); a failed or refused one also sets
   * `failingSince` to its time unless it is set already. Nothing when the subscription is gone.
   */
  recordDelivery(tenant: string, id: string, attempt: DeliveryAttempt, keep: number): Promise<void>;
  /** The recorded attempts, newest first, at most `limit`. */
  deliveries(tenant: string, id: string, limit: number): Promise<DeliveryAttempt[]>;
  /** Takes or renews the subscription's lease for `owner` for `ms`; false while another owner holds it. */
  lease(tenant: string, id: string, owner: string, ms: number): Promise<boolean>;
  /** Gives the lease up, if `owner` holds it. */
  release(tenant: string, id: string, owner: string): Promise<void>;
  /**
   * Records that dispatcher `owner` is alive for the next `ttlMs`, and answers how many dispatchers
   * are (itself included), so that each takes its share of the subscriptions.
   */
  dispatchers(owner: string, ttlMs: number): Promise<number>;
}
