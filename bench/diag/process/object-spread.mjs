/**
 * What building an object costs on this node: an object spread followed by more members
 * (`{ ...fix, tenant, eventKey }`), the same members named, `Object.assign`, and the members first
 * then the spread; and core's `eventFacts` of the bench's location events (the per-event read of a
 * bulk request's checking thread). ns an object, the best of `rounds`.
 *
 *   npm run build && node bench/diag/process/object-spread.mjs [objects=500000] [rounds=3]
 */
import { randomUUID } from 'node:crypto';
import { eventFacts } from '../../../packages/core/dist/index.js';
import { locationEvent } from '../../lib/documents.mjs';

const N = Number(process.argv[2] ?? 500_000);
const ROUNDS = Number(process.argv[3] ?? 3);
const fixes = Array.from({ length: 1000 }, (_, i) => ({
  vehicle: `v${i & 63}`,
  time: i * 1000,
  lat: 52 + i / 1e4,
  lon: 5.1,
  speedKmh: 50,
  heading: i % 360,
}));
const events = Array.from({ length: 1000 }, (_, i) => JSON.parse(locationEvent(randomUUID(), i)));

const cases = {
  'spread, then 2 members': (f) => ({ ...f, tenant: 't', eventKey: 'k' }),
  'the members named': (f) => ({
    tenant: 't',
    eventKey: 'k',
    vehicle: f.vehicle,
    time: f.time,
    lat: f.lat,
    lon: f.lon,
    speedKmh: f.speedKmh,
    heading: f.heading,
  }),
  'Object.assign': (f) => Object.assign({}, f, { tenant: 't', eventKey: 'k' }),
  '2 members, then spread': (f) => ({ tenant: 't', eventKey: 'k', ...f }),
};
let sink = 0;
for (const [name, make] of Object.entries(cases)) {
  let best = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) sink += make(fixes[i % 1000]).time;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / N);
  }
  console.log(`${name.padEnd(24)} ${best.toFixed(1)} ns`);
}
let best = Infinity;
for (let r = 0; r < ROUNDS; r++) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) sink += eventFacts(events[i % 1000]).time;
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / N);
}
console.log(`${'eventFacts'.padEnd(24)} ${best.toFixed(1)} ns an event`);
if (sink === 42) console.log('');
