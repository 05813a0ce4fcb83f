/** The StreamSlots contract against the process's own slots (embedded MemoryStreamSlots) and Redis's. */
import { Redis } from 'ioredis';
import { RedisStreamSlots } from '@otm/distributed';
import { MemoryStreamSlots } from '@otm/embedded';
import { onOwnRedis, removeKeys, testPrefix } from './fixture.js';
import { streamSlotsContract } from './stream-slots.contract.js';

streamSlotsContract(
  'in the process (MemoryStreamSlots)',
  async () => ({
    slots: new MemoryStreamSlots(),
    close: async () => {},
  }),
  { shared: false },
);

onOwnRedis('StreamSlots contract: Redis', (url) => {
  streamSlotsContract(
    'Redis (RedisStreamSlots)',
    async () => {
      // Two connections, as two query processes would have.
      const prefix = testPrefix();
      const [a, b] = [new Redis(url()), new Redis(url())];
      return {
        slots: new RedisStreamSlots(a, prefix),
        other: new RedisStreamSlots(b, prefix),
        close: async () => {
          a.disconnect();
          b.disconnect();
          await removeKeys(url(), prefix);
        },
      };
    },
    { shared: true },
  );
});
