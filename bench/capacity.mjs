/**
 * Capacity per role from a bench run's results: the CPU each process spent per operation (and ×
 * the fastify echo's CPU per request in the same run), the cores each process needs for 10,000,
 * 100,000 and 1,000,000 location events a second, and beside them what the peers' published
 * figures per vCPU (bench/peers.mjs) would need for the same rates.
 *
 *   npm run bench:capacity                    # bench/results/latest.json (the latest full run)
 *   npm run bench:capacity -- <results.json> [headroom]
 *
 * `npm run bench` prints the same tables at the end of each run; this re-reads them from a file,
 * with another headroom if given (default 1.5: bench/lib/capacity.mjs).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { HEADROOM, RATES, capacityLines, capacityOf, sizingLines } from './lib/capacity.mjs';
import { alignColumns, fmt } from './lib/util.mjs';
import { PEERS } from './peers.mjs';

/** For each peer: its figure, and the vCPUs (or servers, for a per-server figure) each rate needs at that figure, without headroom. */
export function peerSizing(rates = RATES) {
  return Object.values(PEERS).map((p) => ({
    peer: p.name,
    figure: p.perVcpu ?? p.perServer,
    per: p.perVcpu !== undefined ? 'vCPU' : 'server',
    needed: rates.map((r) => r / (p.perVcpu ?? p.perServer)),
  }));
}

function main(argv) {
  const file = argv[0] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), 'results', 'latest.json');
  const headroom = Number(argv[1] ?? HEADROOM);
  const run = JSON.parse(fs.readFileSync(file, 'utf8'));
  const entries = capacityOf(run);
  if (entries.length === 0) throw new Error(`${file}: no CPU figures (run the embedded, bulk or distributed groups)`);
  console.log(
    `${file}: run of ${run.startedAt} on ${run.machine?.nproc} × ${run.machine?.cpu} (${run.mode}${run.only ? `, only ${run.only.join(',')}` : ''})`,
  );
  if (entries.some((e) => e.fromNotes))
    console.log("(a run from before the capacity table: figures read from its rows' notes, no echo figure)");
  console.log(`\nCPU by process (from /proc, all threads; × echo = µs / the fastify echo's µs of CPU a request in the same run):\n`);
  for (const l of capacityLines(entries)) console.log(l);
  console.log(
    `Cores per process: cores = events/s × µs an event / 1e6 × ${headroom} (headroom); the load generator left out; linear arithmetic:\n`,
  );
  for (const l of sizingLines(entries, { headroom })) console.log(l);
  console.log('The peers at their published figures (as the issue cites them; not measured by this repository), without headroom:\n');
  const cells = peerSizing().map((p) => [
    p.peer,
    `${fmt(p.figure, 0)} events/s a ${p.per}`,
    ...p.needed.map((n) => `${fmt(n, n < 10 ? 1 : 0)} ${p.per}s`),
  ]);
  for (const l of alignColumns(['peer', 'figure', ...RATES.map((r) => `at ${fmt(r, 0)}/s`)], cells)) console.log(`    ${l}`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
