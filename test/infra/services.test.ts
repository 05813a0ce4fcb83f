/**
 * Self-test of the integration-test infrastructure: each service is started for real and used
 * with the client the adapters will use (kafkajs, @clickhouse/client, ioredis).
 */
import { randomUUID } from 'node:crypto';
import { ClickHouseLogLevel, createClient } from '@clickhouse/client';
import { Redis } from 'ioredis';
import { Kafka, logLevel, type Consumer, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  integrationEnabled,
  requireServices,
  startClickHouse,
  startKafka,
  startRedis,
  type KafkaService,
  type RedisService,
  type UrlService,
} from './services.js';

const enabled = integrationEnabled('test/infra/services.test.ts (Kafka mock, ClickHouse, Redis self-test)');

describe.skipIf(!enabled)('kafka (librdkafka mock cluster) with kafkajs', () => {
  let kafka: KafkaService;
  const TOPIC = 'infra-selftest';

  beforeAll(async () => {
    requireServices(['kafka']);
    kafka = await startKafka({ topics: { [TOPIC]: 3 }, brokers: 3 });
  });
  afterAll(async () => {
    await kafka?.stop();
  });

  it('prints loopback bootstrap servers, one per broker', () => {
    expect(kafka.brokers).toHaveLength(3);
    for (const b of kafka.brokers) expect(b).toMatch(/^127\.0\.0\.1:\d+$/);
  });

  it('produces with acks -1 and consumes through a consumer group with eachBatch', async () => {
    const client = new Kafka({ clientId: 'infra-selftest', brokers: kafka.brokers, logLevel: logLevel.NOTHING });
    const producer: Producer = client.producer({ idempotent: false, allowAutoTopicCreation: false });
    const consumer: Consumer = client.consumer({
      groupId: `infra-selftest-${randomUUID()}`,
      sessionTimeout: 3000,
      rebalanceTimeout: 3000,
      heartbeatInterval: 500,
      maxWaitTimeInMs: 100,
    });
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
      const all = new Promise<void>((resolve) => {
        void consumer.run({
          // eslint-disable-next-line @typescript-eslint/unbound-method -- kafkajs makes these arrow functions, bound to nothing
          eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
            for (const m of batch.messages) {
              expect(m.headers?.['otm-test']?.toString()).toBe('yes');
              got.push((JSON.parse(m.value!.toString()) as { i: number }).i);
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
    } finally {
      await consumer.disconnect();
      await producer.disconnect();
    }
  });

  it('kill() makes every broker unreachable at once', async () => {
    const other = await startKafka({ topics: { gone: 1 } });
    await other.kill();
    const client = new Kafka({
      clientId: 'infra-selftest-killed',
      brokers: other.brokers,
      logLevel: logLevel.NOTHING,
      connectionTimeout: 300,
      retry: { retries: 0 },
    });
    const producer = client.producer({ idempotent: false });
    await expect(producer.connect()).rejects.toThrow();
    await producer.disconnect(); // a producer whose connect() threw keeps Node alive otherwise
    await other.stop(); // idempotent after kill()
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
