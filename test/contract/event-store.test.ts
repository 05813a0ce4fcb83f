/** The EventStore contract against the embedded LMDB store and the ClickHouse store (on the tests' current ClickHouse engine). */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe } from 'vitest';
import { openEmbeddedStores } from '@otm/embedded';
import { ClickHouseEventStore } from '@otm/distributed';
import { integrationEnabled, requireServices, startClickHouse, type UrlService } from '../infra/services.js';
import { eventStoreContract } from './event-store.contract.js';

eventStoreContract(
  'LMDB (embedded)',
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-contract-'));
    const stores = openEmbeddedStores(dir);
    return {
      store: stores.events,
      close: async () => {
        await stores.close();
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  },
  { appliesInCallOrder: true },
);

const enabled = integrationEnabled('EventStore contract: ClickHouse');
describe.skipIf(!enabled)('on ClickHouse', () => {
  let ch: UrlService;
  beforeAll(async () => {
    requireServices(['clickhouse']);
    ch = await startClickHouse();
  });
  afterAll(async () => {
    await ch?.stop();
  });

  eventStoreContract(
    'ClickHouse',
    async () => {
      const store = new ClickHouseEventStore({ url: ch.url, database: `otm_contract_${randomUUID().replace(/-/g, '').slice(0, 12)}` });
      await store.migrate();
      return {
        store,
        close: async () => {
          await store.dropDatabase();
          await store.close();
        },
      };
    },
    { appliesInCallOrder: false },
  );
});
