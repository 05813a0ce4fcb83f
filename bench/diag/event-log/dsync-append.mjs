/**
 * What an O_DSYNC write of the event log costs on this disk: appending to a growing file (the log
 * today: each write also changes the file's size, which the sync must make durable) against
 * overwriting a file whose blocks were written and synced before (what preallocated segments
 * would do). Writes of `bytes` (a group of ~50 location events by default), one at a time, in a
 * file of the folder given (default: the temp folder; give one on the data folder's disk).
 *
 *   node bench/diag/event-log/dsync-append.mjs [writes=2000] [bytes=20000] [dir]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const writes = Number(process.argv[2] ?? 2000);
const bytes = Number(process.argv[3] ?? 20000);
const dir = fs.mkdtempSync(path.join(process.argv[4] ?? os.tmpdir(), 'otm-dsync-'));
const buf = Buffer.alloc(bytes, 0x78);

function run(mode) {
  const file = path.join(dir, `${mode}.log`);
  if (mode === 'overwrite') {
    // Written and synced ahead: the blocks exist and the size does not change.
    const fd = fs.openSync(file, 'w');
    const zeros = Buffer.alloc(1 << 20);
    for (let at = 0; at < writes * bytes + zeros.length; at += zeros.length) fs.writeSync(fd, zeros);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
  } else fs.writeFileSync(file, '');
  const fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_DSYNC);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < writes; i++) fs.writeSync(fd, buf, 0, bytes, i * bytes);
  const us = Number(process.hrtime.bigint() - t0) / 1000 / writes;
  fs.closeSync(fd);
  fs.rmSync(file);
  return us;
}

console.log(`${writes} O_DSYNC writes of ${bytes} bytes in ${dir}`);
for (let round = 1; round <= 3; round++) {
  const append = run('append');
  const overwrite = run('overwrite');
  console.log(
    `  round ${round}: append ${append.toFixed(0)} µs a write, overwrite ${overwrite.toFixed(0)} µs (${(overwrite / append).toFixed(2)}×)`,
  );
}
fs.rmSync(dir, { recursive: true, force: true });
