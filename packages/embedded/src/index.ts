export { MemoryBus, type MemoryBusOptions } from './memory-bus.js';
export { openEmbeddedStores, type EmbeddedStores, type EmbeddedStoreOptions } from './lmdb-store.js';
export { LmdbSubscriptionStore } from './subscriptions.js';
export {
  LogEventStore,
  DEFAULT_SEGMENT_BYTES,
  type CompactionOptions,
  type CompactionResult,
  type EventLogOptions,
} from './event-log/index.js';
export { LmdbApiKeyStore, openApiKeyStore } from './api-keys.js';
export { MemoryRateLimiter } from './rate-limit.js';
export { MemoryStreamSlots } from './stream-slots.js';
