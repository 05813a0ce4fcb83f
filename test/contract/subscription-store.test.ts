/** The SubscriptionStore contract against the embedded LMDB store and the Redis store. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openEmbeddedStores, type EmbeddedStores } from '@otm/embedded';
import { RedisEntityStore } from '@otm/distributed';
import { onOwnRedis, removeKeys, testPrefix } from './fixture.js';
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

onOwnRedis('SubscriptionStore contract: Redis', (url) => {
  subscriptionStoreContract('Redis', async () => {
    const prefix = testPrefix();
    const stores: RedisEntityStore[] = [new RedisEntityStore({ url: url(), prefix })];
    return {
      store: stores[0]!.subscriptions,
      reopen: async () => {
        const s = new RedisEntityStore({ url: url(), prefix });
        stores.push(s);
        return s.subscriptions;
      },
      close: async () => {
        await Promise.all(stores.map((s) => s.close()));
        await removeKeys(url(), prefix);
      },
    };
  });
});
