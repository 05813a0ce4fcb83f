/**
 * Ways to write the embedded event store (docs/PERFORMANCE.md): writes the bench's location
 * events (sequential ids, like `npm run bench`) in groups of 24, each committed and flushed like
 * the service does, from two concurrent writers, and prints the database file's size, the pages of
 * it mapped into the process (RssFile of /proc/self/status grows with them), CPU per put (whole
 * process, and the main thread alone) and the time of a point read. Ways:
 * - `transaction`: the puts inside `root.transaction(callback)`: lmdb runs the callback on the
 *   main thread with the write transaction open, so the B-tree work is done there;
 * - `async puts`: plain `db.put` calls, which lmdb queues and its write thread applies (puts of
 *   one event-loop turn share a transaction);
 * - either with LZ4 compression of the values (lmdb's `compression`, default dictionary);
 * - plain puts with lmdb's `remapChunks` (the file mapped in chunks, which its README says
 *   "frees up more mapped memory").
 *
 *   node bench/diag/lmdb-event-writes.mjs [events=200000] [threshold=64] [group=24]
 *
 * (group: puts per write; the bench's bulk ingest writes 5,000 at a time.)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { open } from 'lmdb';
import { locationEvent } from '../lib/documents.mjs';
import { cpuSeconds } from '../lib/proc.mjs';
import { idMaker } from '../lib/util.mjs';

const events = Number(process.argv[2] ?? 200_000);
const threshold = Number(process.argv[3] ?? 64);
const PER_TXN = Number(process.argv[4] ?? 24);

const statusKb = (field) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(fs.readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0);
/** CPU µs of the main thread (its task id is the process id). */
const threadCpuUs = () => {
  const { user, sys } = cpuSeconds(`/proc/self/task/${process.pid}/stat`);
  return (user + sys) * 1e6;
};

async function run(label, compression, asyncPuts, remapChunks = false) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-diag-event-writes-'));
  const file = path.join(dir, 'otm.mdb');
  const root = open({ path: file, maxDbs: 8, compression: false, remapChunks });
  const db = root.openDB({ name: 'telemetry', encoding: 'string', compression });
  const ids = idMaker();
  const rssFile0 = statusKb('RssFile');
  const c0 = process.cpuUsage();
  const m0 = threadCpuUs();
  const t0 = performance.now();
  let bytes = 0;
  try {
    // Two writers, like concurrent requests sharing the event loop.
    let next = 0;
    const writer = async () => {
      while (next < events) {
        const group = [];
        for (let i = 0; i < PER_TXN && next < events; i++, next++) group.push([`acme|events|${ids.at(next)}|4`, locationEvent(ids.at(next), next)]);
        for (const [, doc] of group) bytes += doc.length;
        if (asyncPuts) await Promise.all(group.map(([k, doc]) => db.put(k, doc)));
        else
          await root.transaction(() => {
            for (const [k, doc] of group) db.put(k, doc);
          });
        await root.flushed;
      }
    };
    await Promise.all([writer(), writer()]);
    const wall = performance.now() - t0;
    const c = process.cpuUsage(c0);
    const main = threadCpuUs() - m0;
    const size = fs.statSync(file).size;
    const mapped = statusKb('RssFile') - rssFile0;
    const r0 = performance.now();
    const reads = 20_000;
    for (let i = 0; i < reads; i++) {
      const k = Math.floor(Math.random() * events);
      if (db.get(`acme|events|${ids.at(k)}|4`)?.length !== locationEvent(ids.at(k), k).length) throw new Error(`read back ${k} differs`);
    }
    const readUs = ((performance.now() - r0) * 1000) / reads;
    console.log(
      `${label.padEnd(28)} ${events} events (${(bytes / events).toFixed(0)} B each, ${PER_TXN} a write): file ${(size / 1e6).toFixed(0)} MB, ` +
        `RssFile +${(mapped / 1024).toFixed(0)} MB, ${Math.round(events / (wall / 1000))} puts/s, ` +
        `CPU ${((c.user + c.system) / events).toFixed(1)} µs a put (main thread ${(main / events).toFixed(1)}), ` +
        `read ${readUs.toFixed(2)} µs (incl. making the expected doc)`,
    );
  } finally {
    await root.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await run('transaction', false, false);
await run('async puts', false, true);
await run(`transaction, LZ4 >${threshold} B`, { threshold }, false);
await run(`async puts, LZ4 >${threshold} B`, { threshold }, true);
await run('async puts, remapChunks', false, true, true);
