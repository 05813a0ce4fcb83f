/**
 * Self-test of the integration-test infrastructure: each service is started for real and used
 * with the client the adapters will use (kafkajs, @clickhouse/client, ioredis).
 */
import { randomUUID } from 'node:crypto';
import { ClickHouseLogLevel, createClient } from '@clickhouse/client';
import { Redis } from 'ioredis';
import { ConfigResourceTypes, Kafka, logLevel, type Consumer, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startKafkaProxy } from './kafka-proxy.js';
import {
  integrationEnabled,
  kafkaVersion,
  requireServices,
  startClickHouse,
  startKafka,
  startRedis,
  type KafkaService,
  type RedisService,
  type UrlService,
} from './services.js';

const enabled = integrationEnabled('test/infra/services.test.ts (Kafka, ClickHouse, Redis self-test)');

describe.skipIf(!enabled)('kafka (Apache Kafka broker, KRaft) with kafkajs', () => {
  let kafka: KafkaService;
  const TOPIC = 'infra-selftest';
  const client = () => new Kafka({ clientId: 'infra-selftest', brokers: kafka.brokers, logLevel: logLevel.NOTHING });
  const group = (kafkaClient: Kafka): Consumer =>
    kafkaClient.consumer({
      groupId: `infra-selftest-${randomUUID()}`,
      sessionTimeout: 3000,
      rebalanceTimeout: 3000,
      heartbeatInterval: 500,
      maxWaitTimeInMs: 100,
    });
  /** Consumes `topic` from the start in a new group until `done` says so; the values. */
  const consumeAll = async (topic: string, done: (values: string[]) => boolean): Promise<string[]> => {
    const consumer = group(client());
    const got: string[] = [];
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await new Promise<void>((resolve) => {
        void consumer.run({
          eachMessage: async ({ message }) => {
            got.push(message.value!.toString());
            if (done(got)) resolve();
          },
        });
      });
    } finally {
      await consumer.disconnect();
    }
    return got;
  };

  beforeAll(async () => {
    requireServices(['kafka']);
    kafka = await startKafka({ topics: { [TOPIC]: 3 } });
    console.log(`kafka ${kafka.version} started: ${JSON.stringify(kafka.times)}`);
  });
  afterAll(async () => {
    await kafka?.stop();
  });

  it('runs the broker docker-compose.yml pins, one KRaft node on loopback, with the requested topics', async () => {
    expect(kafka.version).toBe(kafkaVersion());
    expect(kafka.version).toMatch(/^3\.9\.\d+$/);
    expect(kafka.brokers).toHaveLength(1);
    expect(kafka.brokers[0]).toMatch(/^127\.0\.0\.1:\d+$/);
    const admin = client().admin();
    await admin.connect();
    try {
      const cluster = await admin.describeCluster();
      expect(cluster.brokers).toEqual([{ nodeId: 1, host: '127.0.0.1', port: Number(kafka.brokers[0]!.split(':')[1]) }]);
      expect(cluster.controller).toBe(1);
      const meta = await admin.fetchTopicMetadata({ topics: [TOPIC] });
      expect(meta.topics[0]!.partitions).toHaveLength(3);
    } finally {
      await admin.disconnect();
    }
  });

  it('produces with an idempotent producer and acks -1, and consumes through a consumer group with eachBatch', async () => {
    const producer: Producer = client().producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
    const consumer = group(client());
    try {
      await producer.connect();
      const messages = Array.from({ length: 30 }, (_, i) => ({
        key: `trip-${i % 7}`,
        value: JSON.stringify({ i }),
        headers: { 'otm-test': 'yes' },
      }));
      const sent = await producer.send({ topic: TOPIC, acks: -1, messages });
      expect(new Set(sent.map((r) => r.partition)).size).toBeGreaterThan(1);

      await consumer.connect();
      await consumer.subscribe({ topics: [TOPIC], fromBeginning: true });
      const got: number[] = [];
      const partitions = new Set<number>();
      const producerIds = new Set<string>();
      const all = new Promise<void>((resolve) => {
        void consumer.run({
          // eslint-disable-next-line @typescript-eslint/unbound-method -- kafkajs makes these arrow functions, bound to nothing
          eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
            for (const m of batch.messages) {
              expect(m.headers?.['otm-test']?.toString()).toBe('yes');
              got.push((JSON.parse(m.value!.toString()) as { i: number }).i);
              producerIds.add(String((m as { batchContext?: { producerId?: string } }).batchContext?.producerId));
              resolveOffset(m.offset);
            }
            partitions.add(batch.partition);
            await heartbeat();
            if (got.length >= messages.length) resolve();
          },
        });
      });
      await all;
      expect(got.sort((a, b) => a - b)).toEqual(messages.map((_, i) => i));
      expect(partitions.size).toBe(3);
      // The records carry the producer id the broker assigned (-1 would mean: not idempotent).
      expect(producerIds.size).toBe(1);
      expect(Number([...producerIds][0])).toBeGreaterThanOrEqual(0);
    } finally {
      await consumer.disconnect();
      await producer.disconnect();
    }
  });

  it('creates topics with settings and describes them (the admin API works)', async () => {
    const admin = client().admin();
    const topic = `infra-admin-${randomUUID().slice(0, 8)}`;
    await admin.connect();
    try {
      expect(
        await admin.createTopics({ topics: [{ topic, numPartitions: 5, configEntries: [{ name: 'retention.ms', value: '3600000' }] }] }),
      ).toBe(true);
      const meta = await admin.fetchTopicMetadata({ topics: [topic] });
      expect(meta.topics[0]!.partitions).toHaveLength(5);
      const configs = await admin.describeConfigs({
        resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
        includeSynonyms: false,
      });
      expect(configs.resources[0]!.configEntries).toEqual([
        expect.objectContaining({ configName: 'retention.ms', configValue: '3600000' }),
      ]);
    } finally {
      await admin.disconnect();
    }
  });

  it('pause() freezes the broker (requests time out), resume() brings it back with its messages', async () => {
    const topic = `infra-pause-${randomUUID().slice(0, 8)}`;
    const kafkaClient = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING, requestTimeout: 1_000 });
    const producer = () => kafkaClient.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 1, initialRetryTime: 100 } });
    const first = producer();
    await first.connect();
    try {
      await first.send({ topic, acks: -1, messages: [{ key: 'k', value: 'before' }] });
      kafka.pause();
      try {
        await expect(first.send({ topic, acks: -1, timeout: 500, messages: [{ key: 'k', value: 'during' }] })).rejects.toThrow();
      } finally {
        kafka.resume();
      }
    } finally {
      await first.disconnect();
    }
    // A new producer: after a send that failed without an answer, an idempotent producer's
    // sequence numbers no longer say what the broker holds (packages/distributed/test/kafka/
    // idempotence.test.ts shows a message lost by going on with the same one).
    const second = producer();
    await second.connect();
    try {
      await second.send({ topic, acks: -1, messages: [{ key: 'k', value: 'after' }] });
    } finally {
      await second.disconnect();
    }
    // One key, one partition: in order. The send that timed out may still have landed (the
    // frozen broker read it from its socket when it went on), as any timed-out send may.
    const got = await consumeAll(topic, (values) => values.includes('after'));
    expect(got[0]).toBe('before');
    expect(got.at(-1)).toBe('after');
  });

  it('restart() keeps acknowledged messages', async () => {
    const topic = `infra-restart-${randomUUID().slice(0, 8)}`;
    const producer = client().producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    await producer.send({
      topic,
      acks: -1,
      messages: [
        { key: 'k', value: 'one' },
        { key: 'k', value: 'two' },
      ],
    });
    await producer.disconnect();
    const pid = kafka.pid;
    await kafka.restart();
    expect(kafka.pid).not.toBe(pid);
    expect(await consumeAll(topic, (values) => values.length >= 2)).toEqual(['one', 'two']);
  });

  it('kill() makes the broker unreachable at once', async () => {
    const other = await startKafka();
    await other.kill();
    const kafkaClient = new Kafka({
      clientId: 'infra-selftest-killed',
      brokers: other.brokers,
      logLevel: logLevel.NOTHING,
      connectionTimeout: 300,
      retry: { retries: 0 },
    });
    const producer = kafkaClient.producer({ idempotent: false });
    await expect(producer.connect()).rejects.toThrow();
    await producer.disconnect(); // a producer whose connect() threw keeps Node alive otherwise
    await other.stop(); // idempotent after kill()
  });

  it('the proxied listener: clients bootstrapping at the proxy stay on it; the proxy can drop produce responses', async () => {
    const own = await startKafka({ proxied: true });
    const proxy = await startKafkaProxy({ listen: own.proxied!.advertised, target: own.proxied!.listen });
    const proxied = new Kafka({ brokers: [proxy.address], logLevel: logLevel.NOTHING, retry: { retries: 3, initialRetryTime: 100 } });
    const producer = proxied.producer({ idempotent: false });
    try {
      const admin = proxied.admin();
      await admin.connect();
      expect((await admin.describeCluster()).brokers).toEqual([
        expect.objectContaining({ host: '127.0.0.1', port: Number(proxy.address.split(':')[1]) }),
      ]);
      await admin.disconnect();
      await producer.connect();
      await producer.send({ topic: 'through-the-proxy', acks: -1, messages: [{ value: 'a' }] });
      expect(proxy.produceRequests).toBeGreaterThanOrEqual(1);
      proxy.dropProduceResponses(1);
      const before = proxy.produceRequests;
      await producer.send({ topic: 'through-the-proxy', acks: -1, messages: [{ value: 'b' }] });
      expect(proxy.droppedResponses).toBe(1);
      // The lost answer made the producer send again.
      expect(proxy.produceRequests - before).toBe(2);
    } finally {
      await producer.disconnect();
      await proxy.close();
      await own.stop();
    }
  });
});

describe.skipIf(!enabled)('clickhouse-server with @clickhouse/client', () => {
  let ch: UrlService;

  beforeAll(async () => {
    requireServices(['clickhouse']);
    ch = await startClickHouse();
  });
  afterAll(async () => {
    await ch?.stop();
  });

  it('creates a table, inserts JSONEachRow and selects it back', async () => {
    expect(ch.url).toMatch(/^http:\/\//);
    const client = createClient({ url: ch.url, log: { level: ClickHouseLogLevel.OFF } });
    const table = `infra_selftest_${randomUUID().replace(/-/g, '')}`;
    try {
      expect((await client.ping()).success).toBe(true);
      await client.command({
        query: `CREATE TABLE ${table} (id UInt32, tenant String, at DateTime('UTC')) ENGINE = MergeTree ORDER BY id`,
      });
      await client.insert({
        table,
        format: 'JSONEachRow',
        values: [
          { id: 1, tenant: 'acme', at: '2024-01-02 03:04:05' },
          { id: 2, tenant: 'globex', at: '2024-01-02 03:04:06' },
        ],
      });
      const rs = await client.query({ query: `SELECT id, tenant, at FROM ${table} ORDER BY id`, format: 'JSONEachRow' });
      expect(await rs.json()).toEqual([
        { id: 1, tenant: 'acme', at: '2024-01-02 03:04:05' },
        { id: 2, tenant: 'globex', at: '2024-01-02 03:04:06' },
      ]);
    } finally {
      await client.command({ query: `DROP TABLE IF EXISTS ${table}` }).catch(() => {});
      await client.close();
    }
  });
});

describe.skipIf(!enabled)('redis with ioredis', () => {
  let shared: RedisService;
  let own: RedisService;

  beforeAll(async () => {
    [shared, own] = await Promise.all([startRedis(), startRedis({ own: true })]);
  });
  afterAll(async () => {
    await Promise.all([shared?.stop(), own?.stop()]);
  });

  it('sets and gets a key (default Redis: REDIS_URL, 127.0.0.1:6379, or our own)', async () => {
    const redis = new Redis(shared.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    const key = `otm-test:infra:${randomUUID()}`;
    try {
      await redis.connect();
      await redis.set(key, 'hello', 'EX', 60);
      expect(await redis.get(key)).toBe('hello');
      await redis.del(key);
    } finally {
      redis.disconnect();
    }
  });

  it('our own redis-server keeps acknowledged writes across restart()', async () => {
    expect(own.external).toBe(false);
    const redis = new Redis(own.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await redis.connect();
      await redis.set('k', 'survives');
      redis.disconnect();
      await own.restart();
      await redis.connect();
      expect(await redis.get('k')).toBe('survives');
    } finally {
      redis.disconnect();
    }
  });
});
