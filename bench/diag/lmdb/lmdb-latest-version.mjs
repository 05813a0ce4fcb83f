/**
 * Reading the latest version of a document from LMDB, in a tight loop: one point get of a known
 * key, probing the six lifecycle ranks from the top with point gets (what
 * packages/embedded/src/lmdb-store.ts does), and one step of a reverse cursor over the document's
 * keys. 10,000 trips of 3.5 KB stored at rank 0 (no lifecycle, the common case), read in a
 * scattered order; prints µs per read, two rounds.
 *
 *   node bench/diag/lmdb/lmdb-latest-version.mjs
 *
 * The loop runs in one read transaction. The service reads in a new one on each event-loop turn,
 * where lmdb has to renew the cursor every time: there the cursor lost (bench/diag/lmdb/README.md).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { open } from 'lmdb';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-diag-lmdb-latest-'));
const root = open({ path: path.join(dir, 'otm.mdb'), maxDbs: 8, compression: false });
const db = root.openDB({ name: 'entities', encoding: 'string' });
const SEP = '|';
const doc = fs.readFileSync(new URL('../../../packages/model/test/fixtures/typical-trip.json', import.meta.url), 'utf8');
const prefixes = [];
root.transactionSync(() => {
  for (let i = 0; i < 10_000; i++) {
    const prefix = `t1${SEP}trips${SEP}${randomUUID()}${SEP}`;
    prefixes.push(prefix);
    db.put(`${prefix}0`, `1 2\n${doc}`);
  }
});

const N = 300_000;
function bench(name, read) {
  let bytes = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) bytes += read(prefixes[(i * 7919) % prefixes.length]);
  const us = Number(process.hrtime.bigint() - t0) / N / 1000;
  if (bytes === 0) throw new Error(`${name}: read nothing`);
  console.log(`  ${name.padEnd(32)} ${us.toFixed(2)} µs a read`);
}
try {
  for (let round = 1; round <= 2; round++) {
    console.log(`round ${round}`);
    bench('one point get (rank known)', (p) => db.get(`${p}0`).length);
    bench('six point gets from the top', (p) => {
      for (let r = 5; r >= 0; r--) {
        const v = db.get(p + r);
        if (v !== undefined) return v.length;
      }
      return 0;
    });
    bench('reverse cursor, one step', (p) => {
      for (const { value } of db.getRange({ start: `${p}9`, end: p, reverse: true, limit: 1 })) return value.length;
      return 0;
    });
  }
} finally {
  await root.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
