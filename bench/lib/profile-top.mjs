/**
 * Summarises a V8 .cpuprofile (from `node --cpu-prof`): the top functions by self time, and self
 * time grouped by where the code lives (a workspace package, an npm package, node internals).
 *
 *   node bench/lib/profile-top.mjs <file.cpuprofile> [top=15] [--inclusive]
 *
 * --inclusive adds the top functions by inclusive time (the samples with the function anywhere
 * on their stack, each sample counted once per function): what a call and everything under it cost.
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

const nameOf = (cf) => {
  const short = cf.url ? cf.url.replace(/^file:\/\/.*?\/(node_modules|packages|services)\//, '$1/') : '';
  return `${cf.functionName || '(anonymous)'}  ${short}${cf.url ? `:${cf.lineNumber + 1}` : ''}`;
};

export function summarise(file, top = 15, { inclusive = false } = {}) {
  const prof = JSON.parse(fs.readFileSync(file, 'utf8'));
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
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
    const k = nameOf(cf);
    fn.set(k, (fn.get(k) ?? 0) + us);
    const m = where(cf.url);
    mod.set(m, (mod.get(m) ?? 0) + us);
  }
  const busy = total - idle;
  const rank = (m, n) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, us]) => ({ name: k, ms: us / 1000, pct: (100 * us) / busy }));
  const out = { totalMs: total / 1000, idleMs: idle / 1000, busyMs: busy / 1000, functions: rank(fn, top), modules: rank(mod, 12) };
  if (inclusive) {
    const incl = new Map();
    for (const [id, us] of self) {
      if (byId.get(id).callFrame.functionName === '(idle)') continue;
      const seen = new Set();
      for (let at = id; at !== undefined; at = parent.get(at)) {
        const cf = byId.get(at).callFrame;
        if (cf.functionName === '(root)') continue;
        const k = nameOf(cf);
        if (seen.has(k)) continue;
        seen.add(k);
        incl.set(k, (incl.get(k) ?? 0) + us);
      }
    }
    out.inclusive = rank(incl, top);
  }
  return out;
}

export function printSummary(s, write = (x) => process.stdout.write(x)) {
  write(
    `sampled ${s.totalMs.toFixed(0)} ms: idle ${s.idleMs.toFixed(0)} ms, busy ${s.busyMs.toFixed(0)} ms (percentages below are of busy time)\n\ntop ${s.functions.length} functions by self time:\n`,
  );
  for (const f of s.functions) write(`  ${f.pct.toFixed(1).padStart(5)}%  ${f.ms.toFixed(0).padStart(7)} ms  ${f.name}\n`);
  write('\nself time by code location:\n');
  for (const f of s.modules) write(`  ${f.pct.toFixed(1).padStart(5)}%  ${f.ms.toFixed(0).padStart(7)} ms  ${f.name}\n`);
  if (s.inclusive) {
    write(`\ntop ${s.inclusive.length} functions by inclusive time (the function and what it called):\n`);
    for (const f of s.inclusive) write(`  ${f.pct.toFixed(1).padStart(5)}%  ${f.ms.toFixed(0).padStart(7)} ms  ${f.name}\n`);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (!process.argv[2]) {
    process.stderr.write('usage: node bench/lib/profile-top.mjs <file.cpuprofile> [top] [--inclusive]\n');
    process.exit(2);
  }
  const args = process.argv.slice(2).filter((a) => a !== '--inclusive');
  printSummary(summarise(args[0], Number(args[1] ?? 15), { inclusive: process.argv.includes('--inclusive') }));
}
