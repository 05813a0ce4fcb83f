/**
 * The bus of the distributed deployment on Kafka (kafkajs).
 *
 * Publishing: one producer per bus, `acks: -1` (every in-sync replica), message value = the
 * ChangeMessage as JSON, key = `envelope.key` (so one key stays on one partition, in order),
 * topic = `envelope.topic`. Several messages of one key in one produce request go as one record,
 * their texts one a line, with the header `otm-pack: <count>` (`packRecords`); a produce request
 * holds at most `maxRequestBytes`. `publish` resolves only once Kafka acknowledged every message; when
 * Kafka cannot take them within `publishTimeoutMs` it rejects with `unavailable()` (503,
 * Retry-After): never a hang, never a resolve for a lost write. A timed-out send may still land
 * later; the client retries on 503 and the workers' writes are idempotent, so that is harmless.
 *
 * Consuming: one consumer (group member) per `subscribe`, `eachBatch` with auto-resolve and
 * auto-commit off. A partition's batch is handed to the handler in chunks of about `maxBatch`
 * messages (a packed record is never split between two), in partition order; the offset of a
 * chunk is committed only after the handler resolved. Failures:
 * - retryable (an OtmServiceError with `retryable`, or any other error, e.g. a socket error of a
 *   store): nothing is committed, the same chunk is retried with exponential backoff
 *   (heartbeating meanwhile). If the consumer is stopped or loses the partition meanwhile, the
 *   chunk is left uncommitted and the next owner of the partition receives it again.
 * - non-retryable (an OtmServiceError without `retryable`, e.g. a document that can never be
 *   applied): the chunk is re-run one message at a time to find the culprit(s) (re-applying the
 *   messages before it is harmless: handlers are idempotent); each message that fails
 *   non-retryably on its own goes to `TOPICS.deadLetter` with headers `reason`, `code`,
 *   `original-topic`, `original-partition`, `original-offset`, `original-key` (acks -1; if that
 *   produce fails, it is retried like a retryable error), then processing continues.
 *   Messages that are not valid JSON go to the dead-letter topic directly.
 * Batch-first keeps the common path fast (one store round trip per chunk); the per-message pass
 * only runs for the rare poison message.
 */
import { Kafka, logLevel as KafkaLogLevel, type Admin, type Consumer, type EachBatchPayload, type KafkaMessage, type LogEntry, type Producer } from 'kafkajs';
import { OtmServiceError, TOPICS, decodeMessage, encodeMessage, unavailable, type Bus, type ChangeMessage, type Envelope, type Logger, type SubscribeOptions, type Subscription, type Topic } from '@otm/core';

export interface KafkaConsumerSettings {
  /** Group session timeout (ms). Default 30000; tests: 3000. */
  readonly sessionTimeout?: number;
  /** Heartbeat interval (ms). Default 3000; tests: 500. */
  readonly heartbeatInterval?: number;
  /** Longest a fetch waits for data (ms). Default 500; tests: 100. */
  readonly maxWaitTimeInMs?: number;
  /** Time members have to rejoin during a rebalance (ms). Default 60000; tests: 3000. */
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

/** Consumer settings for tests on the librdkafka mock (see shared/infra/SERVICES.md). */
export const FAST_CONSUMER_SETTINGS: KafkaConsumerSettings = Object.freeze({
  sessionTimeout: 3000,
  rebalanceTimeout: 3000,
  heartbeatInterval: 500,
  maxWaitTimeInMs: 100,
  retryInitialMs: 50,
  retryMaxMs: 500,
});

const PRODUCTION_CONSUMER_SETTINGS = {
  sessionTimeout: 30_000,
  heartbeatInterval: 3_000,
  maxWaitTimeInMs: 500,
  rebalanceTimeout: 60_000,
  partitionsConsumedConcurrently: 1,
  maxBatch: 5_000,
  retryInitialMs: 200,
  retryMaxMs: 10_000,
  fromBeginning: true,
} satisfies Required<KafkaConsumerSettings>;

/** kafkajs' log levels onto a pino logger. */
function logCreator(logger: Logger) {
  return () =>
    ({ level, log }: LogEntry) => {
      const { message, ...extra } = log;
      const obj = { kafka: extra };
      if (level === KafkaLogLevel.ERROR) logger.error(obj, message);
      else if (level === KafkaLogLevel.WARN) logger.warn(obj, message);
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

/** Rejects with `onTimeout()` when `p` has not settled after `ms`. */
export function withTimeout<T>(p: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Whether a retry can help: OtmServiceError says so itself; anything else is taken as an I/O failure. */
export const isRetryable = (e: unknown): boolean => (e instanceof OtmServiceError ? e.retryable : true);

/**
 * Attempts at a batch that keeps failing with an error that is not an OtmServiceError (a fault
 * of the worker's own code, not a store being unavailable: adapters turn I/O failures into
 * retryable OtmServiceErrors). After them the messages are applied one by one and the one that
 * still fails goes to the dead-letter topic, so a poison message cannot stop a partition for good.
 */
export const UNCLASSIFIED_ATTEMPTS = 5;

/** Per partition: messages fetched ahead, the loop applying them, and whether it had to stop. */
interface Pipeline {
  readonly parts: Map<string, { tail: Promise<void>; queue: Decoded[]; running: boolean; failed: boolean }>;
  /** Set when the subscription closes: a failing chunk is then given up (not committed). */
  stopping: boolean;
}

/** Most messages in one produce request (a larger publish is sent in several). */
const SEND_CHUNK = 10_000;
/** What a record adds to a produce request besides its key and value (framing; an estimate on the safe side). */
const RECORD_OVERHEAD = 32;
/** What a record's headers add (a packed record's one header; an estimate on the safe side). */
const HEADERS_OVERHEAD = 64;

/**
 * Splits messages, in order, into produce requests of at most `maxCount` messages and `maxBytes`
 * bytes of keys, values and record framing; a message larger than `maxBytes` goes alone.
 */
export function produceChunks<M extends { readonly key: string; readonly value: string | Buffer; readonly headers?: Record<string, string> }>(messages: readonly M[], maxCount: number, maxBytes: number): M[][] {
  const chunks: M[][] = [];
  let chunk: M[] = [];
  let bytes = 0;
  for (const m of messages) {
    const size = Buffer.byteLength(m.key) + Buffer.byteLength(m.value) + RECORD_OVERHEAD + (m.headers === undefined ? 0 : HEADERS_OVERHEAD);
    if (chunk.length > 0 && (chunk.length >= maxCount || bytes + size > maxBytes)) {
      chunks.push(chunk);
      chunk = [];
      bytes = 0;
    }
    chunk.push(m);
    bytes += size;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** Header of a Kafka record that packs several change messages of one key (its value: their texts, one a line). */
export const PACK_HEADER = 'otm-pack';
/** Largest value of a packed record: far under any broker's message.max.bytes. */
const PACK_MAX_BYTES = 256 * 1024;
const NEWLINE = 0x0a;
const LINE_BREAK = Buffer.from([NEWLINE]);

/** A record to produce: one message, or several of one key packed into one. */
export interface ProduceRecord {
  readonly key: string;
  readonly value: string | Buffer;
  readonly headers?: Record<string, string>;
}

/**
 * The records to produce for messages of one topic, in publish order per key: the messages of a
 * key that appears more than once in the publish are packed, in order, into records of up to
 * `maxPackBytes`, their texts one a line (a change message's JSON never holds a raw newline; one
 * that does goes alone). Kafka, the producer and the consumers then handle one record where they
 * handled each message (kafkajs encodes every record into its own buffer: ~15 µs of CPU an event
 * of a bulk request, ~4 packed; docs/PERFORMANCE.md). A key sent once stays one plain record.
 */
export function packRecords(messages: readonly { readonly key: string; readonly value: string | Buffer }[], maxPackBytes = PACK_MAX_BYTES): ProduceRecord[] {
  const byKey = new Map<string, (string | Buffer)[]>();
  for (const m of messages) {
    const list = byKey.get(m.key);
    if (list === undefined) byKey.set(m.key, [m.value]);
    else list.push(m.value);
  }
  const out: ProduceRecord[] = [];
  for (const [key, values] of byKey) {
    if (values.length === 1) {
      out.push({ key, value: values[0]! });
      continue;
    }
    let pack: Buffer[] = [];
    let bytes = 0;
    const flush = () => {
      if (pack.length === 1) out.push({ key, value: pack[0]! });
      else if (pack.length > 1) {
        const parts: Buffer[] = [];
        pack.forEach((b, i) => (i === 0 ? parts.push(b) : parts.push(LINE_BREAK, b)));
        out.push({ key, value: Buffer.concat(parts, bytes), headers: { [PACK_HEADER]: String(pack.length) } });
      }
      pack = [];
      bytes = 0;
    };
    for (const v of values) {
      const b = typeof v === 'string' ? Buffer.from(v) : v;
      if (b.includes(NEWLINE)) {
        flush();
        out.push({ key, value: v });
        continue;
      }
      if (pack.length > 0 && bytes + 1 + b.length > maxPackBytes) flush();
      pack.push(b);
      bytes += pack.length === 1 ? b.length : b.length + 1;
    }
    flush();
  }
  return out;
}

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

/**
 * Creates topics with the given partition counts; topics that exist are left alone. Clusters that
 * refuse (the librdkafka mock cluster refuses CreateTopics) are logged and skipped: topic creation
 * is then the operator's job (or the broker's auto-create). For `otm migrate`.
 * Returns whether the cluster accepted the request.
 */
export async function ensureTopics(
  admin: Admin,
  topics: Readonly<Record<string, number>>,
  opts: { replicationFactor?: number; logger?: Logger; timeoutMs?: number } = {},
): Promise<boolean> {
  const list = Object.entries(topics).map(([topic, numPartitions]) => ({
    topic,
    numPartitions,
    ...(opts.replicationFactor === undefined ? {} : { replicationFactor: opts.replicationFactor }),
  }));
  try {
    await withTimeout(
      admin.createTopics({ topics: list, waitForLeaders: true, timeout: opts.timeoutMs ?? 10_000 }),
      (opts.timeoutMs ?? 10_000) + 1_000,
      () => new Error('createTopics timed out'),
    );
    opts.logger?.info({ topics }, 'kafka topics ensured');
    return true;
  } catch (e) {
    opts.logger?.warn({ topics, err: errorText(e) }, 'kafka refused to create topics; continuing (create them on the cluster, or rely on auto-create)');
    return false;
  }
}

/** The topics of the pipeline with default partition counts (for `otm migrate`). */
export const DEFAULT_TOPIC_PARTITIONS: Readonly<Record<Topic, number>> = Object.freeze({
  [TOPICS.entities]: 12,
  [TOPICS.telemetry]: 24,
  [TOPICS.deadLetter]: 3,
});

type Handler = (batch: readonly Envelope[]) => Promise<void>;

/** A Subscription that can also tell when its consumer first joined the group (tests, readiness). */
export interface KafkaSubscription extends Subscription {
  /** Resolves when the consumer first got its partition assignment. */
  readonly joined: Promise<void>;
}

/** One change message taken from a Kafka record (a packed record gives several). */
interface Decoded {
  readonly message: KafkaMessage;
  /** The change message's own text: the record's value, or its line of a packed record. */
  readonly value: Buffer | null;
  /** For a packed record: which of its messages this is, and how many it holds. */
  readonly part?: { readonly index: number; readonly of: number };
  /** Whether this is the record's last message: the record's offset may be committed after it. */
  readonly last: boolean;
  readonly envelope?: Envelope;
  readonly parseError?: string;
}

/**
 * Takes the next chunk off `queue`: `max` messages (or what there is), and then the rest of the
 * record the last of them came from, so that a chunk always ends with a whole record, whose
 * offset is committed after it.
 */
function takeChunk(queue: Decoded[], max: number): Decoded[] {
  let n = Math.min(max, queue.length);
  while (n < queue.length && !queue[n - 1]!.last) n++;
  return queue.splice(0, n);
}

export class KafkaBus implements Bus {
  private readonly kafka: Kafka;
  private readonly opts: KafkaBusOptions;
  private readonly consumerSettings: Required<KafkaConsumerSettings>;
  private readonly publishTimeoutMs: number;
  private readonly retryAfter: number;
  private producer: Producer | undefined;
  private producerConnect: Promise<Producer> | undefined;
  private admin: Admin | undefined;
  private readonly subscriptions = new Set<Subscription>();
  private closed = false;

  constructor(opts: KafkaBusOptions) {
    if (opts.brokers.length === 0) throw new Error('KafkaBus: no brokers');
    this.opts = opts;
    this.publishTimeoutMs = opts.publishTimeoutMs ?? 5_000;
    this.retryAfter = opts.retryAfterSeconds ?? 5;
    this.consumerSettings = { ...PRODUCTION_CONSUMER_SETTINGS, ...(opts.consumer ?? {}) };
    this.kafka = new Kafka({
      clientId: opts.clientId ?? 'otm',
      brokers: [...opts.brokers],
      connectionTimeout: opts.connectionTimeout ?? 3_000,
      // A request may not outlive a publish: the race below is the hard bound, this frees sockets.
      requestTimeout: Math.max(1_000, this.publishTimeoutMs),
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000 },
      ...(opts.logger ? { logLevel: pinoToKafkaLevel(opts.logger), logCreator: logCreator(opts.logger) } : { logLevel: KafkaLogLevel.NOTHING }),
    });
  }

  /** The kafkajs client (for `ensureTopics(bus.client.admin(), ...)` and tests). */
  get client(): Kafka {
    return this.kafka;
  }

  private connectedProducer(): Promise<Producer> {
    if (this.producerConnect) return this.producerConnect;
    const producer = this.kafka.producer({
      // Idempotence would be right for production Kafka (no duplicates on producer retries), but
      // the librdkafka mock used in tests refuses it ("Broker 0 not found"); duplicates are
      // harmless here anyway because every worker write is idempotent.
      idempotent: false,
      allowAutoTopicCreation: true,
      retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 },
    });
    const p = producer.connect().then(
      () => {
        this.producer = producer;
        return producer;
      },
      async (e: unknown) => {
        // A producer whose connect() threw keeps Node alive until disconnected.
        this.producerConnect = undefined;
        await producer.disconnect().catch(() => {});
        throw e;
      },
    );
    this.producerConnect = p;
    return p;
  }

  /**
   * Publishes with acks from all in-sync replicas. Publishes that arrive while a send is in flight
   * are queued and go together in the next send, so concurrent requests share produce requests
   * (and their round trips) without waiting for a timer. Each publish is bounded by
   * `publishTimeoutMs`: after it, it rejects with a 503 (its messages may still arrive, which is
   * harmless: every write is idempotent).
   */
  async publish(envelopes: readonly Envelope[]): Promise<void> {
    if (this.closed) throw unavailable('the bus is closed', this.retryAfter);
    if (envelopes.length === 0) return;
    const done = new Promise<void>((resolve, reject) => {
      this.queue.push({ envelopes, resolve, reject });
    });
    this.pump();
    try {
      await withTimeout(done, this.publishTimeoutMs, () => unavailable(`kafka did not acknowledge within ${this.publishTimeoutMs} ms`, this.retryAfter));
    } catch (e) {
      done.catch(() => {}); // settles later; its outcome no longer matters
      if (e instanceof OtmServiceError) throw e;
      throw unavailable(`kafka refused the messages: ${errorText(e)}`, this.retryAfter, e);
    }
  }

  private readonly queue: Array<{ envelopes: readonly Envelope[]; resolve: () => void; reject: (e: unknown) => void }> = [];
  private sending = false;
  private lingering: NodeJS.Timeout | undefined;

  /** Sends everything queued in one request, one request at a time, after lingering `lingerMs`. */
  private pump(): void {
    if (this.sending || this.queue.length === 0 || this.lingering) return;
    const linger = this.opts.lingerMs ?? 5;
    if (linger > 0) {
      this.lingering = setTimeout(() => {
        this.lingering = undefined;
        this.send();
      }, linger);
      return;
    }
    this.send();
  }

  private send(): void {
    if (this.sending || this.queue.length === 0) return;
    this.sending = true;
    const taken = this.queue.splice(0, this.queue.length);
    const byTopic = new Map<string, { key: string; value: string | Buffer }[]>();
    for (const t of taken) {
      for (const e of t.envelopes) {
        const list = byTopic.get(e.topic) ?? [];
        list.push({ key: e.key, value: encodeMessage(e.message) });
        byTopic.set(e.topic, list);
      }
    }
    // At most SEND_CHUNK messages and maxRequestBytes bytes per produce request, so that a record
    // batch stays under the broker's message.max.bytes and the consumers' fetch size; the chunks
    // go one after the other, which keeps per-key order.
    const maxBytes = this.opts.maxRequestBytes ?? 1_000_000;
    const send = async () => {
      const producer = await this.connectedProducer();
      for (const [topic, messages] of byTopic) {
        // A packed record stays under the request bound too (with room for its key and framing).
        for (const chunk of produceChunks(packRecords(messages, Math.min(PACK_MAX_BYTES, maxBytes - 1024)), SEND_CHUNK, maxBytes)) {
          await producer.sendBatch({ acks: -1, timeout: this.publishTimeoutMs, topicMessages: [{ topic, messages: chunk }] });
        }
      }
    };
    send().then(
      () => {
        for (const t of taken) t.resolve();
      },
      (e: unknown) => {
        for (const t of taken) t.reject(e);
      },
    ).finally(() => {
      this.sending = false;
      this.pump();
    });
  }

  /**
   * Consumes `topic` as a member of `group`. If the consumer crashes with an error kafkajs does not
   * retry itself (seen on the librdkafka mock during rebalances), a new consumer is started after a
   * pause, so a worker never sits idle while looking alive; uncommitted batches are replayed.
   */
  async subscribe(topic: Topic, group: string, handler: Handler, options: SubscribeOptions = {}): Promise<KafkaSubscription> {
    if (this.closed) throw unavailable('the bus is closed', this.retryAfter);
    const s = this.consumerSettings;
    let resolveJoined!: () => void;
    const joined = new Promise<void>((r) => (resolveJoined = r));
    let closing: Promise<void> | undefined;
    let current: Consumer | undefined;
    let restartTimer: NodeJS.Timeout | undefined;
    const pipeline: Pipeline | undefined = options.fetchAhead ? { parts: new Map(), stopping: false } : undefined;

    const start = async (): Promise<void> => {
      const consumer = this.kafka.consumer({
        groupId: group,
        // A whole record batch must fit in one fetch (the librdkafka mock never splits one).
        maxBytesPerPartition: 16 * 1024 * 1024,
        maxBytes: 64 * 1024 * 1024,
        sessionTimeout: s.sessionTimeout,
        heartbeatInterval: s.heartbeatInterval,
        maxWaitTimeInMs: s.maxWaitTimeInMs,
        rebalanceTimeout: s.rebalanceTimeout,
        allowAutoTopicCreation: true,
      });
      current = consumer;
      consumer.on(consumer.events.GROUP_JOIN, () => resolveJoined());
      consumer.on(consumer.events.CRASH, (event) => {
        const { error, restart } = event.payload as { error: unknown; restart: boolean };
        if (restart || closing) return; // kafkajs restarts it itself, or we are stopping
        this.opts.logger?.error({ topic, group, err: errorText(error) }, 'kafka consumer crashed; starting a new one');
        void consumer.disconnect().catch(() => {});
        restartTimer = setTimeout(() => {
          restartTimer = undefined;
          if (closing) return;
          start().catch((e: unknown) => this.opts.logger?.error({ topic, group, err: errorText(e) }, 'kafka consumer restart failed'));
        }, 1_000);
      });
      try {
        await consumer.connect();
        await consumer.subscribe({ topics: [topic], fromBeginning: s.fromBeginning });
        await consumer.run({
          autoCommit: false,
          eachBatchAutoResolve: false,
          partitionsConsumedConcurrently: options.concurrency ?? s.partitionsConsumedConcurrently,
          eachBatch: (payload) => (pipeline ? this.consumeAhead(payload, handler, pipeline) : this.consumeBatch(payload, handler)),
        });
      } catch (e) {
        await consumer.disconnect().catch(() => {});
        throw unavailable(`cannot consume ${topic}: ${errorText(e)}`, this.retryAfter, e);
      }
    };
    await start();

    const sub: KafkaSubscription = {
      joined,
      close: () =>
        (closing ??= (async () => {
          this.subscriptions.delete(sub);
          if (restartTimer) clearTimeout(restartTimer);
          if (pipeline && current) {
            // Take no more batches; what is being applied finishes and is committed, a chunk that
            // keeps failing is given up; then stop.
            pipeline.stopping = true;
            current.pause([{ topic }]);
            await withTimeout(Promise.all([...pipeline.parts.values()].map((p) => p.tail)), 10_000, () => new Error('drain timed out')).catch(() => {});
          }
          // stop() waits for the batch in hand, which commits what its handler finished.
          await current?.stop().catch(() => {});
          await current?.disconnect().catch(() => {});
        })()),
    };
    this.subscriptions.add(sub);
    return sub;
  }

  /** The change messages of a record: one, or each line of a packed record (`packRecords`). */
  private decode(topic: string, m: KafkaMessage): Decoded[] {
    const count = m.headers?.[PACK_HEADER];
    if (count === undefined || m.value === null) return [this.decodeOne(topic, m, m.value, undefined, true)];
    const lines: Buffer[] = [];
    for (let from = 0; ; ) {
      const at = m.value.indexOf(NEWLINE, from);
      lines.push(m.value.subarray(from, at === -1 ? m.value.length : at));
      if (at === -1) break;
      from = at + 1;
    }
    if (String(count) !== String(lines.length)) {
      return [{ message: m, value: m.value, last: true, parseError: `a packed record of ${String(count)} messages holds ${lines.length} lines` }];
    }
    return lines.map((line, i) => this.decodeOne(topic, m, line, { index: i, of: lines.length }, i === lines.length - 1));
  }

  private decodeOne(topic: string, m: KafkaMessage, value: Buffer | null, part: Decoded['part'], last: boolean): Decoded {
    try {
      const message = decodeMessage(value?.toString('utf8') ?? 'null');
      if (typeof message !== 'object' || message === null || typeof message.op !== 'string') throw new Error('not a change message');
      return { message: m, value, part, last, envelope: { topic: topic as Topic, key: m.key?.toString('utf8') ?? '', message } };
    } catch (e) {
      return { message: m, value, part, last, parseError: errorText(e) };
    }
  }

  /**
   * Fetch-ahead consumption: offsets are resolved as soon as a batch is queued, so kafkajs goes on
   * fetching while the handler works. Per partition, what was fetched meanwhile is handed to the
   * handler in one call (up to `maxBatch` messages), in order, and committed only after that call
   * resolved. Queued messages are bounded (2 x maxBatch per partition): then the fetch waits. When
   * a call cannot finish (the consumer stopped or lost the partition) nothing more of that
   * partition is committed; the next owner, or this member after a rebalance, starts again from
   * the last commit.
   */
  private async consumeAhead(payload: EachBatchPayload, handler: Handler, pipeline: Pipeline): Promise<void> {
    const { batch, isRunning, isStale, resolveOffset, heartbeat, commitOffsetsIfNecessary } = payload;
    const live = () => isRunning() && !isStale() && !pipeline.stopping;
    const key = `${batch.topic}\u0000${batch.partition}`;
    let st = pipeline.parts.get(key);
    if (st?.failed) {
      await st.tail;
      st = undefined;
    }
    if (!st) {
      st = { tail: Promise.resolve(), queue: [], running: false, failed: false };
      pipeline.parts.set(key, st);
    }
    const state = st;
    if (!live() || batch.messages.length === 0) return;
    for (const m of batch.messages) state.queue.push(...this.decode(batch.topic, m));
    resolveOffset(batch.messages[batch.messages.length - 1]!.offset);
    const max = this.consumerSettings.maxBatch;
    if (!state.running) {
      state.running = true;
      state.tail = (async () => {
        try {
          while (state.queue.length > 0 && !state.failed) {
            const chunk = takeChunk(state.queue, max);
            const done = await this.handleChunk(chunk, batch.topic, batch.partition, handler, live, heartbeat);
            if (!done) {
              state.failed = true;
              break;
            }
            const last = chunk[chunk.length - 1]!.message.offset;
            await commitOffsetsIfNecessary({
              topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: (BigInt(last) + 1n).toString() }] }],
            });
          }
        } catch (e) {
          state.failed = true;
          this.opts.logger?.warn({ topic: batch.topic, partition: batch.partition, err: errorText(e) }, 'fetched-ahead messages not committed');
        } finally {
          if (state.failed) state.queue.length = 0;
          state.running = false;
        }
      })();
    }
    if (state.queue.length >= 2 * max) await state.tail;
  }

  private async consumeBatch(payload: EachBatchPayload, handler: Handler): Promise<void> {
    const { batch, isRunning, isStale, resolveOffset, heartbeat, commitOffsetsIfNecessary } = payload;
    const live = () => isRunning() && !isStale();
    const commit = async (lastOffset: string) => {
      resolveOffset(lastOffset);
      await commitOffsetsIfNecessary({
        topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: (BigInt(lastOffset) + 1n).toString() }] }],
      });
    };
    const max = this.consumerSettings.maxBatch;
    const queue = batch.messages.flatMap((m) => this.decode(batch.topic, m));
    while (queue.length > 0) {
      if (!live()) return;
      const chunk = takeChunk(queue, max);
      const done = await this.handleChunk(chunk, batch.topic, batch.partition, handler, live, heartbeat);
      if (!done) return; // stopped or lost the partition: leave the rest uncommitted
      await commit(chunk[chunk.length - 1]!.message.offset);
      await heartbeat().catch(() => {});
    }
  }

  /** Runs the handler with heartbeats while it works. */
  private async withHeartbeat<T>(work: Promise<T>, heartbeat: () => Promise<void>): Promise<T> {
    const timer = setInterval(() => void heartbeat().catch(() => {}), this.consumerSettings.heartbeatInterval);
    try {
      return await work;
    } finally {
      clearInterval(timer);
    }
  }

  /**
   * Applies one chunk; true once every message of it was applied or dead-lettered, false when the
   * consumer stopped (or lost the partition) before that.
   */
  private async handleChunk(
    chunk: readonly Decoded[],
    topic: string,
    partition: number,
    handler: Handler,
    live: () => boolean,
    heartbeat: () => Promise<void>,
  ): Promise<boolean> {
    const good = chunk.filter((d) => d.envelope !== undefined);
    if (good.length === chunk.length) {
      const outcome = await this.retrying(() => handler(chunk.map((d) => d.envelope!)), live, heartbeat, { topic, partition, offset: chunk[0]!.message.offset });
      if (outcome === 'ok') return true;
      if (outcome === 'stopped') return false;
    }
    // A poison message somewhere in the chunk: one message at a time.
    for (const d of chunk) {
      if (!live()) return false;
      if (d.envelope === undefined) {
        if (!(await this.deadLetter(d, topic, partition, 'unparseable message: ' + d.parseError, 'invalidMessage', live, heartbeat))) return false;
        continue;
      }
      let failure: unknown;
      const outcome = await this.retrying(() => handler([d.envelope!]), live, heartbeat, { topic, partition, offset: d.message.offset }, (e) => (failure = e));
      if (outcome === 'stopped') return false;
      if (outcome === 'failed') {
        const code = failure instanceof OtmServiceError ? failure.code : 'internal';
        if (!(await this.deadLetter(d, topic, partition, errorText(failure), code, live, heartbeat))) return false;
      }
    }
    return true;
  }

  /** Calls `work` until it resolves ('ok'), fails non-retryably ('failed') or the consumer stops ('stopped'). */
  private async retrying(
    work: () => Promise<void>,
    live: () => boolean,
    heartbeat: () => Promise<void>,
    where: { topic: string; partition: number; offset: string },
    onFailed?: (e: unknown) => void,
  ): Promise<'ok' | 'failed' | 'stopped'> {
    let delay = this.consumerSettings.retryInitialMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.withHeartbeat(work(), heartbeat);
        return 'ok';
      } catch (e) {
        if (!isRetryable(e) || (!(e instanceof OtmServiceError) && attempt >= UNCLASSIFIED_ATTEMPTS)) {
          onFailed?.(e);
          return 'failed';
        }
        this.opts.logger?.warn({ ...where, attempt, err: errorText(e) }, 'handler failed; retrying the batch');
      }
      // Back off in small steps, heartbeating, so that stop() and rebalances are not held up.
      const until = Date.now() + delay;
      while (Date.now() < until) {
        if (!live()) return 'stopped';
        await sleep(Math.min(100, until - Date.now()));
        await heartbeat().catch(() => {});
      }
      if (!live()) return 'stopped';
      delay = Math.min(delay * 2, this.consumerSettings.retryMaxMs);
    }
  }

  private async deadLetter(
    d: Decoded,
    topic: string,
    partition: number,
    reason: string,
    code: string,
    live: () => boolean,
    heartbeat: () => Promise<void>,
  ): Promise<boolean> {
    this.opts.logger?.error({ topic, partition, offset: d.message.offset, code, reason }, 'message sent to the dead-letter topic');
    const outcome = await this.retrying(
      async () => {
        const producer = await this.connectedProducer();
        await withTimeout(
          producer.send({
            topic: TOPICS.deadLetter,
            acks: -1,
            messages: [
              {
                key: d.message.key,
                value: d.value,
                headers: {
                  reason: reason.slice(0, 2_000),
                  code,
                  'original-topic': topic,
                  'original-partition': String(partition),
                  'original-offset': d.message.offset,
                  ...(d.message.key ? { 'original-key': d.message.key } : {}),
                  // Which message of a packed record it was (from 0), of how many.
                  ...(d.part ? { 'original-pack-index': `${d.part.index}/${d.part.of}` } : {}),
                },
              },
            ],
          }),
          this.publishTimeoutMs,
          () => unavailable('dead-letter produce timed out'),
        );
      },
      live,
      heartbeat,
      { topic: TOPICS.deadLetter, partition, offset: d.message.offset },
    );
    return outcome === 'ok';
  }

  async ready(): Promise<boolean> {
    if (this.closed) return false;
    const timeout = this.opts.readyTimeoutMs ?? 2_000;
    try {
      this.admin ??= this.kafka.admin({ retry: { retries: 0 } });
      const admin = this.admin;
      await withTimeout(
        (async () => {
          await admin.connect();
          await admin.describeCluster();
        })(),
        timeout,
        () => new Error('timeout'),
      );
      return true;
    } catch {
      const admin = this.admin;
      this.admin = undefined;
      await admin?.disconnect().catch(() => {});
      return false;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subscriptions].map((s) => s.close()));
    const producer = this.producer ?? (await this.producerConnect?.catch(() => undefined));
    await producer?.disconnect().catch(() => {});
    await this.admin?.disconnect().catch(() => {});
  }
}
