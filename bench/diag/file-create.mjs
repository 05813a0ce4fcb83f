/**
 * Why the test ClickHouse keeps its data on tmpfs (test/infra/README.md): the time to create,
 * write and close a small file in the temporary folder and in /dev/shm.
 *
 *   node bench/diag/file-create.mjs [files=1000]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const n = Number(process.argv[2] ?? 1000);
for (const base of [os.tmpdir(), '/dev/shm']) {
  let dir;
  try {
    dir = fs.mkdtempSync(path.join(base, 'otm-diag-files-'));
  } catch {
    console.log(`${base}: not writable here`);
    continue;
  }
  const t = performance.now();
  for (let i = 0; i < n; i++) fs.writeFileSync(path.join(dir, `f${i}`), 'x'.repeat(100));
  console.log(`${base}: ${(((performance.now() - t) * 1000) / n).toFixed(1)} µs to create, write and close a file`);
  fs.rmSync(dir, { recursive: true, force: true });
}
