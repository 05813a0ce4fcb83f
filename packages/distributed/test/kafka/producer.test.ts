/** Produce requests under their bounds, and the producer's configuration (no I/O). */
import { KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { PRODUCER_RETRIES, kafkaStorageError, produceChunks, producerConfig } from '../../src/index.js';

describe('producer', () => {
  it('produceChunks: at most the count and the bytes a request, a larger message alone, order kept', () => {
    const m = (key: string, size: number) => ({ key, value: 'v'.repeat(size) });
    const msgs = [m('a', 40), m('b', 40), m('c', 500), m('d', 10), m('e', 10), m('f', 10)];
    // 32 bytes of framing a record: a, b are 73 bytes each.
    const chunks = produceChunks(msgs, 2, 160);
    expect(chunks.map((c) => c.map((x) => x.key).join(''))).toEqual(['ab', 'c', 'de', 'f']);
    expect(produceChunks(msgs, 10, 10_000).map((c) => c.length)).toEqual([6]);
    expect(produceChunks([], 10, 100)).toEqual([]);
    expect(produceChunks([{ key: 'k', value: Buffer.alloc(300) }], 10, 100).map((c) => c.length)).toEqual([1]);
  });

  it('the producer is idempotent, with what kafkajs and Kafka require of an idempotent producer', () => {
    const config = producerConfig();
    expect(config.idempotent).toBe(true);
    // Kafka remembers the last 5 batches of a producer per partition: at most 5 requests in flight.
    expect(config.maxInFlightRequests).toBeGreaterThanOrEqual(1);
    expect(config.maxInFlightRequests).toBeLessThanOrEqual(5);
    // kafkajs refuses an idempotent producer without retries.
    expect(config.retry?.retries).toBe(PRODUCER_RETRIES);
    expect(PRODUCER_RETRIES).toBeGreaterThanOrEqual(1);
  });

  it("kafkaStorageError: a broker's failed log directory (KAFKA_STORAGE_ERROR, 56), itself or as the cause of kafkajs' retries running out", () => {
    // As kafkajs makes it from the broker's answer (protocol/error.js, code 56).
    const storage = new KafkaJSProtocolError(
      Object.assign(new Error('Disk error when trying to access log file on the disk'), {
        type: 'KAFKA_STORAGE_ERROR',
        code: 56,
        retriable: true,
      }),
    );
    expect(kafkaStorageError(storage)).toBe(true);
    expect(kafkaStorageError(new KafkaJSNumberOfRetriesExceeded(storage, { retryCount: 5, retryTime: 100 }))).toBe(true);
    const replicas = new KafkaJSProtocolError(
      Object.assign(new Error('Messages are rejected since there are fewer in-sync replicas than required'), {
        type: 'NOT_ENOUGH_REPLICAS',
        code: 19,
        retriable: true,
      }),
    );
    expect(kafkaStorageError(replicas)).toBe(false);
    expect(kafkaStorageError(new Error('Connection timeout'))).toBe(false);
    expect(kafkaStorageError(undefined)).toBe(false);
  });
});
