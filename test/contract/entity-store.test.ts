/** The EntityStore contract against the embedded LMDB store and the Redis store. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { EntityStore } from '@otm/core';
import { openEmbeddedStores, type EmbeddedStores } from '@otm/embedded';
import { RedisEntityStore } from '@otm/distributed';
import { onOwnRedis, removeKeys, testPrefix } from './fixture.js';
import { entityStoreContract } from './entity-store.contract.js';

entityStoreContract('LMDB (embedded)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-contract-'));
  const opened: EmbeddedStores[] = [openEmbeddedStores(dir)];
  return {
    store: opened[0]!.entities,
    reopen: async () => {
      await opened[0]!.close();
      const again = openEmbeddedStores(dir);
      opened.push(again);
      return again.entities;
    },
    close: async () => {
      await opened[opened.length - 1]!.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

onOwnRedis('EntityStore contract: Redis', (url) => {
  entityStoreContract('Redis', async () => {
    const prefix = testPrefix();
    const stores: EntityStore[] = [new RedisEntityStore({ url: url(), prefix })];
    return {
      store: stores[0]!,
      reopen: async () => {
        const s = new RedisEntityStore({ url: url(), prefix });
        stores.push(s);
        return s;
      },
      close: async () => {
        await Promise.all(stores.map((s) => s.close()));
        await removeKeys(url(), prefix);
      },
    };
  });
});
