/**
 * Checks the event store's DDL (otm_entities too), its read queries and every SQL block of
 * docs/analytics.md against a CURRENT ClickHouse, in-process via chdb (the tests run against
 * Debian's 18.16). Not part of `npm test` (chdb is ~550 MB). Run from the repository root after `tsc -b`:
 *
 *   npm install --no-save chdb && node packages/distributed/scripts/check-current-clickhouse.mjs
 *
 * Prints each statement with OK/FAIL and exits 1 on any failure.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Session } from 'chdb';
import { entityRows, eventColumns, eventGetSql, eventListSql, eventPlacementsSql, eventStoreDdl, trackSql } from '../dist/index.js';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-chdb-'));
const s = new Session(dir);
console.log(s.query('SELECT version()', 'TSV').trim());
for (const sql of eventStoreDdl('otm')) s.query(sql);
const V1 = 'b9b7e0f2-8a4c-4a6e-9d35-1f4b1e0c0a01',
  T1 = 'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a01';
const ref = (entityType, uuid) => ({ associationType: 'reference', entityType, uuid });
let v = 1;
let failed = false;
const rows = [],
  ids = [];
const add = (id, doc, rank = 0) => {
  const c = eventColumns(doc, 0);
  const version = v++;
  rows.push({
    ...c,
    tenant: 'acme',
    event_id: id,
    lifecycle_rank: rank,
    event_time: Math.floor(c.event_time_ms / 1000),
    accepted_at: 0,
    version,
    deleted: 0,
    doc: JSON.stringify(doc),
  });
  ids.push({
    tenant: 'acme',
    kind: 'events',
    event_id: id,
    lifecycle_rank: rank,
    vehicle_id: c.vehicle_id,
    event_time: Math.floor(c.event_time_ms / 1000),
    accepted_at: 0,
    version,
    deleted: 0,
  });
};
add(
  'f1',
  {
    eventType: 'fuelConsumedEvent',
    lifecycle: 'actual',
    creationDate: '2024-03-01T09:00:00Z',
    vehicle: ref('vehicle', V1),
    trip: ref('trip', T1),
    amount: { value: 10, unit: 'l' },
  },
  4,
);
add(
  'f1',
  {
    eventType: 'fuelConsumedEvent',
    lifecycle: 'actual',
    creationDate: '2024-03-01T09:00:00Z',
    vehicle: ref('vehicle', V1),
    trip: ref('trip', T1),
    amount: { value: 10, unit: 'l' },
  },
  4,
);
add('e1', {
  eventType: 'emissionEvent',
  creationDate: '2024-03-01T09:00:00Z',
  vehicle: ref('vehicle', V1),
  trip: ref('trip', T1),
  amount: { value: 1500, unit: 'g' },
});
add('l1', {
  eventType: 'locationUpdateEvent',
  creationDate: '2024-03-01T06:00:00Z',
  vehicle: ref('vehicle', V1),
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 4 },
});
add('l2', {
  eventType: 'locationUpdateEvent',
  creationDate: '2024-03-01T06:01:00Z',
  vehicle: ref('vehicle', V1),
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 4.1 },
});
add('l3', {
  eventType: 'locationUpdateEvent',
  creationDate: '2024-03-01T06:02:00Z',
  vehicle: ref('vehicle', V1),
  geoReference: { type: 'latLonPointGeoReference', lat: 52.1, lon: 4.1 },
});
// tombstone for e1 (same sort key, higher version) -> must vanish from FINAL ... WHERE deleted = 0
{
  const e1 = rows.find((r) => r.event_id === 'e1');
  rows.push({ ...e1, amount: null, amount_normalised: null, version: 1000, deleted: 1 });
}
s.query(`INSERT INTO otm.otm_events FORMAT JSONEachRow\n${rows.map((r) => JSON.stringify(r)).join('\n')}`);
s.query(`INSERT INTO otm.otm_event_ids FORMAT JSONEachRow\n${ids.map((r) => JSON.stringify(r)).join('\n')}`);
// Entities as the entity export writes them: a trip naming the consignment of the docs' query
// through an inline action, and a deleted trip (tombstones).
const C1 = '5e1f0c2a-7d3b-4c8e-9f10-2a3b4c5d6e01';
const entityChange = (version, kind, key, doc) => ({
  tenant: 'acme',
  op: doc === undefined ? 'delete' : 'put',
  kind,
  key,
  lifecycleRank: 0,
  at: Date.parse('2024-03-01T05:00:00Z') + version,
  version: BigInt(version),
  ...(doc === undefined ? {} : { json: JSON.stringify(doc) }),
});
const entities = [
  entityChange(1, 'trips', T1, {
    entityType: 'trip',
    id: T1,
    name: 'Daily supply',
    status: 'inTransit',
    actions: [{ associationType: 'inline', entity: { actionType: 'load', id: 'a1', consignment: ref('consignment', C1) } }],
  }),
  entityChange(2, 'trips', 'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a02', { entityType: 'trip', id: 'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a02' }),
  entityChange(3, 'trips', 'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a02'),
].flatMap(entityRows);
s.query(`INSERT INTO otm.otm_entities FORMAT JSONEachRow\n${entities.map((r) => JSON.stringify(r)).join('\n')}`);
const md = fs.readFileSync(new URL('../../../docs/analytics.md', import.meta.url), 'utf8');
for (const m of md.matchAll(/```sql\n([\s\S]*?)```/g)) {
  const sql = m[1].trim();
  try {
    const out = s.query(sql, 'JSONEachRow');
    console.log('OK  ', sql.split('\n')[0], '\n', out.trim().slice(0, 400));
  } catch (e) {
    failed = true;
    console.log('FAIL', sql.split('\n')[0], String(e).slice(0, 500));
  }
}
// the store's own read queries, made by the store's own builders
for (const q of [
  eventGetSql('otm', 'acme', ['f1']),
  eventGetSql('otm', 'acme', ['f1', 'l1', 'e1']),
  eventGetSql('otm', 'acme', ['f1'], 4),
  eventPlacementsSql('otm', 'acme', ['f1', 'l1']),
  eventListSql('otm', { tenant: 'acme', kind: 'events', facet: '', limit: 10 }),
  eventListSql('otm', {
    tenant: 'acme',
    kind: 'events',
    facet: 'eventType=locationUpdateEvent',
    after: { at: 0, key: 'e1' },
    since: 0,
    before: 1,
    limit: 10,
  }),
  eventListSql('otm', { tenant: 'acme', kind: 'events', facet: `vehicle=${V1}`, limit: 10 }),
  eventListSql('otm', {
    tenant: 'acme',
    kind: 'events',
    facet: `vehicle=${V1}`,
    since: Date.parse('2024-03-01T00:00:00Z'),
    before: Date.parse('2024-03-02T00:00:00Z'),
    limit: 10,
  }),
  trackSql('otm', { tenant: 'acme', vehicle: V1, from: Date.parse('2024-03-01T00:00:00Z'), to: Date.parse('2024-03-02T00:00:00Z') }),
  trackSql('otm', {
    tenant: 'acme',
    vehicle: V1,
    from: Date.parse('2024-03-01T00:00:00Z'),
    to: Date.parse('2024-03-02T00:00:00Z'),
    after: { time: Date.parse('2024-03-01T06:00:00Z'), key: 'l1' },
    limit: 1,
  }),
]) {
  try {
    console.log('OK  store', s.query(q, 'JSONEachRow').trim().slice(0, 300));
  } catch (e) {
    failed = true;
    console.log('FAIL store', String(e).slice(0, 400));
  }
}
s.close?.();
fs.rmSync(dir, { recursive: true, force: true });
if (failed) process.exit(1);
