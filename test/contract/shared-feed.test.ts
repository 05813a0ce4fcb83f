/** The shared reading's contract over a feed in memory, the embedded stores (LMDB and the event log) and Redis, each read by query's Finder. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { EntityStore, EventStore } from '@otm/core';
import { RedisEntityStore } from '@otm/distributed';
import { openEmbeddedStores } from '@otm/embedded';
import { Finder } from '@otm/query';
import { MemorySource } from '../fixtures/memory-feed.js';
import { onOwnRedis, removeKeys, testPrefix } from './fixture.js';
import { sharedFeedContract, type FeedWrite } from './shared-feed.contract.js';

/** Stores the changes in the entity store, a unit each. */
async function writeTo(store: EntityStore, tenant: string, changes: readonly FeedWrite[]): Promise<void> {
  for (const c of changes) {
    await store.unit(async (tx) => {
      if (c.doc === undefined) tx.delete(tenant, c.kind, c.key);
      else
        tx.put(tenant, { kind: c.kind, key: c.key, lifecycleRank: 0, json: JSON.stringify(c.doc), stamp: { modified: 1, acceptedAt: 2 } });
    });
  }
}

sharedFeedContract('a feed in memory', async () => {
  const source = new MemorySource();
  return {
    source,
    write: async (tenant, changes) => {
      for (const c of changes) source.append(tenant, c.kind, c.key, c.doc, c.doc === undefined ? 'delete' : 'put');
    },
    close: async () => {},
  };
});

sharedFeedContract('the embedded stores, read by Finder', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-contract-'));
  const stores = openEmbeddedStores(dir);
  return {
    source: new Finder({ entities: stores.entities, events: stores.events }),
    write: (tenant, changes) => writeTo(stores.entities, tenant, changes),
    close: async () => {
      await stores.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

onOwnRedis('shared feed reading contract: Redis', (url) => {
  sharedFeedContract('Redis, read by Finder', async () => {
    const prefix = testPrefix();
    const store = new RedisEntityStore({ url: url(), prefix });
    return {
      // The entity kinds only: no event store needed.
      source: new Finder({ entities: store, events: {} as EventStore }),
      write: (tenant, changes) => writeTo(store, tenant, changes),
      close: async () => {
        await store.close();
        await removeKeys(url(), prefix);
      },
    };
  });
});
