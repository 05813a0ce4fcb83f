/**
 * The adapters of the distributed deployment, one folder each, one file per job: the bus on Kafka
 * (`kafka/`), the event store on ClickHouse (`clickhouse/`), the entity store on Redis (`redis/`).
 */
export { KafkaBus } from './kafka/bus.js';
export { kafkaStorageError, produceChunks } from './kafka/producer.js';
export { packRecords, PACK_HEADER } from './kafka/record-pack.js';
export { ensureTopics, DEFAULT_TOPIC_PARTITIONS, TOPIC_CONFIG } from './kafka/topics.js';
export { isRetryable, UNCLASSIFIED_ATTEMPTS, type KafkaSubscription } from './kafka/consumer.js';
export { withTimeout } from './kafka/timeout.js';
export {
  FAST_CONSUMER_SETTINGS,
  PRODUCER_RETRIES,
  producerConfig,
  type KafkaBusOptions,
  type KafkaConsumerSettings,
} from './kafka/options.js';
export { ClickHouseEventStore, type ClickHouseEventStoreOptions } from './clickhouse/store.js';
export { ENTITY_COLUMNS, EVENT_COLUMNS, eventStoreDdl, type EntityRow } from './clickhouse/schema.js';
export { entityRows, linkedEntities } from './clickhouse/entity-columns.js';
export { eventGetSql, eventListBounds, eventListSql, eventPlacementsSql, trackSql, type Sql } from './clickhouse/sql.js';
export { tsvEncoder, tsvLine } from './clickhouse/tsv.js';
export { columnsTrackFix, eventColumns, normaliseQuantity, type EventColumns, type Normalised } from './clickhouse/columns.js';
export { RedisEntityStore, type RedisEntityStoreOptions } from './redis/store.js';
export { RedisApiKeyStore, openRedisApiKeyStore } from './redis/api-keys.js';
export { RedisFeedExport } from './redis/feed-export.js';
export { RedisSubscriptionStore } from './redis/subscriptions.js';
export { RedisRateLimiter } from './redis/rate-limit.js';
export { RedisStreamSlots } from './redis/stream-slots.js';
