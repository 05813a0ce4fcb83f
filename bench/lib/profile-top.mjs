/**
 * Summarises a V8 .cpuprofile (from `node --cpu-prof`): the top functions by self time, and self
 * time grouped by where the code lives (a workspace package, an npm package, node internals).
 *
 *   node bench/lib/profile-top.mjs <file.cpuprofile> [top=15]
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

function where(url) {
  if (!url) return '(native / V8)';
  if (url.startsWith('node:')) return 'node core';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm && !/node_modules\/@otm\//.test(url)) return nm[1];
  const ws = /\/(packages|services)\/([^/]+)\//.exec(url);
  if (ws) return `${ws[1]}/${ws[2]}`;
  return url.replace(/^file:\/\//, '');
}

export function summarise(file, top = 15) {
  const prof = JSON.parse(fs.readFileSync(file, 'utf8'));
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map();
  for (let i = 0; i < prof.samples.length; i++) self.set(prof.samples[i], (self.get(prof.samples[i]) ?? 0) + (prof.timeDeltas[i] ?? 0));
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const fn = new Map();
  const mod = new Map();
  let idle = 0;
  for (const [id, us] of self) {
    const cf = byId.get(id).callFrame;
    if (cf.functionName === '(idle)') {
      idle += us;
      continue;
    }
    const short = cf.url ? cf.url.replace(/^file:\/\/.*?\/(node_modules|packages|services)\//, '$1/') : '';
    const k = `${cf.functionName || '(anonymous)'}  ${short}${cf.url ? `:${cf.lineNumber + 1}` : ''}`;
    fn.set(k, (fn.get(k) ?? 0) + us);
    const m = where(cf.url);
    mod.set(m, (mod.get(m) ?? 0) + us);
  }
  const busy = total - idle;
  const rank = (m, n) => [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([k, us]) => ({ name: k, ms: us / 1000, pct: (100 * us) / busy }));
  return { totalMs: total / 1000, idleMs: idle / 1000, busyMs: busy / 1000, functions: rank(fn, top), modules: rank(mod, 12) };
}

export function printSummary(s, write = (x) => process.stdout.write(x)) {
  write(`sampled ${s.totalMs.toFixed(0)} ms: idle ${s.idleMs.toFixed(0)} ms, busy ${s.busyMs.toFixed(0)} ms (percentages below are of busy time)\n\ntop ${s.functions.length} functions by self time:\n`);
  for (const f of s.functions) write(`  ${f.pct.toFixed(1).padStart(5)}%  ${f.ms.toFixed(0).padStart(7)} ms  ${f.name}\n`);
  write('\nself time by code location:\n');
  for (const f of s.modules) write(`  ${f.pct.toFixed(1).padStart(5)}%  ${f.ms.toFixed(0).padStart(7)} ms  ${f.name}\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (!process.argv[2]) {
    process.stderr.write('usage: node bench/lib/profile-top.mjs <file.cpuprofile> [top]\n');
    process.exit(2);
  }
  printSummary(summarise(process.argv[2], Number(process.argv[3] ?? 15)));
}
