/**
 * LMDB commit cost with random keys in a growing database (the last figures: bench/diag/lmdb/README.md):
 * preloads N random-UUID keys, then commits transactions of 24 puts (each committed and flushed,
 * like the service) for 4 s from 2 concurrent writers, and prints CPU per put.
 *
 *   node bench/diag/lmdb/lmdb-random-keys.mjs [preload=200000] [perTxn=24] [pageSize=4096]
 *
 * pageSize applies to the new database the script makes (LMDB fixes it at creation).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { open } from 'lmdb';

const preload = Number(process.argv[2] ?? 200_000);
const per = Number(process.argv[3] ?? 24);
const pageSize = Number(process.argv[4] ?? 4096);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-diag-lmdb-'));
const root = open({ path: path.join(dir, 'otm.mdb'), maxDbs: 8, compression: false, pageSize });
const db = root.openDB({ name: 'telemetry', encoding: 'string' });
const doc = 'x'.repeat(400);
try {
  for (let done = 0; done < preload; done += 10_000) {
    await root.transaction(() => {
      for (let i = 0; i < Math.min(10_000, preload - done); i++) db.put(`acme|events|${randomUUID()}|4`, doc);
    });
  }
  await root.flushed;
  let n = 0;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const writer = async () => {
    while (performance.now() - t0 < 4000) {
      await root.transaction(() => {
        for (let i = 0; i < per; i++, n++) db.put(`acme|events|${randomUUID()}|4`, doc);
      });
      await root.flushed;
    }
  };
  await Promise.all([writer(), writer()]);
  const c = process.cpuUsage(c0);
  console.log(
    `${preload} keys preloaded, ${per} puts a transaction, pages of ${pageSize} B: ${Math.round(n / 4)} puts/s, CPU ${(c.user / n).toFixed(1)} µs user + ${(c.system / n).toFixed(1)} µs system a put`,
  );
} finally {
  await root.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
