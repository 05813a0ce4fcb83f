/**
 * Publishing change messages to Kafka: one producer per bus, `acks: -1` (every in-sync replica),
 * topic = `envelope.topic`, records as `record-pack.ts` makes them.
 *
 * Publishes that arrive while a send is in flight are queued and go together in the next send,
 * after lingering `lingerMs` (like Kafka's `linger.ms`), so concurrent requests share produce
 * requests and their round trips. A produce request holds at most `maxRequestBytes` of records
 * (`produceChunks`); a larger publish goes in several requests, one after the other, which keeps
 * per-key order.
 *
 * `publish` resolves only once Kafka acknowledged every message; when Kafka cannot take them within
 * `publishTimeoutMs` it rejects with `unavailable()` (503, Retry-After): never a hang, never a
 * resolve for a lost write. A timed-out send may still land later; the client retries on 503 and
 * the workers' writes are idempotent, so that is harmless.
 *
 * The producer is idempotent (options.ts): a produce request kafkajs sends again because its answer
 * was lost is stored once. kafkajs numbers a partition's batches before sending them and, when a
 * send fails for good, takes the numbers back for the next send; but the broker may have stored
 * the failed batch, and then takes the next batch of the same size, with the same numbers, for a
 * copy of it: acknowledged and dropped (test: packages/distributed/test/kafka/idempotence.test.ts).
 * So after a send that failed, the producer is replaced: the new one gets a new producer id and
 * numbers from 0. Retries stay bounded (PRODUCER_RETRIES), so that a send fails within a few
 * seconds while Kafka is away instead of holding every later publish behind it.
 */
import type { Kafka, Producer } from 'kafkajs';
import { OtmServiceError, encodeMessage, insufficientStorage, unavailable, writesRefused, type Envelope } from '@otm/core';
import { errorText } from '../error-text.js';
import { producerConfig, type ResolvedKafkaOptions } from './options.js';
import { PACK_MAX_BYTES, packRecords } from './record-pack.js';
import { withTimeout } from './timeout.js';

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
export function produceChunks<
  M extends { readonly key: string; readonly value: string | Buffer; readonly headers?: Record<string, string> },
>(messages: readonly M[], maxCount: number, maxBytes: number): M[][] {
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

/** The bus's producer and its queue of publishes. */
export class Publisher {
  private producer: Producer | undefined;
  private producerConnect: Promise<Producer> | undefined;
  private readonly queue: Array<{ envelopes: readonly Envelope[]; resolve: () => void; reject: (e: unknown) => void }> = [];
  private sending = false;
  private lingering: NodeJS.Timeout | undefined;

  constructor(
    private readonly kafka: Kafka,
    private readonly settings: ResolvedKafkaOptions,
  ) {}

  /** The connected producer (also for dead letters), connecting it on first use. */
  connected(): Promise<Producer> {
    if (this.producerConnect) return this.producerConnect;
    const producer = this.kafka.producer(producerConfig());
    const p = producer.connect().then(
      () => {
        this.producer = producer;
        return producer;
      },
      async (e: unknown) => {
        // A producer whose connect() threw keeps Node alive until disconnected.
        if (this.producerConnect === p) this.producerConnect = undefined;
        await producer.disconnect().catch(() => {});
        throw e;
      },
    );
    this.producerConnect = p;
    return p;
  }

  /**
   * Drops `producer` after a send of it failed (its sequence numbers no longer say what the broker
   * holds): the next send connects a new one. A dead-letter send of the same producer under way
   * fails with it and is retried by the consumer.
   */
  replace(producer: Producer): void {
    if (this.producer !== producer) return;
    this.producer = undefined;
    this.producerConnect = undefined;
    void producer.disconnect().catch(() => {});
  }

  /**
   * Publishes with acks from all in-sync replicas, sharing a produce request with the publishes
   * queued meanwhile. Bounded by `publishTimeoutMs`: after it, rejects with a 503 (its messages
   * may still arrive, which is harmless: every write is idempotent).
   */
  async publish(envelopes: readonly Envelope[]): Promise<void> {
    if (envelopes.length === 0) return;
    const { publishTimeoutMs, retryAfterSeconds } = this.settings;
    const done = new Promise<void>((resolve, reject) => {
      this.queue.push({ envelopes, resolve, reject });
    });
    this.pump();
    try {
      await withTimeout(done, publishTimeoutMs, () =>
        unavailable(`kafka did not acknowledge within ${publishTimeoutMs} ms`, retryAfterSeconds),
      );
    } catch (e) {
      done.catch(() => {}); // settles later; its outcome no longer matters
      if (e instanceof OtmServiceError) throw e;
      // A broker whose log directory failed (a full disk, most often): said so, counted, still a 503.
      if (kafkaStorageError(e)) {
        writesRefused.inc({ store: 'kafka', cause: 'no-space' });
        throw insufficientStorage(
          `not stored: kafka refused the messages for a failed log directory (KAFKA_STORAGE_ERROR: most often a full disk on a broker): ${errorText(e)}; send them again later`,
          retryAfterSeconds,
          e,
        );
      }
      throw unavailable(`kafka refused the messages: ${errorText(e)}`, retryAfterSeconds, e);
    }
  }

  /** Sends everything queued in one request, one request at a time, after lingering `lingerMs`. */
  private pump(): void {
    if (this.sending || this.queue.length === 0 || this.lingering) return;
    const linger = this.settings.lingerMs;
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
    const maxBytes = this.settings.maxRequestBytes;
    const send = async () => {
      const producer = await this.connected();
      try {
        for (const [topic, messages] of byTopic) {
          // A packed record stays under the request bound too (with room for its key and framing).
          for (const chunk of produceChunks(packRecords(messages, Math.min(PACK_MAX_BYTES, maxBytes - 1024)), SEND_CHUNK, maxBytes)) {
            await producer.sendBatch({ acks: -1, timeout: this.settings.publishTimeoutMs, topicMessages: [{ topic, messages: chunk }] });
          }
        }
      } catch (e) {
        this.replace(producer);
        throw e;
      }
    };
    send()
      .then(
        () => {
          for (const t of taken) t.resolve();
        },
        (e: unknown) => {
          for (const t of taken) t.reject(e);
        },
      )
      .finally(() => {
        this.sending = false;
        this.pump();
      });
  }

  /** Disconnects the producer (also one still connecting). */
  async close(): Promise<void> {
    const producer = this.producer ?? (await this.producerConnect?.catch(() => undefined));
    await producer?.disconnect().catch(() => {});
  }
}

/**
 * Whether kafkajs failed for a broker's storage (KAFKA_STORAGE_ERROR, code 56: "Disk error when
 * trying to access log file on the disk"), itself or as the cause of its retries running out.
 */
export function kafkaStorageError(e: unknown): boolean {
  for (let c = e, depth = 0; c !== null && typeof c === 'object' && depth < 8; depth++) {
    const { type, code } = c as { type?: unknown; code?: unknown };
    if (type === 'KAFKA_STORAGE_ERROR' || code === 56) return true;
    c = (c as { cause?: unknown; originalError?: unknown }).cause ?? (c as { originalError?: unknown }).originalError;
  }
  return false;
}
