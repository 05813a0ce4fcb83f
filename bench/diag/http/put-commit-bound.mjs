/**
 * What bounds the embedded PUT scenario: runs the bench's
 * PUT load (location events, a new id each, 50 connections) against `otm serve` with its data
 * folder on the disk (the temp folder) and on /dev/shm (tmpfs: a flush to disk costs nothing
 * there), and prints for each: PUT/s, latency, how busy the service's main thread and its other
 * threads were (CPU time from /proc/<pid>/task), and how idle the machine was (/proc/stat).
 * A main thread well below 100 % with idle cores left means the requests wait, here for their
 * durable commit, rather than for CPU. Where `perf` can read syscall tracepoints (root), it also
 * counts the service's `fdatasync` calls (LMDB's flushes to disk) during the measured run; the
 * counting slows the service, and OTM_DIAG_NO_PERF=1 leaves it out.
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/http/put-commit-bound.mjs [seconds=10] [rounds=2]
 *
 * Loopback only; the load generator runs in this process, as in `npm run bench`.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { startServe, stop } from '../../../test/process.ts';
import { locationBodies } from '../../lib/documents.mjs';
import { cpuSeconds } from '../../lib/proc.mjs';
import { load, mkTemp } from '../../lib/util.mjs';

const SECONDS = Number(process.argv[2] ?? 10);
const ROUNDS = Number(process.argv[3] ?? 2);
const TOKEN = 'commit-bound-diag-token';
/** CPU µs of each thread of `pid`: Map(tid -> µs). */
function threadCpu(pid) {
  const out = new Map();
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const { user, sys } = cpuSeconds(`/proc/${pid}/task/${tid}/stat`);
      out.set(tid, (user + sys) * 1e6);
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/** Idle and total jiffies of the whole machine. */
function machineCpu() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return { idle: f[3] + f[4], total: f.reduce((a, b) => a + b, 0) };
}

const HAVE_PERF =
  !process.env.OTM_DIAG_NO_PERF &&
  spawnSync('perf', ['stat', '-e', 'syscalls:sys_enter_fdatasync', '--', 'true'], { stdio: 'ignore' }).status === 0;

/** The event log's writes and records so far, from the service's /metrics. */
async function logCounts(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { writes: value('otm_event_log_writes_total'), records: value('otm_event_log_records_total') };
}

/** Counts the fdatasync calls of `pid` for `seconds` with perf; resolves undefined without perf. */
function countSyncs(pid, seconds) {
  if (!HAVE_PERF) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const p = spawn('perf', ['stat', '-x', ',', '-e', 'syscalls:sys_enter_fdatasync', '-p', String(pid), '--', 'sleep', String(seconds)], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    p.on('close', () => {
      const n = Number(/^(\d+),/m.exec(err)?.[1]);
      resolve(Number.isFinite(n) ? n / seconds : undefined);
    });
  });
}

async function measure(label, base) {
  const dataDir = fs.mkdtempSync(`${base}/otm-commit-bound-`);
  const svc = await startServe({ OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:t1:read+write` });
  try {
    const bodies = locationBodies();
    const run = (duration) =>
      load({ url: svc.url, method: 'PUT', path: '/api/v5/events', token: TOKEN, bodyFn: bodies.next, connections: 50, duration });
    await run(3);
    const pid = svc.child.pid;
    const t0 = threadCpu(pid);
    const m0 = machineCpu();
    const l0 = await logCounts(svc.url);
    const w0 = performance.now();
    const syncWindow = Math.max(1, SECONDS - 2);
    const [r, syncsPerS] = await Promise.all([run(SECONDS), countSyncs(pid, syncWindow)]);
    const wallUs = (performance.now() - w0) * 1000;
    const t1 = threadCpu(pid);
    const m1 = machineCpu();
    const l1 = await logCounts(svc.url);
    const writes = l1.writes - l0.writes;
    let main = 0;
    let others = 0;
    for (const [tid, us] of t1) {
      const d = us - (t0.get(tid) ?? 0);
      if (tid === String(pid)) main += d;
      else others += d;
    }
    const idle = (m1.idle - m0.idle) / (m1.total - m0.total);
    const pct = (x) => `${Math.round(x * 100)} %`;
    console.log(
      `${label.padEnd(22)} ${Math.round(r.rps).toLocaleString('en-US')} PUT/s, p50 ${r.p50} ms, p99 ${r.p99} ms, non-2xx ${r.non2xx}, errors ${r.errors}; ` +
        `service main thread ${pct(main / wallUs)} of a core, its other threads ${pct(others / wallUs)}; machine idle ${pct(idle)} of ${os.cpus().length} cores; ` +
        `${Math.round(writes / (wallUs / 1e6)).toLocaleString('en-US')} log writes/s, ${((l1.records - l0.records) / writes).toFixed(1)} records a write` +
        (syncsPerS === undefined ? '' : `; ${Math.round(syncsPerS)} fdatasync/s, ${(r.rps / syncsPerS).toFixed(1)} PUTs a flush`),
    );
  } finally {
    await stop(svc);
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

if (!fs.existsSync('/dev/shm')) {
  console.log('no /dev/shm here: not run');
  process.exit(0);
}
const disk = mkTemp('otm-commit-bound-base-');
try {
  for (let round = 1; round <= ROUNDS; round++) {
    await measure(`round ${round}, disk`, disk);
    await measure(`round ${round}, /dev/shm`, '/dev/shm');
  }
} finally {
  fs.rmSync(disk, { recursive: true, force: true });
}
