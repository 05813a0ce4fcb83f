/**
 * What a small read of an event document costs the process: `fs.read` through libuv's thread pool
 * one read at a time (as GETs arrive), the same with 32 reads in flight, and `fs.readSync`. The
 * file (64 MB, opened with O_DSYNC like a log segment) is in the page cache, as recently written
 * events are. Prints wall time and CPU (all threads of this process) per read.
 *
 *   node bench/diag/event-log/event-read.mjs [reads=20000] [bytes=400]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const READS = Number(process.argv[2] ?? 20_000);
const BYTES = Number(process.argv[3] ?? 400);
const SIZE = 64 << 20;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-diag-event-read-'));
const file = path.join(dir, 'segment.log');
fs.writeFileSync(file, Buffer.alloc(SIZE, 0x61));
const fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_DSYNC);
const at = (i) => (i * 4096 * 7 + (i % 13) * 97) % (SIZE - BYTES);

const readAsync = (i) =>
  new Promise((resolve, reject) => fs.read(fd, Buffer.allocUnsafe(BYTES), 0, BYTES, at(i), (e, n) => (e ? reject(e) : resolve(n))));

async function measure(label, run) {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await run();
  const wall = ((performance.now() - t0) * 1000) / READS;
  const cpu = process.cpuUsage(cpu0);
  const cpuEach = (cpu.user + cpu.system) / READS;
  console.log(`${label.padEnd(34)} ${wall.toFixed(1).padStart(6)} µs wall, ${cpuEach.toFixed(1).padStart(6)} µs CPU a read`);
  return cpuEach;
}

try {
  console.log(`${READS} reads of ${BYTES} bytes at scattered offsets of a cached ${SIZE >> 20} MB file`);
  const one = await measure('fs.read, one at a time', async () => {
    for (let i = 0; i < READS; i++) await readAsync(i);
  });
  await measure('fs.read, 32 in flight', async () => {
    for (let i = 0; i < READS; i += 32) await Promise.all(Array.from({ length: 32 }, (_, k) => readAsync(i + k)));
  });
  const sync = await measure('fs.readSync', async () => {
    for (let i = 0; i < READS; i++) fs.readSync(fd, Buffer.allocUnsafe(BYTES), 0, BYTES, at(i));
  });
  console.log(`CPU a read, one at a time through the thread pool / readSync: ${(one / sync).toFixed(1)}`);
} finally {
  fs.closeSync(fd);
  fs.rmSync(dir, { recursive: true, force: true });
}
