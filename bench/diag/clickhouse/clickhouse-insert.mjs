/**
 * Time of one insert of 300 location rows into `otm_events` (with and without the document
 * column) and into `otm_event_ids`, on a fresh test ClickHouse (test/infra/services.ts):
 * why the test ClickHouse keeps its data on tmpfs. Compare:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/clickhouse/clickhouse-insert.mjs
 *   OTM_TEST_CLICKHOUSE_ON_DISK=1 node --import ./bench/lib/register-ts.mjs bench/diag/clickhouse/clickhouse-insert.mjs
 *
 * (after `npm run build`)
 */
import { createClient, ClickHouseLogLevel } from '@clickhouse/client';
import { startClickHouse } from '../../../test/infra/services.ts';
import { ClickHouseEventStore } from '../../../packages/distributed/dist/index.js';

const chs = await startClickHouse();
const store = new ClickHouseEventStore({ url: chs.url, database: 'otm' });
const ch = createClient({ url: chs.url, log: { level: ClickHouseLogLevel.OFF } });
try {
  await store.migrate();
  const doc = JSON.stringify({
    eventType: 'locationUpdateEvent',
    id: 'x',
    lifecycle: 'actual',
    creationDate: '2026-03-01T06:41:12.345Z',
    geoReference: { type: 'latLonPointGeoReference', lat: 52.1, lon: 5.4 },
  });
  const row = (i, d) => ({
    tenant: 'acme',
    event_id: `e-${i}`,
    lifecycle_rank: 4,
    lifecycle: 'actual',
    event_type: 'locationUpdateEvent',
    event_time: '2026-03-01 06:41:12.345',
    vehicle_id: 'v',
    lat: 52.1,
    lon: 5.4,
    accepted_at: 1,
    version: i,
    deleted: 0,
    doc: d,
  });
  const median = async (insert) => {
    const ms = [];
    for (let k = 0; k < 11; k++) {
      const t = performance.now();
      await insert(k);
      ms.push(performance.now() - t);
    }
    return ms.sort((a, b) => a - b)[5].toFixed(1);
  };
  const events = (d) =>
    median((k) =>
      ch.insert({ table: 'otm.otm_events', values: Array.from({ length: 300 }, (_, i) => row(k * 1000 + i, d)), format: 'JSONEachRow' }),
    );
  const ids = await median((k) =>
    ch.insert({
      table: 'otm.otm_event_ids',
      values: Array.from({ length: 300 }, (_, i) => ({
        tenant: 'acme',
        kind: 'events',
        event_id: `e-${k}-${i}`,
        lifecycle_rank: 4,
        vehicle_id: 'v',
        event_time: '2026-03-01 06:41:12.345',
        accepted_at: 1,
        version: 1,
        deleted: 0,
      })),
      format: 'JSONEachRow',
    }),
  );
  console.log(
    `data on ${process.env.OTM_TEST_CLICKHOUSE_ON_DISK === '1' ? 'disk ($TMPDIR)' : 'tmpfs (/dev/shm)'}: 300 rows into otm_events ${await events(doc)} ms (documents), ${await events('')} ms (empty documents); into otm_event_ids ${ids} ms (medians of 11)`,
  );
} finally {
  await ch.close();
  await store.close();
  await chs.stop();
}
