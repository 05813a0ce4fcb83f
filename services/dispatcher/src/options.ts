/** The dispatcher's options and what it is built from. */
import { DEFAULT_SHARED_FEED_OPTIONS, type AddressRange, type FeedSource, type Logger, type SubscriptionStore } from '@otm/core';
import { DEFAULT_HTTP_LIMITS, type HttpLimits } from './deliver.js';

/** Most bytes of changes in one batch (at least one change goes, whatever its size). */
export const MAX_BATCH_BYTES = 4 * 1024 * 1024;
/** Delivery attempts kept per subscription (GET .../deliveries). */
export const KEPT_DELIVERIES = 100;
/** Longest pause before a subscription's loop tries a failed step again (ms). */
export const SUBSCRIPTION_RETRY_CAP_MS = 5_000;
/** Longest pause before a failed scan is tried again (ms). */
export const SCAN_RETRY_CAP_MS = 30_000;

export interface RetryPolicy {
  /** The first pause's bound (ms, default 1000); doubled for each attempt. */
  readonly baseMs: number;
  /** The largest bound (ms, default 300000: 5 minutes). */
  readonly capMs: number;
  /** How long a batch is tried before the subscription is paused (ms, default 86400000: 24 h). */
  readonly windowMs: number;
}

export interface DispatcherOptions {
  /** Most changes in one delivery (OTM_WEBHOOK_BATCH, default 100). */
  readonly batch: number;
  /** Addresses deliveries may reach although private (OTM_WEBHOOK_ALLOW). */
  readonly allow: readonly AddressRange[];
  /** How long a batch that is not full waits for more changes, from its first change's time (ms, default 1000). */
  readonly lingerMs: number;
  /** How often an idle subscription reads its feed again (ms, default 200). */
  readonly pollMs: number;
  /** How often the dispatcher looks for subscriptions to take (ms, default 1000). */
  readonly scanMs: number;
  /** How long a lease lasts unless renewed (ms, default 10000). */
  readonly leaseMs: number;
  /** How often a look for subscriptions also counts them by state, for `otm_webhook_subscriptions` (ms, default 10000). */
  readonly countMs: number;
  readonly retry: RetryPolicy;
  readonly http: HttpLimits;
  /**
   * Pages of the feed (of `batch` changes each) one look at the feed reads at most, while the batch
   * is not full, for a subscription with a filter or kinds (the pages of its tenant may hold other
   * kinds, for its other subscriptions): default 20, so that one that takes few of the changes
   * moves its cursor on every 20 pages rather than every page.
   */
  readonly readFactor: number;
  /** Most bytes of pages of the feed kept for the other subscriptions of their tenant (default 32 MiB). */
  readonly keepBytes: number;
  /** For tests: the random numbers of the jitter. */
  readonly random: () => number;
}

export const DEFAULT_DISPATCHER_OPTIONS: DispatcherOptions = {
  batch: 100,
  allow: [],
  lingerMs: 1_000,
  pollMs: 200,
  scanMs: 1_000,
  leaseMs: 10_000,
  countMs: 10_000,
  retry: { baseMs: 1_000, capMs: 300_000, windowMs: 86_400_000 },
  http: DEFAULT_HTTP_LIMITS,
  readFactor: 20,
  keepBytes: DEFAULT_SHARED_FEED_OPTIONS.maxBytes,
  random: Math.random,
};

/** What the dispatcher reads: the change feed and the documents of its entries (query's `Finder`). */
export type DispatchSource = FeedSource;

export interface DispatcherDeps {
  readonly store: SubscriptionStore;
  readonly source: DispatchSource;
  readonly logger: Logger;
}
