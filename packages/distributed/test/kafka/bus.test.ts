/** KafkaBus behaviour beyond the Bus contract: the retry decision, dead letters, packed records, readiness, Kafka going away. */
import { randomUUID } from 'node:crypto';
import { ConfigResourceTypes, Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdapterError, OtmServiceError, TOPICS, type Envelope, type Topic } from '@otm/core';
import { integrationEnabled, requireServices, startKafka, type KafkaService } from '../../../../test/infra/services.js';
import { FAST_CONSUMER_SETTINGS, KafkaBus, PACK_HEADER, TOPIC_CONFIG, UNCLASSIFIED_ATTEMPTS, ensureTopics } from '../../src/index.js';

const env = (topic: string, key: string, n: number): Envelope => ({
  topic: topic as Topic,
  key,
  message: { v: 1, op: 'delete', tenant: 't', kind: 'trips', key: `${key}#${n}`, acceptedAt: n },
});

async function eventually(check: () => void | Promise<void>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return void (await check());
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

/** A record as the bus hands it to kafkajs. */
type Produced = { key: string; value: string | Buffer; headers?: Record<string, string> };

/** Calls `seen` with the records of every produce request the bus makes, before kafkajs sends them. */
async function watchRequests(bus: KafkaBus, seen: (records: Produced[]) => void): Promise<void> {
  type Request = { topicMessages: { messages: Produced[] }[] };
  const producer = await (
    bus as unknown as { connectedProducer(): Promise<{ sendBatch: (b: Request) => Promise<unknown> }> }
  ).connectedProducer();
  const real = producer.sendBatch.bind(producer);
  producer.sendBatch = (b) => {
    seen(b.topicMessages.flatMap((t) => t.messages));
    return real(b);
  };
}

type DeadLetter = { value: string; headers: Record<string, string> };

/** The dead letters taken from `originalTopic`, read from the start of the dead-letter topic until `done` says so. */
async function deadLettersOf(brokers: string[], originalTopic: string, done: (dead: DeadLetter[]) => void): Promise<DeadLetter[]> {
  const dead: DeadLetter[] = [];
  const reader = new Kafka({ brokers, logLevel: logLevel.NOTHING }).consumer({ groupId: `dlq-${randomUUID()}`, ...FAST_CONSUMER_SETTINGS });
  await reader.connect();
  try {
    await reader.subscribe({ topic: TOPICS.deadLetter, fromBeginning: true });
    await reader.run({
      eachMessage: async ({ message }) => {
        const headers = Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)]));
        if (headers['original-topic'] === originalTopic) dead.push({ value: message.value!.toString(), headers });
      },
    });
    await eventually(() => done(dead));
    return dead;
  } finally {
    await reader.disconnect();
  }
}

/** A pino-like logger that keeps the bus's own error and warning messages. */
function recordingLogger() {
  const errors: { obj: Record<string, unknown>; msg: string }[] = [];
  const warnings: string[] = [];
  const logger = {
    level: 'warn',
    error: (obj: Record<string, unknown>, msg: string) => errors.push({ obj, msg }),
    warn: (_obj: unknown, msg: string) => warnings.push(msg),
    info: () => {},
    debug: () => {},
  };
  return { logger: logger as never, errors, warnings };
}

describe('KafkaBus settings', () => {
  it('a bus without brokers is refused for good', () => {
    let err: unknown;
    try {
      new KafkaBus({ brokers: [] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(AdapterError);
    expect(err).toMatchObject({ adapter: 'kafka', retryable: false });
  });
});

const enabled = integrationEnabled('KafkaBus (Kafka broker)');
describe.skipIf(!enabled)('KafkaBus', () => {
  let kafka: KafkaService;
  const topic = `kb-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    requireServices(['kafka']);
    kafka = await startKafka({ topics: { [topic]: 2, [TOPICS.deadLetter]: 1 }, autoCreateTopics: false });
  });
  afterAll(async () => {
    await kafka?.stop();
  });

  /** A topic of its own for a test, with 4 partitions, created as `otm migrate` would (production does not auto-create topics). */
  const newTopic = async (): Promise<string> => {
    const name = `kb-${randomUUID().slice(0, 8)}`;
    const admin = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      await admin.createTopics({ topics: [{ topic: name, numPartitions: 4 }], waitForLeaders: true });
    } finally {
      await admin.disconnect();
    }
    return name;
  };

  it('sends a message that can never be applied to the dead-letter topic with its reason, and goes on', async () => {
    const bus = new KafkaBus({ brokers: kafka.brokers, consumer: FAST_CONSUMER_SETTINGS });
    const applied: number[] = [];
    const sub = await bus.subscribe(topic as Topic, `g-${randomUUID()}`, async (batch) => {
      if (batch.some((e) => e.message.acceptedAt === 2)) {
        throw new OtmServiceError('invalidDocument', 400, 'cannot apply #2', { retryable: false });
      }
      for (const e of batch) applied.push(e.message.acceptedAt);
    });
    await sub.joined;
    await bus.publish([env(topic, 'same', 1), env(topic, 'same', 2), env(topic, 'same', 3)]);
    // and a raw message that is not JSON at all
    const raw = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING }).producer();
    await raw.connect();
    await raw.send({ topic, acks: -1, messages: [{ key: 'same', value: 'not json' }] });
    await raw.disconnect();
    await bus.publish([env(topic, 'same', 4)]);
    await eventually(() => expect(applied).toEqual([1, 3, 4]));

    const dead: { value: string; headers: Record<string, string> }[] = [];
    const reader = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING }).consumer({
      groupId: `dlq-${randomUUID()}`,
      ...FAST_CONSUMER_SETTINGS,
    });
    await reader.connect();
    await reader.subscribe({ topic: TOPICS.deadLetter, fromBeginning: true });
    await reader.run({
      eachMessage: async ({ message }) => {
        const headers = Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)]));
        dead.push({ value: message.value!.toString(), headers });
      },
    });
    await eventually(() => expect(dead).toHaveLength(2));
    await reader.disconnect();
    expect(JSON.parse(dead[0]!.value).acceptedAt).toBe(2);
    expect(dead[0]!.headers).toMatchObject({
      reason: 'cannot apply #2',
      code: 'invalidDocument',
      'original-topic': topic,
      'original-key': 'same',
    });
    // #1..#3 went as one packed record (one publish, one key): the dead letter is #2 alone.
    expect(dead[0]!.headers['original-pack-index']).toBe('1/3');
    expect(dead[0]!.headers['original-partition']).toMatch(/^\d+$/);
    expect(dead[0]!.headers['original-offset']).toMatch(/^\d+$/);
    expect(dead[1]!.value).toBe('not json');
    expect(dead[1]!.headers.code).toBe('invalidMessage');
    await bus.close();
  });

  it('a message that keeps throwing a plain error is tried a few times, logged as unclassified, then dead-lettered', async () => {
    const own = await newTopic();
    const log = recordingLogger();
    const bus = new KafkaBus({ brokers: kafka.brokers, consumer: FAST_CONSUMER_SETTINGS, logger: log.logger });
    const applied: number[] = [];
    let attempts = 0;
    const sub = await bus.subscribe(own as Topic, `g-${randomUUID()}`, async (batch) => {
      if (batch.some((e) => e.message.acceptedAt === 7)) {
        attempts++;
        throw new TypeError('a bug in the worker');
      }
      for (const e of batch) applied.push(e.message.acceptedAt);
    });
    await sub.joined;
    await bus.publish([env(own, 'k', 6), env(own, 'k', 7), env(own, 'k', 8)]);
    await eventually(() => expect(applied).toEqual([6, 8]), 30_000);
    expect(attempts).toBeGreaterThanOrEqual(UNCLASSIFIED_ATTEMPTS);
    const unclassified = log.errors.filter((e) => e.msg.includes('unclassified'));
    expect(unclassified.length).toBeGreaterThanOrEqual(UNCLASSIFIED_ATTEMPTS);
    expect(unclassified[0]!.obj).toMatchObject({ topic: own, type: 'TypeError', err: 'a bug in the worker' });
    const dead = await deadLettersOf(kafka.brokers, own, (d) => expect(d).toHaveLength(1));
    expect(JSON.parse(dead[0]!.value).acceptedAt).toBe(7);
    expect(dead[0]!.headers).toMatchObject({ code: 'internal', reason: 'a bug in the worker' });
    await bus.close();
  });

  it('a non-retryable AdapterError sends its message to the dead-letter topic without retries', async () => {
    const own = await newTopic();
    const log = recordingLogger();
    const bus = new KafkaBus({ brokers: kafka.brokers, consumer: FAST_CONSUMER_SETTINGS, logger: log.logger });
    const applied: number[] = [];
    let attempts = 0;
    const sub = await bus.subscribe(own as Topic, `g-${randomUUID()}`, async (batch) => {
      if (batch.some((e) => e.message.acceptedAt === 12)) {
        attempts++;
        throw new AdapterError('clickhouse', 'refused as malformed: Cannot parse input', { retryable: false });
      }
      for (const e of batch) applied.push(e.message.acceptedAt);
    });
    await sub.joined;
    await bus.publish([env(own, 'k', 11), env(own, 'k', 12), env(own, 'k', 13)]);
    await eventually(() => expect(applied).toEqual([11, 13]));
    const dead = await deadLettersOf(kafka.brokers, own, (d) => expect(d).toHaveLength(1));
    expect(JSON.parse(dead[0]!.value).acceptedAt).toBe(12);
    expect(dead[0]!.headers).toMatchObject({
      code: 'internal',
      reason: 'clickhouse: refused as malformed: Cannot parse input',
      'original-key': 'k',
    });
    // Once in the chunk, once alone to find the culprit: never retried.
    expect(attempts).toBe(2);
    expect(log.warnings.filter((m) => m === 'handler failed; retrying the batch')).toEqual([]);
    expect(log.errors.filter((e) => e.msg.includes('unclassified'))).toEqual([]);
    await bus.close();
  });

  it('a retryable AdapterError is retried (beyond the attempts an unclassified error gets) until the handler succeeds', async () => {
    const own = await newTopic();
    const log = recordingLogger();
    const bus = new KafkaBus({ brokers: kafka.brokers, consumer: FAST_CONSUMER_SETTINGS, logger: log.logger });
    const applied: number[] = [];
    const failures = UNCLASSIFIED_ATTEMPTS + 2;
    let attempts = 0;
    const sub = await bus.subscribe(own as Topic, `g-${randomUUID()}`, async (batch) => {
      if (batch.some((e) => e.message.acceptedAt === 22) && attempts++ < failures) {
        throw new AdapterError('redis', 'no answer within 5000 ms', { retryable: true });
      }
      for (const e of batch) applied.push(e.message.acceptedAt);
    });
    await sub.joined;
    await bus.publish([env(own, 'k', 21), env(own, 'k', 22), env(own, 'k', 23)]);
    await eventually(() => expect(applied).toEqual([21, 22, 23]), 30_000);
    expect(attempts).toBe(failures + 1);
    expect(log.warnings.filter((m) => m === 'handler failed; retrying the batch')).toHaveLength(failures);
    expect(log.errors.filter((e) => e.msg.includes('unclassified') || e.msg.includes('dead-letter'))).toEqual([]);
    await bus.close();
  });

  it('splits a publish into produce requests under maxRequestBytes, in order, each message delivered once', async () => {
    const own = await newTopic();
    const bus = new KafkaBus({ brokers: kafka.brokers, consumer: FAST_CONSUMER_SETTINGS, maxRequestBytes: 100_000 });
    // Every produce request's bytes, as kafkajs is handed them.
    const requests: number[] = [];
    await watchRequests(bus, (records) =>
      requests.push(records.reduce((a, m) => a + Buffer.byteLength(m.key) + Buffer.byteLength(m.value), 0)),
    );
    const applied: number[] = [];
    const sub = await bus.subscribe(own as Topic, `g-${randomUUID()}`, async (batch) => {
      for (const e of batch) applied.push(e.message.acceptedAt);
    });
    await sub.joined;
    // 60 messages of ~10 KB for one key (one partition: one record batch per request), one publish.
    const pad = 'p'.repeat(10_000);
    const big = (n: number): Envelope => ({
      topic: own as Topic,
      key: 'one-vehicle',
      message: { v: 1, op: 'delete', tenant: pad, kind: 'trips', key: `k${n}`, acceptedAt: n },
    });
    await bus.publish(Array.from({ length: 60 }, (_, n) => big(n)));
    await eventually(() => expect(applied).toHaveLength(60));
    expect(applied).toEqual(Array.from({ length: 60 }, (_, n) => n));
    expect(requests.length).toBeGreaterThanOrEqual(6);
    for (const bytes of requests) expect(bytes).toBeLessThanOrEqual(100_000);
    await bus.close();
  });

  it('packs the messages of one key of a publish into one record; the consumer hands them over in order, a record never split across batches', async () => {
    const own = await newTopic();
    const bus = new KafkaBus({ brokers: kafka.brokers, consumer: { ...FAST_CONSUMER_SETTINGS, maxBatch: 2 } });
    const records: { key: string; pack?: string }[] = [];
    await watchRequests(bus, (produced) => produced.forEach((m) => records.push({ key: m.key, pack: m.headers?.[PACK_HEADER] })));
    const seen: string[] = [];
    const batches: number[] = [];
    const sub = await bus.subscribe(own as Topic, `g-${randomUUID()}`, async (batch) => {
      batches.push(batch.length);
      for (const e of batch) seen.push(`${e.key}:${e.message.acceptedAt}`);
    });
    await sub.joined;
    const msgs = [
      ...Array.from({ length: 5 }, (_, n) => env(own, 'a', n)),
      env(own, 'b', 100),
      ...Array.from({ length: 3 }, (_, n) => env(own, 'c', 200 + n)),
    ];
    await bus.publish(msgs);
    await eventually(() => expect(seen).toHaveLength(9));
    expect(records).toEqual([
      { key: 'a', pack: '5' },
      { key: 'b', pack: undefined },
      { key: 'c', pack: '3' },
    ]);
    for (const k of ['a', 'b', 'c'])
      expect(seen.filter((x) => x.startsWith(`${k}:`))).toEqual(msgs.filter((m) => m.key === k).map((m) => `${k}:${m.message.acceptedAt}`));
    // maxBatch 2, but a record's 5 messages go in one batch: its offset is committed after all of them.
    expect(Math.max(...batches)).toBeGreaterThanOrEqual(5);
    await bus.close();
  });

  it('ensureTopics creates topics with their partitions and settings, and leaves existing ones alone', async () => {
    const bus = new KafkaBus({ brokers: kafka.brokers });
    const admin = bus.client.admin();
    await admin.connect();
    try {
      const name = `x-${randomUUID()}`;
      expect(await ensureTopics(admin, { [name]: 3 }, { config: TOPIC_CONFIG })).toBe(true);
      const meta = await admin.fetchTopicMetadata({ topics: [name] });
      expect(meta.topics[0]!.partitions).toHaveLength(3);
      const described = await admin.describeConfigs({
        resources: [{ type: ConfigResourceTypes.TOPIC, name, configNames: Object.keys(TOPIC_CONFIG) }],
        includeSynonyms: false,
      });
      const configs = Object.fromEntries(described.resources[0]!.configEntries.map((e) => [e.configName, e.configValue]));
      expect(configs).toEqual(TOPIC_CONFIG);
      // Again, with another count: accepted, and the topic is left as it was.
      expect(await ensureTopics(admin, { [name]: 5 }, { config: TOPIC_CONFIG })).toBe(true);
      expect((await admin.fetchTopicMetadata({ topics: [name] })).topics[0]!.partitions).toHaveLength(3);
    } finally {
      await admin.disconnect();
      await bus.close();
    }
  });

  it('ensureTopics logs and continues when the cluster refuses CreateTopics (here: a replication factor one broker cannot give)', async () => {
    const bus = new KafkaBus({ brokers: kafka.brokers });
    const admin = bus.client.admin();
    await admin.connect();
    const warnings: string[] = [];
    const logger = { info: () => {}, warn: (_o: unknown, msg: string) => warnings.push(msg) } as never;
    const name = `x-${randomUUID()}`;
    const ok = await ensureTopics(admin, { [name]: 3 }, { replicationFactor: 3, logger, timeoutMs: 2_000 });
    expect(ok).toBe(false);
    expect(warnings).toHaveLength(1);
    expect((await admin.listTopics()).includes(name)).toBe(false);
    await admin.disconnect();
    await bus.close();
  });

  it('when Kafka is unreachable, publish rejects with a retryable 503 within its bound and ready() says no', async () => {
    const own = await startKafka({ topics: { [topic]: 1 } });
    const bus = new KafkaBus({ brokers: own.brokers, publishTimeoutMs: 2_000, readyTimeoutMs: 1_000 });
    try {
      await bus.publish([env(topic, 'k', 1)]);
      expect(await bus.ready()).toBe(true);
      await own.kill();
      for (let i = 0; i < 2; i++) {
        const t0 = Date.now();
        const err = await bus.publish([env(topic, 'k', 2)]).then(
          () => undefined,
          (e: unknown) => e,
        );
        const took = Date.now() - t0;
        expect(err).toBeInstanceOf(OtmServiceError);
        expect(err).toMatchObject({ status: 503, retryable: true, code: 'unavailable' });
        expect((err as OtmServiceError).headers['retry-after']).toMatch(/^\d+$/);
        expect(took).toBeLessThan(2_500);
      }
      const t0 = Date.now();
      expect(await bus.ready()).toBe(false);
      expect(Date.now() - t0).toBeLessThan(1_500);
    } finally {
      await bus.close();
      await own.stop();
    }
  });

  it('when no broker ever answered, publish still rejects within its bound', async () => {
    const bus = new KafkaBus({ brokers: ['127.0.0.1:1'], publishTimeoutMs: 1_000 });
    const t0 = Date.now();
    await expect(bus.publish([env(topic, 'k', 1)])).rejects.toMatchObject({ status: 503 });
    expect(Date.now() - t0).toBeLessThan(1_500);
    await bus.close();
  });
});
