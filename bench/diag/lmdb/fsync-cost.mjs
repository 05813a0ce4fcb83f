/**
 * What one durable commit costs on this machine's disk, in the three kinds of synchronous write an
 * LMDB commit makes: an `fdatasync` after appending 8 KB
 * (the file grows, so its size must reach the disk too), an `fdatasync` after overwriting 8 KB of a
 * file already written (data only), and a 4 KB write on a descriptor opened with O_DSYNC (LMDB's
 * meta page). Prints the mean of each over `count` writes, for `rounds` rounds.
 *
 *   node bench/diag/lmdb/fsync-cost.mjs [count=1500] [rounds=2] [folder=the temp folder]
 *
 * Writes ~2 × count × 8 KB into a temporary folder, removed at the end.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const count = Number(process.argv[2] ?? 1500);
const rounds = Number(process.argv[3] ?? 2);
const dir = fs.mkdtempSync(path.join(process.argv[4] ?? os.tmpdir(), 'otm-fsync-'));
const data = Buffer.alloc(8192, 7);
const page = Buffer.alloc(4096, 3);

const micros = (f) => {
  const t0 = process.hrtime.bigint();
  f();
  return Number(process.hrtime.bigint() - t0) / 1e3;
};
const mean = (xs) => Math.round(xs.reduce((a, b) => a + b, 0) / xs.length);

try {
  console.log(`${count} writes a kind, ${dir}`);
  for (let round = 1; round <= rounds; round++) {
    const grow = path.join(dir, 'grow.bin');
    let fd = fs.openSync(grow, 'w');
    const appended = [];
    for (let i = 0; i < count; i++) {
      fs.writeSync(fd, data, 0, data.length, i * data.length);
      appended.push(micros(() => fs.fdatasyncSync(fd)));
    }
    fs.closeSync(fd);

    const fixed = path.join(dir, 'fixed.bin');
    fd = fs.openSync(fixed, 'w');
    fs.writeSync(fd, Buffer.alloc(count * data.length));
    fs.fsyncSync(fd);
    const overwritten = [];
    for (let i = 0; i < count; i++) {
      fs.writeSync(fd, data, 0, data.length, i * data.length);
      overwritten.push(micros(() => fs.fdatasyncSync(fd)));
    }
    fs.closeSync(fd);

    fd = fs.openSync(fixed, fs.constants.O_WRONLY | fs.constants.O_DSYNC);
    const dsync = [];
    for (let i = 0; i < count; i++) dsync.push(micros(() => fs.writeSync(fd, page, 0, page.length, 0)));
    fs.closeSync(fd);

    console.log(
      `round ${round}: append 8 KB + fdatasync ${mean(appended)} µs, overwrite 8 KB + fdatasync ${mean(overwritten)} µs, 4 KB O_DSYNC write ${mean(dsync)} µs`,
    );
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
