/**
 * Embedded bulk ingest with bulk bodies checked on the event loop (OTM_BULK_THREADS=0) and on
 * worker threads (1, 2): the bench's bulk scenario (200,000 location events in JSON arrays of
 * 5,000, 2 requests in flight, then every vehicle's last event of every batch polled by GET) run
 * against a fresh `otm serve` for each setting, in alternated rounds, printing events/s visible
 * and answered, the CPU the service's main thread and its other threads used (also thread by thread:
 * the checking thread, V8's helper threads and libuv's pool are each a `node#<tid>` with no name of
 * their own in /proc), and this script's own (the load generator's: it shares the cores), the
 * service's peak RSS, and how long the probe GETs took after the last answer.
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/bulk/bulk-threads.mjs [rounds=2] [events=200000] [settings=0,1,2] [inFlight=2]
 *
 * OTM_CHILD_NODE_ARGS=--trace-gc also prints the collections of the timed run (count and pauses, on
 * the event loop and on the checking threads); other node flags go there too.
 *
 * OTM_DIAG_BULK_WARMUP=N first sends N events (and probes them) to the same service, untimed, in
 * batches of OTM_DIAG_BULK_WARMUP_BATCH (default 500, a tenth of the timed run's, as `npm run
 * bench` does with 20,000 before its timed bulk run); without it the service is measured cold.
 *
 * Loopback only.
 */
import fs from 'node:fs';
import { startServe, stop } from '../../../test/process.ts';
import { bulkEndToEnd } from '../../lib/bulk.mjs';
import { cpuSeconds } from '../../lib/proc.mjs';
import { fmt, mkTemp } from '../../lib/util.mjs';

const ROUNDS = Number(process.argv[2] ?? 2);
const EVENTS = Number(process.argv[3] ?? 200_000);
const SETTINGS = (process.argv[4] ?? '0,1,2').split(',').map(Number);
/** Bulk requests in flight (the bench sends 2). */
const IN_FLIGHT = Number(process.argv[5] ?? 2);
const TOKEN = 'bulk-threads-diag-token';

/**
 * CPU seconds of each thread of the process: `event loop` for the main thread, `node#<tid>` for
 * the others (the checking threads, V8's helper threads and libuv's pool all bear the name `node`
 * in /proc, so they are told apart by id).
 */
function cpu(pid) {
  const threads = {};
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const { user, sys } = cpuSeconds(`/proc/${pid}/task/${tid}/stat`);
      threads[tid === String(pid) ? 'event loop' : `node#${tid}`] = user + sys;
    } catch {
      // the thread ended meanwhile
    }
  }
  return threads;
}
const sum = (threads) => Object.values(threads).reduce((a, b) => a + b, 0);

/** µs an event by thread, largest first, of those that used at least 0.1 µs. */
function byThread(before, after) {
  return Object.entries(after)
    .map(([name, s]) => [name, ((s - (before[name] ?? 0)) * 1e6) / EVENTS])
    .filter(([, us]) => us >= 0.1)
    .sort((a, b) => b[1] - a[1])
    .map(([name, us]) => `${name} ${us.toFixed(1)}`)
    .join(', ');
}

/**
 * With `--trace-gc` in OTM_CHILD_NODE_ARGS, the service prints each collection: how many of each
 * kind the timed run had, and their pauses, for the event loop (the isolate whose collections start
 * the log: it runs before any thread exists) and for the checking threads together.
 */
function gcSummary(log, timed) {
  const isolates = [...new Set([...log.matchAll(/\[\d+:(0x[0-9a-f]+)\]/g)].map((m) => m[1]))];
  const sum = {};
  for (const m of timed.matchAll(/\[\d+:(0x[0-9a-f]+)\]\s+\d+ ms: (Scavenge|Mark-Compact)[^,]*, ([\d.]+) \/ [\d.]+ ms/g)) {
    const k = `${m[1] === isolates[0] ? 'event loop' : 'threads'} ${m[2]}`;
    sum[k] ??= { n: 0, ms: 0 };
    sum[k].n++;
    sum[k].ms += Number(m[3]);
  }
  return Object.entries(sum)
    .map(([k, v]) => `${k}: ${v.n}, ${v.ms.toFixed(0)} ms paused`)
    .join('; ');
}
const traceGc = /(^|\s)--trace-gc(\s|$)/.test(process.env.OTM_CHILD_NODE_ARGS ?? '');

const results = new Map(SETTINGS.map((s) => [s, []]));
for (let round = 1; round <= ROUNDS; round++) {
  for (const threads of SETTINGS) {
    const dataDir = mkTemp('otm-diag-bulk-threads-');
    const svc = await startServe({
      OTM_DATA_DIR: dataDir,
      OTM_TOKENS: `${TOKEN}:acme:read+write`,
      LOG_LEVEL: 'warn',
      OTM_BULK_THREADS: String(threads),
    });
    try {
      const warmup = Number(process.env.OTM_DIAG_BULK_WARMUP ?? 0);
      const warmupBatch = Number(process.env.OTM_DIAG_BULK_WARMUP_BATCH ?? 500);
      if (warmup > 0)
        await bulkEndToEnd({
          writeUrl: svc.url,
          readUrl: svc.url,
          token: TOKEN,
          n: warmup,
          batch: warmupBatch,
          concurrency: IN_FLIGHT,
          visibleTimeoutS: 120,
        });
      const before = cpu(svc.child.pid);
      const logFrom = svc.stdout().length;
      const r = await bulkEndToEnd({
        writeUrl: svc.url,
        readUrl: svc.url,
        token: TOKEN,
        n: EVENTS,
        batch: 5_000,
        concurrency: IN_FLIGHT,
        visibleTimeoutS: 120,
        cpuOf: {},
      });
      const after = cpu(svc.child.pid);
      const gc = traceGc ? gcSummary(svc.stdout(), svc.stdout().slice(logFrom)) : undefined;
      const hwm = Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync(`/proc/${svc.child.pid}/status`, 'utf8'))[1]) / 1024;
      if (r.invisible) throw new Error(`${r.invisible} probe events not visible`);
      const perEvent = (s) => (s * 1e6) / EVENTS;
      const row = {
        visible: r.rate,
        answered: r.answeredRate,
        mainUs: perEvent(after['event loop'] - before['event loop']),
        allUs: perEvent(sum(after) - sum(before)),
        clientUs: perEvent(r.cpu['load generator']),
        hwm,
      };
      results.get(threads).push(row);
      console.log(
        `round ${round}, OTM_BULK_THREADS=${threads}: ${fmt(row.visible)} events/s visible, ${fmt(row.answered)} answered; ` +
          `CPU an event: main thread ${row.mainUs.toFixed(1)} µs, whole service ${row.allUs.toFixed(1)} µs, this client ${row.clientUs.toFixed(1)} µs; peak RSS ${hwm.toFixed(0)} MB`,
      );
      console.log(`  CPU µs an event by thread: ${byThread(before, after)}`);
      // From the last answer until every probe was found: the probe GETs (all answered events are
      // visible at once in the embedded service), a part of the time the visible rate counts.
      const tailMs = (r.seconds - EVENTS / r.answeredRate) * 1000;
      console.log(
        `  answered → all visible: ${tailMs.toFixed(0)} ms of ${(r.seconds * 1000).toFixed(0)} (${r.probeCount} probe GETs, ${((tailMs * 1000) / r.probeCount).toFixed(0)} µs each)`,
      );
      if (gc !== undefined) console.log(`  collections during the timed run: ${gc}`);
    } finally {
      await stop(svc);
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const base = median(results.get(SETTINGS[0]).map((r) => r.visible));
console.log(`\nmedian events/s visible (ratio to OTM_BULK_THREADS=${SETTINGS[0]}, same run):`);
for (const [threads, rows] of results) {
  const m = median(rows.map((r) => r.visible));
  console.log(
    `  OTM_BULK_THREADS=${threads}: ${fmt(m)} (${(m / base).toFixed(2)}); main thread ${median(rows.map((r) => r.mainUs)).toFixed(1)} µs an event, whole service ${median(rows.map((r) => r.allUs)).toFixed(1)} µs`,
  );
}
