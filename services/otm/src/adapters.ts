/**
 * The adapters a process uses, chosen by configuration: the in-process bus or Kafka, the LMDB
 * entity store or Redis, the embedded event log (indexed in LMDB) or ClickHouse. Embedded adapters share one data
 * folder; the distributed ones are clients of their servers.
 */
import {
  TOPICS,
  type ApiKeyStore,
  type Bus,
  type Config,
  type EntityStore,
  type EventStore,
  type Logger,
  type Monitored,
  type RateLimiter,
  type StreamSlots,
  type SubscriptionStore,
} from '@otm/core';
import {
  ClickHouseEventStore,
  DEFAULT_TOPIC_PARTITIONS,
  TOPIC_CONFIG,
  KafkaBus,
  RedisEntityStore,
  ensureTopics,
  type KafkaConsumerSettings,
} from '@otm/distributed';
import { MemoryBus, openEmbeddedStores, type EmbeddedStores } from '@otm/embedded';

export interface Adapters {
  readonly bus: Bus;
  readonly entities: EntityStore;
  readonly events: EventStore;
  /** Webhook subscriptions: beside the entity store (Redis, or the LMDB environment). */
  readonly subscriptions: SubscriptionStore;
  /** API keys (`otm keys`): beside the entity store too. */
  readonly apiKeys: ApiKeyStore;
  /**
   * What counts the quotas (OTM_RATE_LIMIT, OTM_TENANT_RATE_LIMIT): Redis, shared by every process,
   * with the Redis entity store; undefined: each process counts its own (in memory).
   */
  readonly rateLimiter?: RateLimiter;
  /**
   * What counts the open streams of each token (OTM_STREAMS_PER_TOKEN): Redis, shared by every
   * query process, with the Redis entity store; undefined: each process counts its own (in memory).
   */
  readonly streamSlots?: StreamSlots;
  /**
   * Whether each store takes writes (a full disk, Redis out of memory, ClickHouse out of space or
   * parts: kind `store`), and the embedded event log's background work (kind `loop`), for the
   * process's /readyz and /healthz (core/health.ts).
   */
  parts?(): Iterable<Monitored>;
  /** Creates ClickHouse tables and Kafka topics where those are used; idempotent. */
  migrate(): Promise<void>;
  close(): Promise<void>;
}

export interface AdapterOptions {
  /** Kafka consumer settings (tests use fast ones). */
  readonly consumer?: KafkaConsumerSettings;
  /** Redis key prefix and ClickHouse database, to keep test runs apart. */
  readonly redisPrefix?: string;
  readonly clickhouseDatabase?: string;
}

type AdapterConfig = Pick<Config, 'dataDir' | 'bus' | 'kafkaBrokers' | 'entityStore' | 'redisUrl' | 'eventStore' | 'clickhouseUrl'> & {
  readonly kafka?: Config['kafka'];
  readonly redisCache?: boolean;
  /** How long the change feed keeps changes (default: the stores' own, 7 days). */
  readonly feedRetentionMs?: Config['feedRetentionMs'];
  /** The embedded event log's segment size and compaction interval (default: the log's own). */
  readonly eventSegmentBytes?: Config['eventSegmentBytes'];
  readonly eventCompactionIntervalMs?: Config['eventCompactionIntervalMs'];
};

export function openAdapters(config: AdapterConfig, logger: Logger, opts: AdapterOptions = {}): Adapters {
  let embedded: EmbeddedStores | undefined;
  const lmdb = () =>
    (embedded ??= openEmbeddedStores(config.dataDir, {
      warn: (m) => logger.warn(m),
      info: (m) => logger.info(m),
      // The feed and the latest positions are the entity store's: the event log records them for
      // its events only beside the embedded one (else the telemetry worker records them in Redis).
      telemetryEffects: config.entityStore === 'embedded',
      ...(config.feedRetentionMs === undefined ? {} : { feedRetentionMs: config.feedRetentionMs }),
      ...(config.eventSegmentBytes === undefined ? {} : { eventSegmentBytes: config.eventSegmentBytes }),
      ...(config.eventCompactionIntervalMs === undefined ? {} : { eventCompaction: { intervalMs: config.eventCompactionIntervalMs } }),
    }));

  const kafka =
    config.bus === 'kafka'
      ? new KafkaBus({
          brokers: config.kafkaBrokers,
          logger: logger.child({ component: 'kafka' }),
          ...(config.kafka
            ? {
                publishTimeoutMs: config.kafka.publishTimeoutMs,
                lingerMs: config.kafka.lingerMs,
                maxRequestBytes: config.kafka.maxRequestBytes,
              }
            : {}),
          consumer: opts.consumer ?? {
            ...(config.kafka
              ? {
                  sessionTimeout: config.kafka.sessionTimeoutMs,
                  heartbeatInterval: config.kafka.heartbeatMs,
                  rebalanceTimeout: config.kafka.rebalanceTimeoutMs,
                  maxWaitTimeInMs: config.kafka.maxWaitMs,
                }
              : {}),
          },
        })
      : undefined;
  // In-process: one partition for entity changes, so that the entity worker applies one batch at
  // a time, each in one transaction, and the model's semantics never race.
  const bus: Bus = kafka ?? new MemoryBus({ topicPartitions: { [TOPICS.entities]: 1, [TOPICS.telemetry]: 8 } });

  const redis =
    config.entityStore === 'redis'
      ? new RedisEntityStore({
          url: config.redisUrl!,
          ...(opts.redisPrefix ? { prefix: opts.redisPrefix } : {}),
          cacheLatest: config.redisCache,
          warn: (m) => logger.warn(m),
          ...(config.feedRetentionMs === undefined ? {} : { feedRetentionMs: config.feedRetentionMs }),
        })
      : undefined;
  const entities: EntityStore = redis ?? lmdb().entities;

  const clickhouse =
    config.eventStore === 'clickhouse'
      ? new ClickHouseEventStore({ url: config.clickhouseUrl!, ...(opts.clickhouseDatabase ? { database: opts.clickhouseDatabase } : {}) })
      : undefined;
  const events: EventStore = clickhouse ?? lmdb().events;
  const subscriptions: SubscriptionStore = redis?.subscriptions ?? lmdb().subscriptions;
  const apiKeys: ApiKeyStore = redis?.apiKeys ?? lmdb().apiKeys;

  return {
    bus,
    entities,
    events,
    subscriptions,
    apiKeys,
    ...(redis === undefined ? {} : { rateLimiter: redis.rateLimiter, streamSlots: redis.streamSlots }),
    parts: () => [...(embedded?.parts() ?? []), ...(redis?.parts() ?? []), ...(clickhouse?.parts() ?? [])],
    migrate: async () => {
      if (clickhouse) await clickhouse.migrate();
      if (kafka) {
        const admin = kafka.client.admin();
        await admin.connect();
        try {
          await ensureTopics(admin, DEFAULT_TOPIC_PARTITIONS, { config: TOPIC_CONFIG, logger });
        } finally {
          await admin.disconnect();
        }
      }
    },
    close: async () => {
      await bus.close();
      if (redis) await redis.close();
      if (clickhouse) await clickhouse.close();
      if (embedded) await embedded.close();
    },
  };
}
