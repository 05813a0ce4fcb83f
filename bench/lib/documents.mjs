/** The documents the benchmarks send (the scenarios of bench/scenarios/ and the bench/diag scripts share them). */
import fs from 'node:fs';
import path from 'node:path';
import { REPO, idMaker } from './util.mjs';

/** 64 vehicle ids: location events refer to one of them (and are keyed by it on Kafka). */
export const VEHICLES = Array.from({ length: 64 }, (_, i) => `6b3e1f40-0c1a-4f7e-9a51-${(0x100 + i).toString(16).padStart(12, '0')}`);

/** A locationUpdateEvent of about 410 bytes (reference to one of 64 vehicles, speed, heading). */
export function locationEvent(id, i) {
  return (
    `{"eventType":"locationUpdateEvent","id":"${id}","lifecycle":"actual","creationDate":"2026-03-01T06:41:12.345Z",` +
    `"geoReference":{"type":"latLonPointGeoReference","lat":${(52 + (i % 1000) / 10000).toFixed(4)},"lon":${(5.4 + (i % 977) / 10000).toFixed(4)},` +
    `"speed":{"value":${50 + (i % 30)},"unit":"km/h"},"heading":{"value":${i % 360},"unit":"degrees"}},` +
    `"vehicle":{"associationType":"reference","entityType":"vehicle","uuid":"${VEHICLES[i % VEHICLES.length]}"}}`
  );
}

/**
 * Location events with fresh sequential ids, as the PUT and bulk scenarios send them: `next()`
 * makes the next body, `sent()` counts them, `ids.at(n)` is the id of the n-th.
 */
export function locationBodies(ids = idMaker()) {
  let i = 0;
  return { ids, next: () => locationEvent(ids.at(i), i++), sent: () => i };
}

/** A small vehicle. */
export const vehicleDoc = (id, i) =>
  `{"entityType":"vehicle","id":"${id}","name":"Truck ${i}","vehicleType":"tractor","licensePlate":"BX-${i}"}`;

/** The typical trip with inline entities (packages/model/test/fixtures/typical-trip.json), compact. */
export const TRIP = JSON.parse(fs.readFileSync(path.join(REPO, 'packages/model/test/fixtures/typical-trip.json'), 'utf8'));
export const TRIP_BODY = JSON.stringify(TRIP);

/**
 * Writes `n` location events of `docs` (a `locationBodies()`) through an event store's own `write`,
 * in batches of 10,000 (lifecycle `actual`), as the diagnostics that need a filled store do.
 */
export async function writeLocationEvents(store, docs, n, tenant = 'acme') {
  for (let b = 0; b < n; b += 10_000) {
    const writes = [];
    for (let i = b; i < Math.min(n, b + 10_000); i++) {
      const json = docs.next();
      const value = JSON.parse(json);
      writes.push({ op: 'put', tenant, doc: { kind: 'events', key: value.id, lifecycleRank: 4, json, value } });
    }
    await store.write(writes);
  }
}
