/**
 * Compares two runs of `npm run bench` from their JSON files: per scenario the figure and the
 * ratio of each run, how the ratio moved, and where the verdict changed. Rows are matched by
 * scenario with the numbers taken out of the name (a row says "at 2,324 PUT/s" in one run and
 * "at 1,949 PUT/s" in another). Ratios are what to compare: each is measured against a baseline of
 * its own run, so two runs on a noisy machine (or on two machines) stay comparable; the machine
 * of each run is printed, and a warning when they differ.
 *
 *   npm run bench:compare -- <older.json> [newer.json]     (newer: bench/results/latest.json)
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { alignColumns, fmt } from './lib/util.mjs';

/** The scenario name without its numbers: the key that matches a row across runs. */
export const scenarioKey = (name) =>
  name
    .replace(/\d[\d,.]*/g, '#')
    .replace(/\s+/g, ' ')
    .trim();

const verdict = (row) => (row?.pass === true ? 'pass' : row?.pass === false ? 'FAIL' : row ? (row.status ?? 'info') : '—');

/** The rows of the comparison: one per scenario of either run, in the newer run's order. */
export function compareRuns(older, newer) {
  const olderRows = new Map(older.rows.map((r) => [scenarioKey(r.scenario), r]));
  const seen = new Set();
  const out = [];
  for (const n of newer.rows) {
    const key = scenarioKey(n.scenario);
    seen.add(key);
    const o = olderRows.get(key);
    const change = o && Number.isFinite(o.ratio) && Number.isFinite(n.ratio) && o.ratio !== 0 ? n.ratio / o.ratio - 1 : undefined;
    out.push({
      scenario: n.scenario,
      older: o,
      newer: n,
      change,
      verdict: `${verdict(o)} → ${verdict(n)}`,
      flipped: o !== undefined && verdict(o) !== verdict(n),
    });
  }
  for (const o of older.rows) {
    if (!seen.has(scenarioKey(o.scenario)))
      out.push({ scenario: o.scenario, older: o, newer: undefined, change: undefined, verdict: `${verdict(o)} → —`, flipped: false });
  }
  return out;
}

const figureOf = (r) => (r === undefined ? '—' : r.figure === undefined ? '—' : `${fmt(r.figure)} ${r.unit ?? ''}`.trim());
const describe = (run) =>
  `${run.startedAt ?? '?'} (${run.mode ?? '?'}${run.only ? `, only ${run.only}` : ''}) on ${run.machine?.nproc ?? '?'} × ${run.machine?.cpu ?? '?'}`;

function main(argv) {
  const [olderFile, newerFile = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results', 'latest.json')] = argv;
  if (!olderFile) {
    process.stderr.write('usage: npm run bench:compare -- <older.json> [newer.json]\n');
    return 2;
  }
  const older = JSON.parse(fs.readFileSync(olderFile, 'utf8'));
  const newer = JSON.parse(fs.readFileSync(newerFile, 'utf8'));
  const rows = compareRuns(older, newer);
  process.stdout.write(`older: ${describe(older)}  ${olderFile}\nnewer: ${describe(newer)}  ${newerFile}\n`);
  if (older.machine?.cpu !== newer.machine?.cpu || older.machine?.nproc !== newer.machine?.nproc) {
    process.stdout.write('warning: the runs are from different machines; ratios travel better than figures, but not perfectly\n');
  }
  const head = ['scenario', 'older', 'newer', 'ratio older', 'ratio newer', 'change', 'result'];
  const cells = rows.map((r) => [
    r.scenario,
    figureOf(r.older),
    figureOf(r.newer),
    fmt(r.older?.ratio, 2),
    fmt(r.newer?.ratio, 2),
    r.change === undefined ? '—' : `${r.change >= 0 ? '+' : ''}${fmt(r.change * 100, 0)} %`,
    `${r.verdict}${r.flipped ? ' *' : ''}`,
  ]);
  process.stdout.write(`\n${alignColumns(head, cells).join('\n')}\n`);
  const flipped = rows.filter((r) => r.flipped).length;
  process.stdout.write(
    `\n${flipped} verdict(s) changed (marked *); change = newer ratio / older ratio - 1 (for "<=" targets a fall is better)\n`,
  );
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) process.exitCode = main(process.argv.slice(2));
