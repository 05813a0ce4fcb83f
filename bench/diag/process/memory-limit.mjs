/**
 * The embedded PUT scenario of `npm run bench` (location events, a new id each, 50 connections)
 * against `otm serve` twice: once as is, once inside a memory cgroup limited to LIMIT MB, the way a
 * container memory limit (`docker run -m`, a Kubernetes `limits.memory`) runs it. Prints for each:
 * requests/s, answers that were not 2xx, the peak resident set (VmHWM) split into the LMDB file's
 * mapped pages and anonymous memory, what the cgroup charged at most, how often it hit the limit,
 * whether the kernel killed anything, and a read-back of a sample of the acknowledged events.
 *
 * What it shows (docs/deployment.md; the bench's memory row): the resident set beyond the service's own
 * (anonymous) memory is the database file's page cache, which the kernel takes back when a limit
 * asks for it, without errors and without losing acknowledged writes.
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/process/memory-limit.mjs [limitMB=300] [seconds=20]
 *
 * Needs root and a writable cgroup memory controller (v1 /sys/fs/cgroup/memory or v2
 * /sys/fs/cgroup); says so and stops otherwise. Loopback only.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startServe, stop } from '../../../test/process.ts';
import { locationBodies } from '../../lib/documents.mjs';
import { fmt, load, mappedMB, memoryOf, mkTemp, request } from '../../lib/util.mjs';

const LIMIT_MB = Number(process.argv[2] ?? 300);
const SECONDS = Number(process.argv[3] ?? 20);
const TOKEN = 'memory-limit-diag-token';
const SAMPLE = 2_000;

/** The memory cgroup this process is in, and how to make a child cgroup with a limit. */
function cgroupSetup() {
  const lines = fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n');
  const v1 = lines.map((l) => l.split(':')).find(([, ctrl]) => ctrl.split(',').includes('memory'));
  if (v1 && fs.existsSync('/sys/fs/cgroup/memory')) {
    const here = path.join('/sys/fs/cgroup/memory', v1[2]);
    return {
      version: 1,
      here,
      limitFile: 'memory.limit_in_bytes',
      read(dir) {
        const num = (f) => Number(fs.readFileSync(path.join(dir, f), 'utf8'));
        const oom = /oom_kill (\d+)/.exec(fs.readFileSync(path.join(dir, 'memory.oom_control'), 'utf8'));
        return { peakMB: num('memory.max_usage_in_bytes') / 2 ** 20, limitHits: num('memory.failcnt'), oomKills: oom ? Number(oom[1]) : 0 };
      },
    };
  }
  const v2 = lines.find((l) => l.startsWith('0::'));
  if (v2 && fs.existsSync('/sys/fs/cgroup/cgroup.controllers')) {
    const here = path.join('/sys/fs/cgroup', v2.slice(3));
    return {
      version: 2,
      here,
      limitFile: 'memory.max',
      read(dir) {
        const events = fs.readFileSync(path.join(dir, 'memory.events'), 'utf8');
        const ev = (k) => Number(new RegExp(`^${k} (\\d+)`, 'm').exec(events)?.[1] ?? 0);
        const peak = path.join(dir, 'memory.peak');
        return {
          peakMB: fs.existsSync(peak) ? Number(fs.readFileSync(peak, 'utf8')) / 2 ** 20 : NaN,
          limitHits: ev('max'),
          oomKills: ev('oom_kill'),
        };
      },
    };
  }
  return undefined;
}

async function scenario(label, cg) {
  const dataDir = mkTemp('otm-memory-limit-');
  const env = { OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:t1:read+write` };
  let cgDir;
  let started;
  if (cg) {
    // The service is started from inside the limited cgroup (a child stays in its parent's), then
    // this process moves back: only the service's memory is charged to the limit.
    cgDir = path.join(cg.here, `otm-memory-limit-${process.pid}`);
    fs.mkdirSync(cgDir);
    fs.writeFileSync(path.join(cgDir, cg.limitFile), String(LIMIT_MB * 2 ** 20));
    fs.writeFileSync(path.join(cgDir, 'cgroup.procs'), String(process.pid));
    try {
      started = startServe(env); // spawns before its first await
    } finally {
      fs.writeFileSync(path.join(cg.here, 'cgroup.procs'), String(process.pid));
    }
  } else {
    started = startServe(env);
  }
  const svc = await started;
  try {
    const { ids, next, sent } = locationBodies();
    const url = svc.url;
    const put = (duration) => load({ url, method: 'PUT', path: '/api/v5/events', token: TOKEN, bodyFn: next, connections: 50, duration });
    await put(3);
    const r = await put(SECONDS);
    const mem = memoryOf(svc.child.pid);
    const lmdbMB = mappedMB(svc.child.pid, path.join(dataDir, 'store', 'otm.mdb'));
    // Every request was answered 2xx (checked below), so every id sent is acknowledged: read a sample back.
    let missing = 0;
    for (let k = 0; k < SAMPLE; k++) {
      const n = Math.floor(Math.random() * sent());
      const got = await request(`${url}/api/v5/events/${ids.at(n)}`, { token: TOKEN });
      if (got.status !== 200 || JSON.parse(got.body).id !== ids.at(n)) missing++;
    }
    const c = cg ? cg.read(cgDir) : undefined;
    console.log(
      `${label}: ${fmt(r.rps, 0)} PUT/s, ${fmt(sent(), 0)} events, non-2xx ${r.non2xx}, errors ${r.errors}, p99 ${r.p99} ms; ` +
        `VmHWM ${fmt(mem.hwmMB, 0)} MB (now: mapped LMDB file ${fmt(lmdbMB, 0)} MB, anonymous ${fmt(mem.anonMB, 0)} MB, file-backed ${fmt(mem.fileMB, 0)} MB)` +
        (c
          ? `; cgroup v${cg.version}: peak charge ${fmt(c.peakMB, 0)} MB of ${LIMIT_MB}, limit reached ${fmt(c.limitHits, 0)} times, OOM kills ${c.oomKills}`
          : '') +
        `; ${SAMPLE} acknowledged events read back, ${missing} missing`,
    );
    return { ...r, mem, lmdbMB, cgroup: c, missing };
  } finally {
    await stop(svc);
    fs.rmSync(dataDir, { recursive: true, force: true });
    if (cgDir) fs.rmdirSync(cgDir);
  }
}

const cg = cgroupSetup();
if (!cg || process.getuid?.() !== 0) {
  console.log('needs root and a writable cgroup memory controller (v1 /sys/fs/cgroup/memory or v2 /sys/fs/cgroup): not run');
  process.exit(0);
}
await scenario('no limit      ');
await scenario(`limit ${LIMIT_MB} MB  `, cg);
