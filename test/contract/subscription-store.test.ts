/** The SubscriptionStore contract against the embedded LMDB store and the Redis store. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe } from 'vitest';
import { openEmbeddedStores, type EmbeddedStores } from '@otm/embedded';
import { RedisEntityStore } from '@otm/distributed';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';
import { subscriptionStoreContract } from './subscription-store.contract.js';

subscriptionStoreContract('LMDB (embedded)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-contract-'));
  const opened: EmbeddedStores[] = [openEmbeddedStores(dir)];
  return {
    store: opened[0]!.subscriptions,
    reopen: async () => {
      await opened[0]!.close();
      const again = openEmbeddedStores(dir);
      opened.push(again);
      return again.subscriptions;
    },
    close: async () => {
      await opened[opened.length - 1]!.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

const enabled = integrationEnabled('SubscriptionStore contract: Redis');
describe.skipIf(!enabled)('on Redis', () => {
  let redis: RedisService;
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  subscriptionStoreContract('Redis', async () => {
    // its own key prefix on a possibly shared Redis; every key under it is removed after the test
    const prefix = `otm-test-${randomUUID().slice(0, 8)}`;
    const stores: RedisEntityStore[] = [new RedisEntityStore({ url: redis.url, prefix })];
    return {
      store: stores[0]!.subscriptions,
      reopen: async () => {
        const s = new RedisEntityStore({ url: redis.url, prefix });
        stores.push(s);
        return s.subscriptions;
      },
      close: async () => {
        await Promise.all(stores.map((s) => s.close()));
        const admin = new Redis(redis.url);
        let cursor = '0';
        do {
          const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
          cursor = next;
          if (keys.length > 0) await admin.del(...keys);
        } while (cursor !== '0');
        await admin.quit();
      },
    };
  });
});
