/** The StreamSlots contract against the process's own slots (query's MemoryStreamSlots) and Redis's. */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe } from 'vitest';
import { RedisStreamSlots } from '@otm/distributed';
import { MemoryStreamSlots } from '@otm/query';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';
import { streamSlotsContract } from './stream-slots.contract.js';

streamSlotsContract(
  'in the process (MemoryStreamSlots)',
  async () => ({
    slots: new MemoryStreamSlots(),
    close: async () => {},
  }),
  { shared: false },
);

const enabled = integrationEnabled('StreamSlots contract: Redis');
describe.skipIf(!enabled)('on Redis', () => {
  let redis: RedisService;
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  streamSlotsContract(
    'Redis (RedisStreamSlots)',
    async () => {
      // Its own key prefix; two connections, as two query processes would have.
      const prefix = `otm-test-${randomUUID().slice(0, 8)}`;
      const [a, b] = [new Redis(redis.url), new Redis(redis.url)];
      return {
        slots: new RedisStreamSlots(a, prefix),
        other: new RedisStreamSlots(b, prefix),
        close: async () => {
          const keys = await a.keys(`${prefix}:*`);
          if (keys.length > 0) await a.del(...keys);
          a.disconnect();
          b.disconnect();
        },
      };
    },
    { shared: true },
  );
});
