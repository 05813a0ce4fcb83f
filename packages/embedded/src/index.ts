export { MemoryBus, type MemoryBusOptions } from './memory-bus.js';
export { openEmbeddedStores, type EmbeddedStores } from './lmdb-store.js';
