export {
  KafkaBus,
  produceChunks,
  packRecords,
  PACK_HEADER,
  ensureTopics,
  isRetryable,
  UNCLASSIFIED_ATTEMPTS,
  withTimeout,
  DEFAULT_TOPIC_PARTITIONS,
  FAST_CONSUMER_SETTINGS,
  type KafkaBusOptions,
  type KafkaConsumerSettings,
  type KafkaSubscription,
} from './kafka-bus.js';
export { ClickHouseEventStore, EVENT_COLUMNS, eventGetSql, eventPlacementsSql, eventStoreDdl, sqlString, tsvEncoder, tsvLine, type ClickHouseEventStoreOptions } from './clickhouse-event-store.js';
export { eventColumns, eventTimeMs, normaliseQuantity, speedKmh, type EventColumns, type Normalised } from './event-columns.js';
export { RedisEntityStore, type RedisEntityStoreOptions } from './redis-entity-store.js';
