/**
 * What an invalid document costs the validator, beside a valid one of the same size: `validateEntity`
 * (packages/model) of a valid trip of about 1 MB (the own fixture's stops repeated) as the baseline,
 * and of invalid documents of about 1 MB:
 * - a trip with ~95,000 unknown members at the top (`"u00000":0,` ...);
 * - a trip whose `actions` array holds ~300,000 numbers (each a wrong type);
 * - a vehicle whose `fuels` hold ~60,000 items with a wrong `fuelType` (each an enum error);
 * - a trip with one unknown member whose name is 1 MB long;
 * - a trip with ~95,000 unknown members whose names are close to a known one (`vehicel00000`);
 * - an updateEvent whose `entity.geoReference` (a merge patch without its `type`: each of the 7
 *   geoReference kinds is a candidate) holds ~95,000 unknown members.
 * Prints, for each, the median CPU ms (of the process: the cores are shared, so wall time is noisy)
 * of `JSON.parse` of its text and of `validateEntity` of the parsed document, the validation's ratio
 * to the valid trip's and to its own parse, the number of items answered and the answer's size in
 * bytes. Imports the TypeScript sources in place:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/hostile/invalid-documents.mjs [rounds=7] [only]
 */
import fs from 'node:fs';
import { validateEntity, precompile } from '../../../packages/model/src/index.ts';
import { fmt, median } from '../../lib/util.mjs';

const ROUNDS = Number(process.argv[2] ?? 7);
const ONLY = process.argv[3]; // measure only the cases whose name contains this (and the baseline)
const MB = 1_000_000;

const typical = JSON.parse(fs.readFileSync(new URL('../../../packages/model/test/fixtures/typical-trip.json', import.meta.url), 'utf8'));

/** A valid trip of about 1 MB: the typical trip's actions repeated with fresh ids. */
function validTrip() {
  const trip = structuredClone(typical);
  const actions = trip.actions;
  trip.actions = [];
  let n = 0;
  const id = () => `00000000-0000-4000-8000-${(n++).toString(16).padStart(12, '0')}`;
  const withIds = (v) => {
    if (Array.isArray(v)) return v.map(withIds);
    if (v === null || typeof v !== 'object') return v;
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = k === 'id' ? id() : withIds(x);
    return out;
  };
  while (JSON.stringify(trip).length < MB) for (const a of actions) trip.actions.push(withIds(a));
  return JSON.stringify(trip);
}

/** About 1 MB of members `member(i)`, joined by commas. */
function members(member) {
  const parts = [];
  let size = 0;
  for (let i = 0; size < MB; i++) {
    const p = member(i);
    parts.push(p);
    size += p.length + 1;
  }
  return parts.join(',');
}
/** `{"entityType":"trip", <members...>}` of about 1 MB. */
const manyMembers = (member) => `{"entityType":"trip",${members(member)}}`;

const cases = [
  ['valid trip (baseline)', 'trips', validTrip()],
  ['trip, unknown members', 'trips', manyMembers((i) => `"u${String(i).padStart(5, '0')}":0`)],
  ['trip, unknown members near a known name', 'trips', manyMembers((i) => `"vehicel${String(i).padStart(5, '0')}":0`)],
  ['trip, actions of numbers', 'trips', `{"actions":[${Array.from({ length: 330_000 }, () => '1').join(',')}]}`],
  ['vehicle, fuels with a wrong fuelType', 'vehicles', `{"fuels":[${Array.from({ length: 62_000 }, () => '{"fuelType":1}').join(',')}]}`],
  ['trip, one member named 1 MB', 'trips', `{"${'x'.repeat(MB)}":1}`],
  [
    'updateEvent, geoReference patch with unknown members',
    'events',
    `{"eventType":"updateEvent","entity":{"entityType":"location","id":"50824123-0924-4563-ac1e-ca0e37487823","geoReference":{${members((i) => `"u${String(i).padStart(5, '0')}":0`)}}}}`,
  ],
];

const w = (s) => process.stdout.write(s);
precompile();
w(`node ${process.version}, ${ROUNDS} rounds, median CPU ms\n\n`);
w('| document | bytes | parse ms | validate ms | validate / valid trip | validate / parse | items | answer bytes |\n');
w('|---|---:|---:|---:|---:|---:|---:|---:|\n');
/** CPU ms of the process for one call of `f`. */
const cpu = (f) => {
  const t = process.cpuUsage();
  f();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
};
let baseline;
for (const [name, kind, text] of cases) {
  if (ONLY !== undefined && !name.includes(ONLY) && baseline !== undefined) continue;
  const doc = JSON.parse(text);
  let answer = validateEntity(kind, doc); // warm-up (and compile)
  const parses = [];
  const validations = [];
  for (let r = 0; r < ROUNDS; r++) {
    parses.push(cpu(() => JSON.parse(text)));
    validations.push(cpu(() => (answer = validateEntity(kind, doc))));
  }
  const v = median(validations);
  const p = median(parses);
  baseline ??= v;
  w(
    `| ${name} | ${text.length} | ${fmt(p)} | ${fmt(v)} | ${fmt(v / baseline)} | ${fmt(v / p)} | ${answer.length} | ${JSON.stringify(answer).length} |\n`,
  );
}
