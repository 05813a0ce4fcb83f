/** The Bus contract against the in-process MemoryBus and the KafkaBus on a real Kafka broker. */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe } from 'vitest';
import { TOPICS, type SubscribeOptions, type Subscription, type Topic } from '@otm/core';
import { MemoryBus } from '@otm/embedded';
import { FAST_CONSUMER_SETTINGS, KafkaBus, type KafkaSubscription } from '@otm/distributed';
import { integrationEnabled, requireServices, startKafka, type KafkaService } from '../infra/services.js';
import { busContract } from './bus.contract.js';

busContract(
  'MemoryBus',
  async () => {
    const bus = new MemoryBus({ partitions: 4, maxBatch: 50 });
    return {
      bus,
      capabilities: { retains: false, groupMembers: false },
      topic: () => `contract-${randomUUID()}` as Topic,
      joined: async () => {},
      peer: async () => bus,
      close: () => bus.close(),
    };
  },
  { groupMembers: false },
);

const enabled = integrationEnabled('Bus contract: KafkaBus (Kafka broker)');
describe.skipIf(!enabled)('on Kafka', () => {
  let kafka: KafkaService;
  const suffix = randomUUID().slice(0, 8);
  const topics = Array.from({ length: 24 }, (_, i) => `contract-${suffix}-${i}`);
  let next = 0;

  beforeAll(async () => {
    requireServices(['kafka']);
    kafka = await startKafka({ topics: { ...Object.fromEntries(topics.map((t) => [t, 4])), [TOPICS.deadLetter]: 1 } });
  });
  afterAll(async () => {
    await kafka?.stop();
  });

  /** A KafkaBus whose every subscription uses the given options (the fetch-ahead run). */
  const fixture = (subscribeOptions: SubscribeOptions) => async () => {
    const make = () => {
      const b = new KafkaBus({ brokers: kafka.brokers, clientId: 'contract', consumer: FAST_CONSUMER_SETTINGS });
      const subscribe = b.subscribe.bind(b);
      b.subscribe = (t, g, h, o) => subscribe(t, g, h, { ...o, ...subscribeOptions });
      return b;
    };
    const bus = make();
    const peers: KafkaBus[] = [];
    return {
      bus,
      capabilities: { retains: true, groupMembers: true },
      topic: () => {
        const t = topics[next++];
        if (!t) throw new Error('out of pre-created topics');
        return t as Topic;
      },
      joined: (sub: Subscription) => (sub as KafkaSubscription).joined,
      peer: async () => {
        const p = make();
        peers.push(p);
        return p;
      },
      close: async () => {
        await Promise.all([bus.close(), ...peers.map((p) => p.close())]);
      },
    };
  };

  busContract('KafkaBus', fixture({}));
  busContract('KafkaBus, fetching ahead', fixture({ fetchAhead: true, concurrency: 4 }));
});
