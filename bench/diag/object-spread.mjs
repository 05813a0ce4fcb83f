/**
 * Why the ClickHouse event store builds rows with Object.assign (docs/PERFORMANCE.md): a spread of
 * the 26 event columns plus 9 members, against Object.assign onto the same fresh object, for
 * 50,000 location events.
 *
 *   node bench/diag/object-spread.mjs      (after `npm run build`)
 */
import { eventColumns } from '../../packages/distributed/dist/event-columns.js';

const docs = Array.from({ length: 50_000 }, (_, k) => ({
  eventType: 'locationUpdateEvent',
  id: `e-${k}`,
  lifecycle: 'actual',
  creationDate: '2026-03-01T06:41:12.345Z',
  geoReference: { type: 'latLonPointGeoReference', lat: 52.1, lon: 5.4 },
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: '6b3e1f40-0c1a-4f7e-9a51-000000000100' },
}));
const extra = (d, cols, v) => ({ tenant: 'acme', event_id: d.id, lifecycle_rank: 4, event_time: Math.floor(cols.event_time_ms / 1000), accepted_at: 1, version: v, deleted: 0, doc: '{}' });
for (let round = 1; round <= 3; round++) {
  let t = performance.now();
  docs.forEach((d, v) => {
    const cols = eventColumns(d, 1);
    return { ...cols, ...extra(d, cols, v) };
  });
  const spread = ((performance.now() - t) * 1000) / docs.length;
  t = performance.now();
  docs.forEach((d, v) => {
    const cols = eventColumns(d, 1);
    return Object.assign(cols, extra(d, cols, v));
  });
  const assign = ((performance.now() - t) * 1000) / docs.length;
  console.log(`round ${round}: spread ${spread.toFixed(2)} µs a row, Object.assign ${assign.toFixed(2)} µs a row`);
}
