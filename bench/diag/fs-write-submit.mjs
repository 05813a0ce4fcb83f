/**
 * What handing one write to libuv's thread pool costs the main thread: `fs.writev` of 5 buffers
 * of 450 bytes (a group of PUTs in the embedded event log) and `fs.write` of the same bytes joined,
 * each awaited before the next, to a file opened with O_DSYNC like the log's segments. Prints the
 * mean main-thread time of the call itself (not of the write, which runs on a pool thread).
 *
 *   node bench/diag/fs-write-submit.mjs [writes=20000] [rounds=3] [folder=the temp folder]
 *
 * OTM_DIAG_NO_DSYNC=1 opens the file without O_DSYNC (the write returns before the disk has it).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const count = Number(process.argv[2] ?? 20000);
const rounds = Number(process.argv[3] ?? 3);
const dir = fs.mkdtempSync(path.join(process.argv[4] ?? os.tmpdir(), 'otm-submit-'));
const dsync = process.env.OTM_DIAG_NO_DSYNC === '1' ? 0 : fs.constants.O_DSYNC;
const fd = fs.openSync(path.join(dir, 'log'), fs.constants.O_RDWR | fs.constants.O_CREAT | dsync);
const bufs = Array.from({ length: 5 }, () => Buffer.alloc(450, 1));

async function run(kind) {
  let pos = 0;
  let spent = 0;
  for (let i = 0; i < count; i++) {
    await new Promise((done) => {
      const t0 = performance.now();
      if (kind === 'writev') fs.writev(fd, bufs, pos, done);
      else {
        const b = Buffer.concat(bufs);
        fs.write(fd, b, 0, b.length, pos, done);
      }
      spent += performance.now() - t0;
      pos += 2250;
    });
  }
  return (spent * 1000) / count;
}

try {
  for (let r = 1; r <= rounds; r++) {
    const v = await run('writev');
    const w = await run('write');
    console.log(`round ${r}: fs.writev ${v.toFixed(1)} µs, fs.write ${w.toFixed(1)} µs of main-thread time a call`);
  }
} finally {
  fs.closeSync(fd);
  fs.rmSync(dir, { recursive: true, force: true });
}
