/**
 * The Kafka adapter's settings: what a caller may set (`KafkaBusOptions`, `KafkaConsumerSettings`),
 * their defaults (`resolveOptions`), and the kafkajs client, producer and consumer configurations
 * made from them. Nothing here talks to Kafka.
 */
import { logLevel as KafkaLogLevel, type ConsumerConfig, type KafkaConfig, type LogEntry, type ProducerConfig } from 'kafkajs';
import { ThrottledLog, type Backoff, type Logger } from '@otm/core';

export interface KafkaConsumerSettings {
  /** Group session timeout (ms). Default 10000; tests: 3000. */
  readonly sessionTimeout?: number;
  /** Heartbeat interval (ms). Default 1000; tests: 500. */
  readonly heartbeatInterval?: number;
  /** Longest a fetch waits for data (ms). Default 500; tests: 100. */
  readonly maxWaitTimeInMs?: number;
  /** Time members have to rejoin during a rebalance (ms). Default 10000; tests: 3000. */
  readonly rebalanceTimeout?: number;
  /** Partitions handled at once by one consumer. Default 1. */
  readonly partitionsConsumedConcurrently?: number;
  /** Largest chunk handed to a handler. Default 5000 messages. */
  readonly maxBatch?: number;
  /** Backoff between retries of a failed chunk: first and largest delay (ms). Default 200 / 10000. */
  readonly retryInitialMs?: number;
  readonly retryMaxMs?: number;
  /** A new group starts from the earliest retained message (default true: a new worker group must not skip messages). */
  readonly fromBeginning?: boolean;
  /** Backoff between starts of a consumer that crashed or could not start. Default 1000 / 30000 ms. */
  readonly restartBackoff?: Backoff;
  /** How often the group's lag is read from the broker (ms). Default 5000. */
  readonly lagIntervalMs?: number;
}

export interface KafkaBusOptions {
  readonly brokers: readonly string[];
  readonly clientId?: string;
  /** pino logger for kafkajs' own messages; without one kafkajs logs nothing. */
  readonly logger?: Logger;
  /** Bound on a publish (ms): after it, publish rejects with a 503. Default 5000. */
  readonly publishTimeoutMs?: number;
  /**
   * How long a publish waits for others to share its produce request (ms; like Kafka's
   * `linger.ms`). Larger record batches are cheaper for brokers and consumers. Default 5.
   */
  readonly lingerMs?: number;
  /**
   * Most bytes of messages (keys and values) in one produce request; a publish larger than that
   * goes in several requests, one after the other. Kafka refuses a record batch larger than its
   * `message.max.bytes` (1 MB by default), and the messages of one partition travel in one batch:
   * without this bound a bulk request of many events of one vehicle could never be accepted by a
   * real broker. A single message larger than this goes alone. Default 1,000,000 (like the Java
   * producer's `max.request.size`).
   */
  readonly maxRequestBytes?: number;
  /** Bound on ready() (ms). Default 2000. */
  readonly readyTimeoutMs?: number;
  /** Seconds a client is told to wait (Retry-After) when Kafka is unavailable. Default 5. */
  readonly retryAfterSeconds?: number;
  /** Socket connection timeout (ms). Default 3000. */
  readonly connectionTimeout?: number;
  readonly consumer?: KafkaConsumerSettings;
}

/**
 * Consumer settings for tests: short session and rebalance timeouts, so that a member that died
 * is noticed and a rebalance is over within seconds (the test broker allows sessions from 1 s;
 * Kafka's default minimum is 6 s).
 */
export const FAST_CONSUMER_SETTINGS: KafkaConsumerSettings = Object.freeze({
  sessionTimeout: 3000,
  rebalanceTimeout: 3000,
  heartbeatInterval: 500,
  maxWaitTimeInMs: 100,
  retryInitialMs: 50,
  retryMaxMs: 500,
  restartBackoff: { initialMs: 200, maxMs: 2_000 },
  lagIntervalMs: 1_000,
});

/**
 * A worker that dies (SIGKILL, a lost machine) holds its partitions until its session times out:
 * 10 s, not kafkajs' 30 s, so that its partitions move to the others within seconds. The
 * rebalance timeout bounds how long the others wait for a member that does not rejoin.
 */
const PRODUCTION_CONSUMER_SETTINGS = {
  sessionTimeout: 10_000,
  heartbeatInterval: 1_000,
  maxWaitTimeInMs: 500,
  rebalanceTimeout: 10_000,
  partitionsConsumedConcurrently: 1,
  maxBatch: 5_000,
  retryInitialMs: 200,
  retryMaxMs: 10_000,
  fromBeginning: true,
  restartBackoff: { initialMs: 1_000, maxMs: 30_000 },
  lagIntervalMs: 5_000,
} satisfies Required<KafkaConsumerSettings>;

/** The settings the bus works with, defaults filled in. */
export interface ResolvedKafkaOptions {
  readonly publishTimeoutMs: number;
  readonly retryAfterSeconds: number;
  readonly lingerMs: number;
  readonly maxRequestBytes: number;
  readonly readyTimeoutMs: number;
  readonly consumer: Required<KafkaConsumerSettings>;
}

export function resolveOptions(opts: KafkaBusOptions): ResolvedKafkaOptions {
  return {
    publishTimeoutMs: opts.publishTimeoutMs ?? 5_000,
    retryAfterSeconds: opts.retryAfterSeconds ?? 5,
    lingerMs: opts.lingerMs ?? 5,
    maxRequestBytes: opts.maxRequestBytes ?? 1_000_000,
    readyTimeoutMs: opts.readyTimeoutMs ?? 2_000,
    consumer: { ...PRODUCTION_CONSUMER_SETTINGS, ...(opts.consumer ?? {}) },
  };
}

/** The kafkajs client's configuration. */
export function clientConfig(opts: KafkaBusOptions, resolved: ResolvedKafkaOptions): KafkaConfig {
  return {
    clientId: opts.clientId ?? 'otm',
    brokers: [...opts.brokers],
    connectionTimeout: opts.connectionTimeout ?? 3_000,
    // A request may not outlive a publish: the publish's own bound is the hard one, this frees sockets.
    requestTimeout: Math.max(1_000, resolved.publishTimeoutMs),
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000 },
    ...(opts.logger
      ? { logLevel: pinoToKafkaLevel(opts.logger), logCreator: logCreator(opts.logger) }
      : { logLevel: KafkaLogLevel.NOTHING }),
  };
}

/** The idempotent producer's retries: a few, within a publish's bound (why not unbounded: producer.ts). */
export const PRODUCER_RETRIES = 3;

/**
 * The producer's configuration (one producer per bus). Idempotent: the broker gives the producer
 * an id and numbers its record batches per partition, so a produce request that kafkajs sends
 * again (its answer lost, its connection broken) is stored once, not twice. That needs acks -1
 * (every publish asks for it) and at most 5 requests in flight to a broker, the batches the broker
 * remembers per producer; kafkajs sends one produce request at a time to each broker for an
 * idempotent producer anyway, and 1 here keeps it so for anything else on the connection.
 */
export function producerConfig(): ProducerConfig {
  return {
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: true,
    retry: { retries: PRODUCER_RETRIES, initialRetryTime: 100, maxRetryTime: 1_000 },
  };
}

/** The configuration of one group member (one per subscription). */
export function consumerConfig(group: string, s: Required<KafkaConsumerSettings>): ConsumerConfig {
  return {
    groupId: group,
    // Room for whole record batches of a large publish in one fetch (a broker returns a batch
    // larger than this whole anyway, so that a consumer always makes progress).
    maxBytesPerPartition: 16 * 1024 * 1024,
    maxBytes: 64 * 1024 * 1024,
    sessionTimeout: s.sessionTimeout,
    heartbeatInterval: s.heartbeatInterval,
    maxWaitTimeInMs: s.maxWaitTimeInMs,
    rebalanceTimeout: s.rebalanceTimeout,
    allowAutoTopicCreation: true,
    // kafkajs never starts a crashed consumer again by itself: consumer.ts replaces every crashed
    // consumer, with its own backoff, state and metrics (one path for every crash, and none lost).
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000, restartOnFailure: () => Promise.resolve(false) },
  };
}

/**
 * kafkajs' log levels onto a pino logger. While a broker is down kafkajs reports every failed
 * connection and retry of every client: its errors and warnings are logged at most once per
 * 10 s per message (with how many were held back), without their stacks.
 */
function logCreator(logger: Logger) {
  const throttle = new ThrottledLog(10_000);
  return () =>
    ({ level, log }: LogEntry) => {
      const { message, stack: _stack, ...extra } = log as LogEntry['log'] & { stack?: unknown };
      const obj = { kafka: extra };
      // Said once per producer: the retries are bounded on purpose, and a producer whose send
      // failed is replaced (producer.ts), which keeps the guarantee kafkajs warns about.
      if (message.startsWith('Limiting retries for the idempotent producer')) logger.debug(obj, message);
      else if (level === KafkaLogLevel.ERROR || level === KafkaLogLevel.WARN) {
        const { log: now, skipped } = throttle.take(message);
        if (!now) return;
        const line = skipped > 0 ? { ...obj, alsoSince: skipped } : obj;
        if (level === KafkaLogLevel.ERROR) logger.error(line, message);
        else logger.warn(line, message);
      }
      else if (level === KafkaLogLevel.INFO) logger.info(obj, message);
      else logger.debug(obj, message);
    };
}

const pinoToKafkaLevel = (logger: Logger): KafkaLogLevel => {
  switch (logger.level) {
    case 'debug':
    case 'trace':
      return KafkaLogLevel.DEBUG;
    case 'info':
      return KafkaLogLevel.INFO;
    case 'warn':
      return KafkaLogLevel.WARN;
    case 'silent':
      return KafkaLogLevel.NOTHING;
    default:
      return KafkaLogLevel.ERROR;
  }
};
