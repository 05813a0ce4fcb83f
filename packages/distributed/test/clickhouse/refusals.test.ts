/**
 * ClickHouse refusing inserts (issue 42), on the real server: a table made to hold few parts
 * (`parts_to_throw_insert`), its merges stopped, refuses the next insert with TOO_MANY_PARTS (252);
 * the store turns that into a retryable StorageRefused (the Kafka consumer retries without
 * committing, consumer.ts), its write state is down naming the cause, and once the parts are
 * merged the same write succeeds and every acknowledged event is there.
 */
import { randomUUID } from 'node:crypto';
import { createClient, type ClickHouseClient } from '@clickhouse/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices, startClickHouse, type UrlService } from '../../../../test/infra/services.js';
import { StorageRefused, type DocumentWrite } from '@otm/core';
import { ClickHouseEventStore, eventStoreDdl } from '../../src/index.js';
import { isRetryable } from '../../src/kafka/consumer.js';

const location = (id: string, i: number): DocumentWrite => {
  const doc = {
    id,
    eventType: 'locationUpdateEvent',
    creationDate: new Date(Date.UTC(2024, 2, 1) + i * 1000).toISOString(),
    geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
  };
  return { op: 'put', tenant: 'acme', doc: { kind: 'events', key: id, lifecycleRank: 0, json: JSON.stringify(doc), value: doc } };
};

const enabled = integrationEnabled('ClickHouse event store refusing inserts');
describe.skipIf(!enabled)('ClickHouseEventStore when ClickHouse refuses inserts', () => {
  let ch: UrlService;
  let admin: ClickHouseClient;
  beforeAll(async () => {
    requireServices(['clickhouse']);
    ch = await startClickHouse();
    admin = createClient({ url: ch.url });
  }, 120_000);
  afterAll(async () => {
    await admin?.close();
    await ch?.stop();
  });

  it('TOO_MANY_PARTS: a retryable StorageRefused, the store down, then every write once the parts are merged', async () => {
    const database = `otm_parts_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
    // otm_events as migrate makes it, but holding at most 3 parts a partition before it refuses.
    const [createDb, createEvents] = eventStoreDdl(database);
    await admin.command({ query: createDb! });
    await admin.command({
      query: createEvents!.replace(
        /SETTINGS index_granularity = 1024$/,
        'SETTINGS index_granularity = 1024, parts_to_delay_insert = 2, parts_to_throw_insert = 3',
      ),
    });
    const store = new ClickHouseEventStore({ url: ch.url, database });
    await store.migrate(); // the other tables; otm_events is there already
    try {
      await admin.command({ query: `SYSTEM STOP MERGES ${database}.otm_events` });
      const acknowledged: string[] = [];
      let refusal: unknown;
      for (let i = 0; i < 20 && refusal === undefined; i++) {
        const id = randomUUID();
        try {
          await store.write([location(id, i)]);
          acknowledged.push(id);
        } catch (e) {
          refusal = e;
        }
      }
      expect(refusal).toBeInstanceOf(StorageRefused);
      expect(refusal).toMatchObject({ store: 'clickhouse', refusal: 'too-many-parts', retryable: true });
      // ClickHouse's own words.
      expect((refusal as Error).message).toMatch(/Too many parts \(\d+.*\).*\. Merges are processing significantly slower than inserts/);
      expect(isRetryable(refusal)).toBe(true);
      expect(acknowledged.length).toBeGreaterThanOrEqual(2);
      const [part] = store.parts();
      expect(part!.name).toBe('store clickhouse');
      expect(part!.status()).toMatchObject({ up: false, reason: expect.stringMatching(/too many parts/) });

      // Merged: the same write succeeds, and every acknowledged event is there.
      await admin.command({ query: `SYSTEM START MERGES ${database}.otm_events` });
      await admin.command({ query: `OPTIMIZE TABLE ${database}.otm_events FINAL` });
      const retried = randomUUID();
      await store.write([location(retried, 99)]);
      expect(part!.status().up).toBe(true);
      for (const id of [...acknowledged, retried]) expect((await store.get('acme', 'events', id))?.key).toBe(id);
    } finally {
      await store.dropDatabase();
      await store.close();
    }
  }, 120_000);
});
