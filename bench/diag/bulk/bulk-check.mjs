/**
 * The bulk checking thread's work alone, on one core: `checkBulk` (parse, byte scan, validation,
 * ids, partition keys; services/ingress/src/bulk/check-body.ts) of the bench's bulk bodies (JSON arrays
 * of 5,000 location events), in CPU µs a document, beside the bare `JSON.parse` of the same bodies
 * measured in the same run. The checking thread is the stage that holds up embedded bulk ingest
 * (docs/PERFORMANCE.md), so a change to it can be measured here, apart from the noise of the
 * whole scenario. For where its time goes, run it under `node --cpu-prof` and summarise the
 * profile with `node bench/lib/profile-top.mjs`. After `npm run build`:
 *
 *   node bench/diag/bulk/bulk-check.mjs [rounds=3] [bodies=20]
 */
import { checkBulk } from '../../../services/ingress/dist/bulk/check-body.js';
import { precompile } from '../../../packages/model/dist/index.js';
import { locationBodies } from '../../lib/documents.mjs';
import { fmt, median } from '../../lib/util.mjs';

const ROUNDS = Number(process.argv[2] ?? 3);
const BODIES = Number(process.argv[3] ?? 20);
const PER_BODY = 5_000;

precompile();
const docs = locationBodies();
const bodies = Array.from({ length: BODIES }, () => Buffer.from(`[${Array.from({ length: PER_BODY }, () => docs.next()).join(',')}]`));
/** CPU µs a document of `work` over every body. */
const perDoc = (work) => {
  const t0 = process.cpuUsage();
  for (const body of bodies) work(body);
  const t = process.cpuUsage(t0);
  return (t.user + t.system) / (BODIES * PER_BODY);
};
const check = (body) => {
  const r = checkBulk({ body, format: 'json', kind: 'events', maxDepth: 64, maxItems: 10_000 });
  if (!r.ok || r.rejected.length > 0) throw new Error('a bench body was refused');
};
const parse = (body) => JSON.parse(body.toString('utf8'));
perDoc(check); // warm-up
perDoc(parse);
const checks = [];
const parses = [];
for (let round = 1; round <= ROUNDS; round++) {
  checks.push(perDoc(check));
  parses.push(perDoc(parse));
  console.log(`round ${round}: checkBulk ${fmt(checks.at(-1))} µs a document, JSON.parse of the same bodies ${fmt(parses.at(-1))} µs`);
}
const c = median(checks);
const p = median(parses);
console.log(`\nmedian: checkBulk ${fmt(c)} µs a document, JSON.parse ${fmt(p)} µs (checkBulk / JSON.parse ${fmt(c / p)})`);
