/**
 * The ingest figures of a bench run beside the figures the peers named in issue 5 publish for
 * themselves: per vCPU, and for the whole machine where the peer gives a per-server figure.
 *
 *   npm run bench:peers                   # bench/results/latest.json (the latest full run)
 *   npm run bench:peers -- <results.json> # any run's results
 *
 * Our figures are measured (`npm run bench`, loopback, on the machine the JSON names); per vCPU
 * means the figure divided by the machine's processors, although the load generator (and, for the
 * distributed rows, Kafka, Redis and ClickHouse) ran on the same processors: a conservative
 * division. The peers' figures are the ones the issue cites, from their own publications and
 * hardware (ThingsBoard: https://thingsboard.io/docs/reference/performance-aws-instances/, messages
 * of ~100 bytes over MQTT or its HTTP device API; Traccar: its maintainers' statements), and the
 * issue's own measure of generic REST data platforms on this kind of machine (150-220 documents/s).
 * None was measured by this repository: this machine has no network to fetch the peers and no
 * Docker engine to run them; a same-machine comparison needs them installed beside the service.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The peers' published figures, per vCPU unless `perServer`. */
export const PEERS = {
  tbHttp: { name: 'ThingsBoard, HTTP device API', perVcpu: 240 },
  tbBest: { name: 'ThingsBoard, best published (MQTT)', perVcpu: 2_500 },
  traccar: { name: 'Traccar, a server', perServer: 8_000 },
  rest: { name: 'generic REST data platforms on this kind of machine, the best', perServer: 220 },
};

/** Our rows, found by their scenario text, with the peers each is put beside. */
const OURS = [
  { match: /^PUT locationUpdateEvent\b.*embedded/, label: 'one event a request (PUT), embedded', peers: ['tbHttp', 'rest'] },
  {
    match: /^PUT locationUpdateEvent\b.*distributed/,
    label: 'one event a request (PUT), distributed (all on these cores)',
    peers: ['tbHttp', 'rest'],
  },
  { match: /^bulk ingest .*embedded/, label: 'bulk ingest, visible by GET, embedded', peers: ['tbBest', 'traccar'] },
  {
    match: /^bulk ingest .*distributed/,
    label: 'bulk ingest, visible by GET, distributed (all on these cores)',
    peers: ['tbBest', 'traccar'],
  },
];

const fmt = (n) => Math.round(n).toLocaleString('en-US');

/**
 * The comparison rows of a bench run (its results JSON): per peer, our figure, per vCPU, the peer's
 * figure and `factor` (ours / theirs, per vCPU or for the whole machine as the peer gives it).
 */
export function peerRows(run) {
  const cpus = run.machine?.nproc;
  if (!(cpus > 0)) throw new Error('the results name no machine.nproc');
  const rows = [];
  for (const o of OURS) {
    const row = run.rows.find((r) => o.match.test(r.scenario));
    if (row === undefined || typeof row.figure !== 'number') continue;
    const perVcpu = row.figure / cpus;
    for (const key of o.peers) {
      const p = PEERS[key];
      const theirs = p.perVcpu ?? p.perServer;
      const factor = (p.perVcpu !== undefined ? perVcpu : row.figure) / theirs;
      rows.push({
        ours: o.label,
        figure: row.figure,
        unit: row.unit,
        perVcpu,
        peer: p.name,
        theirs,
        perServer: p.perVcpu === undefined,
        factor,
      });
    }
  }
  return rows;
}

function main() {
  const file = process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), 'results', 'latest.json');
  const run = JSON.parse(fs.readFileSync(file, 'utf8'));
  const rows = peerRows(run);
  if (rows.length === 0) throw new Error(`${file}: none of the ingest rows (run the embedded, bulk and distributed groups)`);
  const lines = rows.map((r) => [
    r.ours,
    `${fmt(r.figure)} ${r.unit} (${fmt(r.perVcpu)} a vCPU)`,
    `${r.peer}: ${fmt(r.theirs)}${r.perServer ? ' in all' : ' a vCPU'}`,
    `${r.factor.toFixed(1)}×`,
  ]);
  console.log(
    `${file}: run of ${run.startedAt} on ${run.machine.nproc} × ${run.machine.cpu} (${run.mode}${run.only ? `, only ${run.only.join(',')}` : ''})\n`,
  );
  const head = ['ours', 'figure', 'peer (as the issue cites it; not measured by this repository)', 'ours / peer'];
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const out = (cells) =>
    console.log(
      cells
        .map((c, i) => c.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    );
  out(head);
  out(widths.map((w) => '-'.repeat(w)));
  for (const l of lines) out(l);
  console.log(
    "\nper vCPU = the figure / the machine's processors, though the load generator and, when distributed, Kafka, Redis and ClickHouse shared them.",
  );
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
