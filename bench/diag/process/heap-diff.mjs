/**
 * What grew between two V8 heap snapshots of one process: the objects of each snapshot summed by
 * type and constructor (strings, code and arrays each as one group), and the 30 groups that grew
 * most, by bytes, with their counts. Take the snapshots with `--heapsnapshot-signal=SIGUSR2` (for
 * a service in a bench run: `--service-env "NODE_OPTIONS=--heapsnapshot-signal=SIGUSR2
 * --diagnostic-dir=DIR"`) and `kill -USR2 <pid>` twice; a snapshot holds only what is alive.
 *
 *   node --max-old-space-size=4000 bench/diag/process/heap-diff.mjs <before.heapsnapshot> <after.heapsnapshot> [rows=30]
 */
import fs from 'node:fs';

function groups(file) {
  const snap = JSON.parse(fs.readFileSync(file, 'utf8'));
  const meta = snap.snapshot.meta;
  const width = meta.node_fields.length;
  const types = meta.node_types[0];
  const [iType, iName, iSize] = ['type', 'name', 'self_size'].map((f) => meta.node_fields.indexOf(f));
  const out = new Map();
  let total = 0;
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + iType]];
    let name = snap.strings[snap.nodes[i + iName]];
    if (type === 'string' || type === 'concatenated string' || type === 'sliced string') name = '(string)';
    else if (type === 'code') name = '(code)';
    else if (type === 'hidden' || type === 'array') name = `(${type}) ${name.slice(0, 40)}`;
    const key = `${type}: ${name}`;
    const g = out.get(key) ?? { n: 0, bytes: 0 };
    g.n++;
    g.bytes += snap.nodes[i + iSize];
    total += snap.nodes[i + iSize];
    out.set(key, g);
  }
  return { out, total };
}

const [beforeFile, afterFile, rowsArg = '30'] = process.argv.slice(2);
if (afterFile === undefined) throw new Error('usage: heap-diff.mjs <before.heapsnapshot> <after.heapsnapshot> [rows]');
const [a, b] = [groups(beforeFile), groups(afterFile)];
const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
console.log(`live heap: ${mb(a.total)} → ${mb(b.total)}`);
const rows = [...new Set([...a.out.keys(), ...b.out.keys()])].map((key) => {
  const x = a.out.get(key) ?? { n: 0, bytes: 0 };
  const y = b.out.get(key) ?? { n: 0, bytes: 0 };
  return { key, dn: y.n - x.n, db: y.bytes - x.bytes, n: y.n, bytes: y.bytes };
});
rows.sort((p, q) => q.db - p.db);
for (const r of rows.slice(0, Number(rowsArg))) {
  console.log(
    `${(r.db / 1e3).toFixed(0).padStart(8)} KB ${String(r.dn).padStart(8)} objects  (now ${r.n}, ${(r.bytes / 1e3).toFixed(0)} KB)  ${r.key}`,
  );
}
