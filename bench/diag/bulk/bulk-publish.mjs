/**
 * The embedded bulk path after the checking thread, alone: `Ingress.bulk` of checked bodies (the
 * bench's bulk bodies, 5,000 location events each, checked by `checkBulk` before the clock starts),
 * the in-process bus, the telemetry worker and the event log with its LMDB index, in one process as
 * `otm serve` composes them, without HTTP and without the checking. Two bodies in flight, as the
 * bench sends them. Prints the process's CPU µs an event (all threads: the event loop, LMDB's
 * writer, libuv's pool, V8's helpers; and split by thread) and events/s, per round on a fresh data
 * folder. After `npm run build`:
 *
 *   node bench/diag/bulk/bulk-publish.mjs [rounds=3] [bodies=40]
 *
 * OTM_DIAG_CPU_PROFILE=<dir> writes a V8 CPU profile of each timed run there (summarise it with
 * `node bench/lib/profile-top.mjs`), OTM_DIAG_HEAP_PROFILE=<dir> a sampling allocation profile
 * (bytes allocated an event by function are printed); with OTM_DIAG_HEAP_SURVIVORS=1 as well, only
 * of the objects that outlived a scavenge: what V8's young-generation collector copies, whose
 * amount sets its cost (the objects of the thousands of events in flight).
 *
 * OTM_DIAG_STORE_ONLY=1 times the event store alone instead: the same events, as the writes the
 * worker would make of them, handed straight to the event store's `write` (two in flight), so the
 * share of `Ingress.bulk`, the bus and the worker is the difference between the two.
 */
import fs from 'node:fs';
import inspector from 'node:inspector/promises';
import os from 'node:os';
import path from 'node:path';
import { openAdapters } from '../../../services/otm/dist/adapters.js';
import { GROUPS } from '../../../services/otm/dist/service.js';
import { Ingress, checkBulk } from '../../../services/ingress/dist/index.js';
import { telemetryWorker, toWrite } from '../../../services/worker/dist/index.js';
import { TOPICS, createLogger } from '../../../packages/core/dist/index.js';
import { precompile } from '../../../packages/model/dist/index.js';
import { locationBodies } from '../../lib/documents.mjs';

const ROUNDS = Number(process.argv[2] ?? 3);
const BODIES = Number(process.argv[3] ?? 40);
const PER_BODY = 5_000;
const WARMUP_BODIES = 4;
const cpuDir = process.env.OTM_DIAG_CPU_PROFILE;
const heapDir = process.env.OTM_DIAG_HEAP_PROFILE;
const storeOnly = process.env.OTM_DIAG_STORE_ONLY === '1';

precompile();
const session = new inspector.Session();
session.connect();
const logger = createLogger('warn');
const docs = locationBodies();

/**
 * CPU clock ticks (10 ms on Linux) of each thread (/proc/self/task), named: `main` (the event loop),
 * `node` (libuv's pool, where LMDB commits and the log is written, and V8's helpers), others.
 */
function threadTimes() {
  const out = new Map();
  for (const t of fs.readdirSync('/proc/self/task')) {
    try {
      const stat = fs.readFileSync(`/proc/self/task/${t}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(t, { name: t === String(process.pid) ? 'main' : name, ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      /* ended */
    }
  }
  return out;
}

/** µs of CPU an event by thread name since `before` (whole ticks: coarser than the process's total). */
function threadsSince(before, n) {
  const tick = 1_000_000 / 100;
  const sums = new Map();
  for (const [t, { name, ticks }] of threadTimes()) {
    const d = ticks - (before.get(t)?.ticks ?? 0);
    if (d > 0) sums.set(name, (sums.get(name) ?? 0) + d);
  }
  return [...sums]
    .sort((a, b) => b[1] - a[1])
    .map(([name, d]) => `${name} ${((d * tick) / n).toFixed(2)}`)
    .join(', ');
}

/** Bytes allocated an event by the functions that allocated most, from a sampling heap profile. */
function allocationsByFunction(profile, events) {
  const bytes = new Map();
  const walk = (node) => {
    const f = node.callFrame;
    const name = `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
    bytes.set(name, (bytes.get(name) ?? 0) + node.selfSize);
    for (const c of node.children) walk(c);
  };
  walk(profile.head);
  const total = [...bytes.values()].reduce((a, b) => a + b, 0);
  const top = [...bytes].sort((a, b) => b[1] - a[1]).slice(0, 12);
  return [
    `  allocated ${Math.round(total / events)} B an event (sampled), by function:`,
    ...top.map(([k, v]) => `    ${String(Math.round(v / events)).padStart(5)} B  ${k}`),
  ].join('\n');
}

for (let round = 1; round <= ROUNDS; round++) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-diag-bulk-publish-'));
  const adapters = openAdapters({ dataDir, bus: 'memory', entityStore: 'embedded', eventStore: 'embedded', kafkaBrokers: [] }, logger);
  const { bus, entities, events } = adapters;
  // As services/otm/src/service.ts subscribes the in-process telemetry worker.
  const sub = await bus.subscribe(TOPICS.telemetry, GROUPS.telemetry, telemetryWorker(events, { logger }, { maxDelayMs: 0 }), {
    concurrency: 1,
    fetchAhead: true,
    pipeline: events.appliesInCallOrder ? 64 : 1,
  });
  try {
    const ingress = new Ingress({ bus, readers: { entities, events } });
    const checked = [];
    for (let b = 0; b < WARMUP_BODIES + BODIES; b++) {
      const body = Buffer.from(`[${Array.from({ length: PER_BODY }, () => docs.next()).join(',')}]`);
      const r = checkBulk({ body, format: 'json', kind: 'events', maxDepth: 64, maxItems: 10_000 });
      if (!r.ok || r.rejected.length > 0) throw new Error('a bench body was refused');
      checked.push(r);
    }
    for (let b = 0; b < WARMUP_BODIES; b++) await ingress.bulk('acme', 'events', checked[b], false);
    // For OTM_DIAG_STORE_ONLY: each body's events as the worker's writes, made before the clock.
    const writesOf = [];
    if (storeOnly) {
      const capture = new Ingress({
        bus: { publish: async (envelopes) => void writesOf.push(envelopes.map(toWrite)) },
        readers: { entities, events },
      });
      for (const c of checked) await capture.bulk('acme', 'events', c, false);
    }
    if (cpuDir) {
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
    }
    if (heapDir) {
      await session.post('HeapProfiler.enable');
      // OTM_DIAG_HEAP_SURVIVORS=1: only what outlived a scavenge (what the collector copies).
      const survivors = process.env.OTM_DIAG_HEAP_SURVIVORS === '1';
      await session.post('HeapProfiler.startSampling', {
        samplingInterval: 4096,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: !survivors,
      });
    }
    const n = BODIES * PER_BODY;
    const threads0 = threadTimes();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    let next = WARMUP_BODIES;
    const sender = async () => {
      while (next < checked.length) {
        if (storeOnly) {
          await events.write(writesOf[next++]);
          continue;
        }
        const result = await ingress.bulk('acme', 'events', checked[next++], false);
        if (result.errors.size > 0) throw new Error('a checked event was not accepted');
      }
    };
    await Promise.all([sender(), sender()]);
    // The event log's index commit (with the lists, track, feed entries and positions) follows the
    // answers by up to 50 ms: its cost is part of an event's.
    await events.settled?.();
    const wall = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const byThread = threadsSince(threads0, n);
    console.log(
      `round ${round}${storeOnly ? ' (event store alone)' : ''}: ${((cpu.user + cpu.system) / n).toFixed(2)} µs of CPU an event (whole process), ${Math.round((n * 1000) / wall).toLocaleString('en-US')} events/s; by thread: ${byThread}`,
    );
    if (heapDir) {
      const { profile } = await session.post('HeapProfiler.stopSampling');
      fs.mkdirSync(heapDir, { recursive: true });
      fs.writeFileSync(path.join(heapDir, `bulk-publish-${round}.heapprofile`), JSON.stringify(profile));
      console.log(allocationsByFunction(profile, n));
    }
    if (cpuDir) {
      const { profile } = await session.post('Profiler.stop');
      fs.mkdirSync(cpuDir, { recursive: true });
      const file = path.join(cpuDir, `bulk-publish-${round}.cpuprofile`);
      fs.writeFileSync(file, JSON.stringify(profile));
      console.log(`  cpu profile: ${file}`);
    }
  } finally {
    await sub.close();
    await adapters.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}
session.disconnect();
