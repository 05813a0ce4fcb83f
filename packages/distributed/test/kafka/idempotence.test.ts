/**
 * The bus's idempotent producer on a real broker, against the fault it exists for: a produce
 * request the broker stored whose answer never reached the producer. A proxy between the client and
 * the broker (test/infra/kafka-proxy.ts) lets the broker handle the request, then drops its answer
 * and closes the client's connection; kafkajs sees a broken connection and sends the request again.
 *
 * Each test reads back what the broker holds (a topic of one partition: its high watermark is the
 * count of records stored, and each record carries the producer id it was written with).
 * - The control: a producer that is not idempotent stores the message twice. So the fault is real,
 *   and the tests that follow prove something.
 * - The bus's producer stores it once, and the publish resolves.
 * - A send that fails for good (every answer dropped) leaves the producer's sequence numbers wrong:
 *   kafkajs gives them back, but the broker stored the batch. The control shows a plain idempotent
 *   kafkajs producer then acknowledging the next message and dropping it; the bus replaces its
 *   producer after a failed send, and stores the next message.
 */
import { randomUUID } from 'node:crypto';
import { Kafka, logLevel, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OtmServiceError, type Envelope, type Topic } from '@otm/core';
import { startKafkaProxy, type KafkaProxy } from '../../../../test/infra/kafka-proxy.js';
import { integrationEnabled, requireServices, startKafka, type KafkaService } from '../../../../test/infra/services.js';
import { FAST_CONSUMER_SETTINGS, KafkaBus, PRODUCER_RETRIES } from '../../src/index.js';

const env = (topic: string, n: number): Envelope => ({
  topic: topic as Topic,
  key: 'k',
  message: { v: 1, op: 'delete', tenant: 't', kind: 'trips', key: `k#${n}`, acceptedAt: n },
});

interface Stored {
  readonly acceptedAt: number;
  readonly producerId: string;
}

const enabled = integrationEnabled('KafkaBus idempotent producer (Kafka broker behind a fault-injecting proxy)');
describe.skipIf(!enabled)('the idempotent producer, when the answer to a produce request is lost', () => {
  let kafka: KafkaService;
  let proxy: KafkaProxy;
  /** A client straight to the broker, to set up and read back. */
  let direct: Kafka;

  beforeAll(async () => {
    requireServices(['kafka']);
    kafka = await startKafka({ proxied: true, autoCreateTopics: false });
    proxy = await startKafkaProxy({ listen: kafka.proxied!.advertised, target: kafka.proxied!.listen });
    direct = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING });
  });
  afterAll(async () => {
    await proxy?.close();
    await kafka?.stop();
  });

  /** A topic of one partition. */
  const newTopic = async (): Promise<string> => {
    const name = `idem-${randomUUID().slice(0, 8)}`;
    const admin = direct.admin();
    await admin.connect();
    try {
      await admin.createTopics({ topics: [{ topic: name, numPartitions: 1 }], waitForLeaders: true });
    } finally {
      await admin.disconnect();
    }
    return name;
  };

  /** Every record the broker holds in the topic, read from the start, with its producer id. */
  const stored = async (topic: string): Promise<Stored[]> => {
    const admin = direct.admin();
    await admin.connect();
    const [offsets] = await admin.fetchTopicOffsets(topic);
    await admin.disconnect();
    const count = Number(offsets!.high);
    if (count === 0) return [];
    const records: Stored[] = [];
    const consumer = direct.consumer({ groupId: `read-${randomUUID()}`, ...FAST_CONSUMER_SETTINGS });
    await consumer.connect();
    try {
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await new Promise<void>((resolve) => {
        void consumer.run({
          eachBatch: async ({ batch }) => {
            for (const m of batch.messages) {
              const producerId = String((m as { batchContext?: { producerId?: string } }).batchContext?.producerId);
              records.push({ acceptedAt: (JSON.parse(m.value!.toString()) as { acceptedAt: number }).acceptedAt, producerId });
            }
            if (records.length >= count) resolve();
          },
        });
      });
    } finally {
      await consumer.disconnect();
    }
    return records;
  };

  /** A kafkajs client that reaches the broker only through the proxy. */
  const proxied = () => new Kafka({ brokers: [proxy.address], logLevel: logLevel.NOTHING, retry: { retries: 5, initialRetryTime: 100 } });

  const sendOne = (producer: Producer, topic: string, n: number) =>
    producer.send({ topic, acks: -1, messages: [{ key: 'k', value: JSON.stringify(env(topic, n).message) }] });

  it('control: a producer that is not idempotent stores a message twice when the answer was lost', async () => {
    const topic = await newTopic();
    const producer = proxied().producer({ idempotent: false, retry: { retries: 3, initialRetryTime: 100 } });
    await producer.connect();
    try {
      proxy.dropProduceResponses(1);
      const dropped = proxy.droppedResponses;
      await sendOne(producer, topic, 1);
      expect(proxy.droppedResponses).toBe(dropped + 1);
    } finally {
      proxy.dropProduceResponses(0);
      await producer.disconnect();
    }
    const records = await stored(topic);
    expect(records.map((r) => r.acceptedAt)).toEqual([1, 1]);
    expect(records.every((r) => r.producerId === '-1')).toBe(true);
  });

  it("the bus's producer stores it once: the broker knows the retried batch by its producer id and sequence", async () => {
    const topic = await newTopic();
    const bus = new KafkaBus({ brokers: [proxy.address], publishTimeoutMs: 15_000 });
    try {
      await bus.publish([env(topic, 1)]); // connects, gets a producer id
      const requests = proxy.produceRequests;
      proxy.dropProduceResponses(1);
      await bus.publish([env(topic, 2)]);
      expect(proxy.produceRequests - requests).toBe(2); // the request and its retry
      expect(proxy.droppedResponses).toBeGreaterThanOrEqual(1);
      await bus.publish([env(topic, 3)]);
    } finally {
      proxy.dropProduceResponses(0);
      await bus.close();
    }
    const records = await stored(topic);
    expect(records.map((r) => r.acceptedAt)).toEqual([1, 2, 3]);
    // Written by one producer, with the id the broker assigned it.
    expect(new Set(records.map((r) => r.producerId)).size).toBe(1);
    expect(Number(records[0]!.producerId)).toBeGreaterThanOrEqual(0);
  });

  it('control: an idempotent kafkajs producer that goes on after a send failed for good acknowledges the next message and drops it', async () => {
    const topic = await newTopic();
    const producer = proxied().producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 1, initialRetryTime: 100 } });
    await producer.connect();
    try {
      proxy.dropProduceResponses(1_000);
      await expect(sendOne(producer, topic, 1)).rejects.toThrow();
      proxy.dropProduceResponses(0);
      // kafkajs took the sequence numbers of the failed batch back; the broker has the batch.
      const [answer] = await sendOne(producer, topic, 2);
      expect(answer!.errorCode).toBe(0);
    } finally {
      proxy.dropProduceResponses(0);
      await producer.disconnect();
    }
    // Message 2 was acknowledged, with the offset of message 1, and is not there.
    expect((await stored(topic)).map((r) => r.acceptedAt)).toEqual([1]);
  });

  it('after a publish that failed for good, the bus sends with a new producer: the next message is stored', async () => {
    const topic = await newTopic();
    const bus = new KafkaBus({ brokers: [proxy.address], publishTimeoutMs: 15_000 });
    try {
      await bus.publish([env(topic, 1)]);
      const dropped = proxy.droppedResponses;
      proxy.dropProduceResponses(1_000);
      const err = await bus.publish([env(topic, 2)]).then(
        () => undefined,
        (e: unknown) => e,
      );
      proxy.dropProduceResponses(0);
      expect(err).toBeInstanceOf(OtmServiceError);
      expect(err).toMatchObject({ status: 503, retryable: true });
      // Every attempt kafkajs made (the first and PRODUCER_RETRIES more) lost its answer.
      expect(proxy.droppedResponses - dropped).toBe(PRODUCER_RETRIES + 1);
      await bus.publish([env(topic, 3)]);
    } finally {
      proxy.dropProduceResponses(0);
      await bus.close();
    }
    const records = await stored(topic);
    // 2 was answered with a 503 but stored (as a timed-out write may be); 3 is there.
    expect(records.map((r) => r.acceptedAt)).toEqual([1, 2, 3]);
    const [first, , third] = records;
    expect(third!.producerId).not.toBe(first!.producerId);
  });
});
