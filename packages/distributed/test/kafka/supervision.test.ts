/**
 * A Kafka consumer never dies quietly (consumer.ts): a consumer stopped from outside or crashed is
 * replaced, including when the replacement cannot start at first because Kafka is still gone; it
 * is reported down meanwhile (its status, otm_consumer_up), restarts are counted, and the group's
 * lag, read from the broker, shows what waits.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registry, type Envelope, type Topic } from '@otm/core';
import { integrationEnabled, requireServices, startKafka, type KafkaService } from '../../../../test/infra/services.js';
import { FAST_CONSUMER_SETTINGS, KafkaBus } from '../../src/index.js';

const env = (topic: string, n: number): Envelope => ({
  topic: topic as Topic,
  key: `k${n % 4}`,
  message: { v: 1, op: 'delete', tenant: 't', kind: 'trips', key: `key#${n}`, acceptedAt: n },
});

async function eventually(check: () => void | Promise<void>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return void (await check());
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** The value of a metric with these labels in the registry's text, or undefined. */
async function metric(name: string, labels: Record<string, string>): Promise<number | undefined> {
  const text = await registry.metrics();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const [, inner = '', value] = /^[^{]+\{([^}]*)\} (.+)$/.exec(line) ?? [];
    if (want.every((w) => inner.split(',').includes(w))) return Number(value);
  }
  return undefined;
}

/** Publishes one message, subscribes `group` (keeping the keys it sees in `seen`), and waits for the message. */
async function firstMessage(bus: KafkaBus, topic: string, group: string, seen: Set<string>) {
  await bus.publish([env(topic, 0)]);
  const sub = await bus.subscribe(topic as Topic, group, (batch) => {
    for (const e of batch) seen.add(e.message.key);
    return Promise.resolve();
  });
  await sub.joined;
  await eventually(() => expect(seen.has('key#0')).toBe(true));
  return sub;
}

const enabled = integrationEnabled('Kafka consumer supervision');
describe.skipIf(!enabled)('Kafka consumer supervision', () => {
  let kafka: KafkaService;
  beforeAll(async () => {
    requireServices(['kafka']);
    kafka = await startKafka();
  }, 180_000);
  afterAll(async () => kafka?.stop());

  it('a consumer stopped from outside is replaced and goes on consuming; its state is down meanwhile', async () => {
    const topic = `sup-${randomUUID()}`;
    const group = `g-${randomUUID()}`;
    const bus = new KafkaBus({ brokers: kafka.brokers, consumer: FAST_CONSUMER_SETTINGS });
    const seen = new Set<string>();
    try {
      const sub = await firstMessage(bus, topic, group, seen);
      expect(sub.status().up).toBe(true);
      expect(await metric('otm_consumer_up', { group, topic })).toBe(1);

      const first = sub.consumer();
      await first!.stop(); // as a crash that kafkajs would not restart leaves it
      await eventually(() => expect(sub.status()).toMatchObject({ up: false, reason: 'stopped without being asked to' }), 5_000);
      expect(await metric('otm_consumer_up', { group, topic })).toBe(0);

      await eventually(() => expect(sub.status().up).toBe(true));
      expect(sub.consumer()).not.toBe(first);
      expect(await metric('otm_consumer_restarts_total', { group, topic })).toBe(1);
      await bus.publish([env(topic, 1), env(topic, 2)]);
      await eventually(() => expect([...seen].sort()).toEqual(['key#0', 'key#1', 'key#2']));
      await sub.close();
      expect(sub.status()).toMatchObject({ up: false, reason: 'closed' });
    } finally {
      await bus.close();
    }
  }, 90_000);

  it('crashed while Kafka is gone: restarts keep failing, then the consumer comes back with Kafka and takes every message', async () => {
    const own = await startKafka();
    const topic = `sup-${randomUUID()}`;
    const group = `g-${randomUUID()}`;
    const bus = new KafkaBus({ brokers: own.brokers, consumer: FAST_CONSUMER_SETTINGS, connectionTimeout: 500 });
    const seen = new Set<string>();
    try {
      const sub = await firstMessage(bus, topic, group, seen);
      await eventually(async () => expect(await metric('otm_consumer_lag', { group, topic, partition: '0' })).toBe(0));

      await own.kill();
      // kafkajs gives up on the dead broker (a crash it does not restart); every new start fails.
      await eventually(() => expect(sub.status().up).toBe(false), 60_000);
      await eventually(async () => expect(await metric('otm_consumer_restarts_total', { group, topic })).toBeGreaterThanOrEqual(2), 60_000);
      expect(sub.status().up).toBe(false);
      expect(sub.status().reason).toMatch(/cannot start|crashed|stopped/);

      await own.restart();
      const more = Array.from({ length: 20 }, (_, i) => env(topic, i + 1));
      await eventually(() => bus.publish(more), 60_000);
      await eventually(() => expect(seen.size).toBe(21), 90_000);
      expect(sub.status().up).toBe(true);
      await eventually(async () => expect(await metric('otm_consumer_lag', { group, topic, partition: '0' })).toBe(0));
      await sub.close();
    } finally {
      await bus.close();
      await own.stop();
    }
  }, 240_000);

  it('a consumer that cannot start at all is down with its cause, and retried, never a rejected subscribe', async () => {
    const bus = new KafkaBus({
      brokers: ['127.0.0.1:1'],
      connectionTimeout: 200,
      consumer: { ...FAST_CONSUMER_SETTINGS, restartBackoff: { initialMs: 50, maxMs: 100 } },
    });
    const group = `g-${randomUUID()}`;
    try {
      const sub = await bus.subscribe('nowhere' as Topic, group, () => Promise.resolve());
      expect(sub.status()).toMatchObject({ up: false, reason: expect.stringMatching(/^cannot start: /) as unknown });
      await eventually(async () =>
        expect(await metric('otm_consumer_restarts_total', { group, topic: 'nowhere' })).toBeGreaterThanOrEqual(2),
      );
      await sub.close();
    } finally {
      await bus.close();
    }
  }, 60_000);
});
