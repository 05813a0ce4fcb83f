/**
 * The benchmark harness: every scenario against the real service on loopback, each next to a
 * baseline measured in the same run, one table, results as JSON. See docs/PERFORMANCE.md.
 *
 *   npm run bench                       full run (builds first)
 *   npm run bench -- --quick            smoke run, a few minutes
 *   npm run bench -- --only embedded    groups: validate, embedded, bulk, growth, find, activity, push, distributed, lag, track
 *   npm run bench -- --only soak        the soak (10 min a deployment), only when asked: not in the full run
 *   npm run bench -- --only soak --soak-minutes 3 --soak-period 30 --soak-warmup 30 --soak-rate 200 --soak-deployments embedded
 *   npm run bench -- --duration 30 --warmup 5 --connections 50
 *   npm run bench -- --only bulk --bulk-threads 0   OTM_BULK_THREADS for every service started (A/B runs)
 *   npm run bench -- --only distributed --service-env KAFKA_LINGER_MS=1   any setting, for every service
 *   npm run bench:lag                   visibility lag of the distributed deployment (p50, p99)
 *   npm run bench:profile               embedded PUT scenario with the service under --cpu-prof
 *   npm run bench:profile -- --profile-scenario get-trip    (put-event, put-trip, get-trip, bulk)
 *
 * Other options: `--bulk-events N` and `--bulk-events-distributed N` (events in the bulk
 * scenarios), `--growth-large N` and `--growth-budget S` (entities preloaded for the growth
 * scenario and the longest preload allowed), `--track-large N` (ClickHouse rows for the track
 * query), `--lag-duration S`, `--visible-timeout S`, `--bulk-threads N` (`OTM_BULK_THREADS` for
 * every service started), `--service-env NAME=VALUE[,…]` (any setting of docs/configuration.md for
 * every service and role started, for A/B runs; written in the results' `settings.serviceEnv`).
 * The `otm` processes the bench starts get only the environment it gives them:
 * `OTM_CHILD_NODE_OPTIONS` becomes their `NODE_OPTIONS` (e.g. `--perf-basic-prof` for `perf record
 * -e cpu-clock -g -p <pid>`, or `--require $PWD/bench/lib/profile-on-signal.cjs` so that `kill
 * -USR2 <pid>` starts and stops a V8 CPU profile of one role), and `OTM_CHILD_NODE_ARGS` carries
 * node flags `NODE_OPTIONS` refuses. `node bench/lib/profile-top.mjs <file.cpuprofile> [n]
 * [--inclusive]` summarises any V8 profile.
 *
 * This file reads the options, starts the fastify echo (the HTTP baseline), runs the selected
 * groups of bench/scenarios/ in a fixed order, and prints and writes the results: the table, the
 * CPU by process of each scenario that measured it, and the cores per process for given rates of
 * location events (bench/lib/capacity.mjs).
 *
 * Run with `node --import ./bench/lib/register-ts.mjs bench/run.mjs` (the npm scripts do): that
 * hook lets the scenarios import the repository's TypeScript test helpers in place.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HEADROOM, RATES, capacityLines, sizingLines } from './lib/capacity.mjs';
import { locationBodies } from './lib/documents.mjs';
import { cpuMeter } from './lib/proc.mjs';
import { startBaseline, load, judge, printTable, REPO, fmt, log } from './lib/util.mjs';
import { activity } from './scenarios/activity.mjs';
import { bulkDistributed, bulkEmbedded } from './scenarios/bulk.mjs';
import { distributed } from './scenarios/distributed.mjs';
import { embedded } from './scenarios/embedded.mjs';
import { find } from './scenarios/find.mjs';
import { growth } from './scenarios/growth.mjs';
import { lag } from './scenarios/lag.mjs';
import { push } from './scenarios/push.mjs';
import { soak } from './scenarios/soak.mjs';
import { track } from './scenarios/track.mjs';
import { validate } from './scenarios/validate.mjs';

// ---------------------------------------------------------------------------------------------
// Options

const argv = process.argv.slice(2);
const flag = (name) => argv.includes(`--${name}`);
const option = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && argv[i + 1] !== undefined ? argv[i + 1] : def;
};
const QUICK = flag('quick');
// Environment given to every service the bench starts, beside its own settings, for A/B runs of a
// setting: --bulk-threads N (OTM_BULK_THREADS) and --service-env NAME=VALUE[,NAME=VALUE...]
// (e.g. KAFKA_LINGER_MS=1); unset: each service's default.
const SERVICE_ENV = {
  ...(option('bulk-threads') === undefined ? {} : { OTM_BULK_THREADS: option('bulk-threads') }),
  ...Object.fromEntries(
    (option('service-env')?.split(',') ?? []).map((pair) => {
      const m = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(pair);
      if (!m) throw new Error(`--service-env ${pair}: expected NAME=VALUE`);
      return [m[1], m[2]];
    }),
  ),
};
const PROFILE = flag('profile');
// Which embedded scenario runs under the profiler: put-event (default), put-trip, get-trip or bulk.
const PROFILE_SCENARIOS = ['put-event', 'put-trip', 'get-trip', 'bulk'];
const PROFILE_SCENARIO = option('profile-scenario', 'put-event');
if (!PROFILE_SCENARIOS.includes(PROFILE_SCENARIO))
  throw new Error(`--profile-scenario ${PROFILE_SCENARIO}: ${PROFILE_SCENARIOS.join(', ')}`);
const GROUPS = ['validate', 'embedded', 'bulk', 'growth', 'find', 'activity', 'push', 'distributed', 'lag', 'track', 'soak'];
// Groups that run only when --only names them (the soak would add 20 minutes to the full run).
const ON_REQUEST = ['soak'];
const only = option('only', undefined)?.split(',');
for (const g of only ?? []) if (!GROUPS.includes(g)) throw new Error(`--only ${g}: unknown group (${GROUPS.join(', ')})`);
const wanted = (g) => (only ? only.includes(g) : !ON_REQUEST.includes(g));
const SOAK_DEPLOYMENTS = ['embedded', 'distributed'];
const soakDeployments = option('soak-deployments', SOAK_DEPLOYMENTS.join(',')).split(',');
for (const d of soakDeployments)
  if (!SOAK_DEPLOYMENTS.includes(d)) throw new Error(`--soak-deployments ${d}: ${SOAK_DEPLOYMENTS.join(', ')}`);

const cfg = {
  serviceEnv: SERVICE_ENV,
  mode: QUICK ? 'quick' : 'full',
  duration: Number(option('duration', QUICK ? 5 : 20)),
  warmup: Number(option('warmup', QUICK ? 1 : 3)),
  connections: Number(option('connections', 50)),
  bulkEvents: Number(option('bulk-events', QUICK ? 20_000 : 200_000)),
  bulkBatchEmbedded: 5_000,
  bulkBatchDistributed: 10_000,
  bulkConcurrency: 2,
  /** Events sent (and probed) once before the timed bulk run, on the same service; none with --warmup 0. */
  bulkWarmupEvents: Number(option('warmup', QUICK ? 1 : 3)) > 0 ? 20_000 : 0,
  growthSmall: 10_000,
  growthLarge: Number(option('growth-large', QUICK ? 100_000 : 1_000_000)),
  growthPreloadBudgetS: Number(option('growth-budget', QUICK ? 60 : 600)),
  growthGets: QUICK ? 4_000 : 20_000,
  findEntities: Number(option('find-entities', QUICK ? 100_000 : 1_000_000)),
  activityMinutes: Number(option('activity-minutes', QUICK ? 44_640 : 525_600)),
  activityRuns: QUICK ? 5 : 20,
  findEventsSmall: 100_000,
  findEventsLarge: Number(option('find-events', QUICK ? 1_000_000 : 10_000_000)),
  findRequests: QUICK ? 200 : 5_000,
  findFeedEntries: QUICK ? 50_000 : 200_000,
  streamClients: Number(option('stream-clients', 1_000)),
  streamRate: Number(option('stream-rate', 5_000)),
  streamSeconds: Number(option('stream-seconds', QUICK ? 5 : 20)),
  webhookEvents: Number(option('webhook-events', QUICK ? 20_000 : 100_000)),
  trackSmall: 100_000,
  trackLarge: Number(option('track-large', QUICK ? 1_000_000 : 10_000_000)),
  trackRuns: QUICK ? 3 : 7,
  lagDuration: Number(option('lag-duration', QUICK ? 8 : 20)),
  bulkEventsDistributed: Number(option('bulk-events-distributed', QUICK ? 20_000 : 50_000)),
  visibleTimeoutS: Number(option('visible-timeout', QUICK ? 60 : 180)),
  lagProbeEveryMs: 50,
  /** The soak (group `soak`): minutes a deployment, seconds a period, seconds of warm-up before, requests/s of the mix, deployments. */
  soakMinutes: Number(option('soak-minutes', QUICK ? 2 : 10)),
  soakPeriod: Number(option('soak-period', QUICK ? 30 : 60)),
  soakWarmup: Number(option('soak-warmup', QUICK ? 30 : 60)),
  soakRate: Number(option('soak-rate', 200)),
  soakDeployments,
};

/**
 * The groups in the order they run, each with the rows that stand for it when it fails. `bulk`
 * runs in two places: the embedded part after `embedded`, the distributed part after
 * `distributed`; each distributed step starts a fresh cluster.
 */
const STEPS = [
  { group: 'validate', name: 'validate', run: validate, failed: [['validate / JSON.parse', '<= 1.0']] },
  { group: 'embedded', name: 'embedded', run: embedded, failed: [['embedded PUT / GET scenarios', '—']] },
  { group: 'bulk', name: 'bulk (embedded)', run: bulkEmbedded, failed: [['bulk ingest, embedded', 'retired']] },
  { group: 'growth', name: 'growth', run: growth, failed: [['growth: GET p99 / PUT throughput, embedded', '<= 1.5 / >= 0.8']] },
  {
    group: 'find',
    name: 'find',
    run: find,
    failed: [['find: list depth, positions, track growth and rate, feed rate, embedded', '<= 1.5 / <= 20 / <= 2.0 / >= 0.3 / >= 0.3']],
  },
  { group: 'activity', name: 'activity', run: activity, failed: [['activity of one vehicle-year p95, embedded', '<= 300 ms']] },
  {
    group: 'push',
    name: 'push',
    run: push,
    failed: [['push: stream delivery lag p99 / webhook delivery rate, embedded', '<= 250 ms / >= 0.5']],
  },
  { group: 'distributed', name: 'distributed', run: distributed, failed: [['distributed PUT / GET scenarios', '—']] },
  { group: 'bulk', name: 'bulk (distributed)', run: bulkDistributed, failed: [['bulk ingest, distributed', 'retired']] },
  { group: 'lag', name: 'lag', run: lag, failed: [['visibility lag, distributed', '<= 500 ms']] },
  { group: 'track', name: 'track', run: track, failed: [['track query growth, ClickHouse', '<= 2.0']] },
  { group: 'soak', name: 'soak', run: soak, failed: [['soak: RSS last period vs period 2 / error answers', '<= 1.10 / = 0']] },
];

// ---------------------------------------------------------------------------------------------
// The run's context: what every group reads and adds to

const started = new Date();
const RESULTS = path.join(REPO, 'bench', 'results');
fs.mkdirSync(RESULTS, { recursive: true });

const rows = [];
function addRow(r) {
  const row = { ...r };
  if (row.ratio === undefined && typeof row.figure === 'number' && typeof row.baseline === 'number' && row.baseline > 0)
    row.ratio = row.figure / row.baseline;
  if (row.pass === undefined) row.pass = judge(row.ratio, row.target);
  rows.push(row);
  process.stdout.write(
    `  · ${row.scenario}: ${row.figure === undefined ? (row.status ?? 'not measured') : `${fmt(row.figure)} ${row.unit ?? ''}`}` +
      `${row.baseline !== undefined ? ` vs ${fmt(row.baseline)} ${row.baselineUnit ?? row.unit ?? ''}` : ''}${row.ratio !== undefined ? ` → ${fmt(row.ratio, 2)}` : ''}` +
      `${row.note ? ` (${row.note})` : ''}\n`,
  );
  return row;
}

const ctx = {
  cfg,
  serviceEnv: SERVICE_ENV,
  /** The embedded scenario run under --profile, or undefined. */
  profile: PROFILE ? PROFILE_SCENARIO : undefined,
  resultsDir: RESULTS,
  stamp: started.toISOString().replace(/[:.]/g, '-'),
  /** The fastify echo (bench/lib/baseline-server.mjs), started by main. */
  base: undefined,
  addRow,
  notRun: (scenario, target, why) => addRow({ scenario, target, status: 'not run', pass: null, note: why }),
  /** The capacity table's entries (bench/lib/capacity.mjs), in the order measured. */
  capacity: [],
  /** The echo's CPU a PUT of one location event: { us, loadGeneratorUs, requests, of }, the yardstick of the capacity table. */
  echo: undefined,
  /** The distributed ingress's PUT rate, measured by the `distributed` group, used by `lag`. */
  maxPutRate: undefined,
  echoReference,
};

/**
 * The capacity table's yardstick: the fastify echo's CPU per PUT of one location event. The PUT
 * scenarios of `embedded` and `distributed` measure it beside the service; when neither ran
 * (e.g. `--only bulk`), the echo is measured here, alone, under the same load.
 */
async function echoReference() {
  if (ctx.echo) return ctx.echo;
  log("    the fastify echo's CPU a PUT of a location event (the yardstick of the CPU table), measured alone");
  const loc = locationBodies();
  const spec = { url: ctx.base.url, token: 'bench', method: 'PUT', path: '/api/v5/events', bodyFn: loc.next, connections: cfg.connections };
  if (cfg.warmup > 0) await load({ ...spec, duration: cfg.warmup });
  const meter = cpuMeter({ 'fastify echo': ctx.base.child.pid });
  const r = await load({ ...spec, duration: cfg.duration });
  const spent = meter.spent();
  ctx.echo = {
    us: (spent['fastify echo'] * 1e6) / r.total,
    loadGeneratorUs: (spent['load generator'] * 1e6) / r.total,
    requests: r.total,
    of: 'a PUT of one location event, measured alone',
  };
  log(
    `    fastify echo: ${fmt(r.rps)} req/s, ${fmt(ctx.echo.us)} µs of CPU a request, the load generator ${fmt(ctx.echo.loadGeneratorUs)}`,
  );
  return ctx.echo;
}

// ---------------------------------------------------------------------------------------------
// Main

function machine() {
  const cpuinfo = fs.readFileSync('/proc/cpuinfo', 'utf8');
  return {
    nproc: Number(execFileSync('nproc').toString().trim()),
    cpu: /model name\s*:\s*(.*)/.exec(cpuinfo)?.[1] ?? 'unknown',
    node: process.version,
    os: `${os.type()} ${os.release()}`,
    memGB: Math.round(os.totalmem() / 2 ** 30),
    loadavg: os.loadavg().map((x) => Number(x.toFixed(2))),
  };
}

async function main() {
  const mach = machine();
  log(
    `otm bench (${cfg.mode}${only ? `, only ${only.join(',')}` : ''}${PROFILE ? ', profile' : ''}): ${mach.nproc} × ${mach.cpu}, node ${mach.node}, load ${mach.loadavg.join(' ')}`,
  );
  log(`settings: ${JSON.stringify(cfg)}`);
  const t0 = Date.now();
  ctx.base = wanted('embedded') || wanted('distributed') || wanted('bulk') ? await startBaseline() : undefined;
  try {
    if (PROFILE) {
      await embedded(ctx);
      return;
    }
    for (const step of STEPS) {
      if (!wanted(step.group)) continue;
      try {
        await step.run(ctx);
      } catch (e) {
        log(`  ! ${step.name} failed: ${e.stack ?? e}`);
        for (const [s, t] of step.failed)
          ctx.notRun(
            s,
            t,
            `${step.name} failed: ${String(e.message ?? e)
              .split('\n')[0]
              .slice(0, 200)}`,
          );
      }
    }
  } finally {
    await ctx.base?.stop();
  }
  const seconds = (Date.now() - t0) / 1000;
  log(`\nResults (${cfg.mode} mode, ${fmt(seconds, 0)} s; ratio = service / baseline measured in the same run):\n`);
  printTable(rows);
  if (ctx.capacity.length > 0) {
    log(`\nCPU by process (from /proc, all threads; × echo = µs / the fastify echo's µs of CPU a request in the same run):\n`);
    for (const l of capacityLines(ctx.capacity)) log(l);
    const sized = sizingLines(ctx.capacity);
    if (sized.length > 0) {
      log(
        `Cores per process for sustained rates of location events: cores = events/s × µs an event / 1e6 × ${HEADROOM} (headroom: each core about ${Math.round(100 / HEADROOM)} % busy); the load generator left out; linear arithmetic, not measured beyond this machine:\n`,
      );
      for (const l of sized) log(l);
    }
  }
  const result = {
    startedAt: started.toISOString(),
    seconds,
    mode: cfg.mode,
    only: only ?? null,
    machine: mach,
    settings: cfg,
    rows,
    capacity: { headroom: HEADROOM, rates: RATES, entries: ctx.capacity },
  };
  const file = path.join(RESULTS, `${ctx.stamp}.json`);
  fs.writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  // latest.json holds the latest complete full run; a partial or reduced one (--only, --quick)
  // goes beside it, so that a smoke run does not replace the figures the docs quote.
  const latest = only || QUICK ? 'latest-partial.json' : 'latest.json';
  fs.writeFileSync(path.join(RESULTS, latest), `${JSON.stringify(result, null, 2)}\n`);
  log(`\nwritten: ${path.relative(REPO, file)} and bench/results/${latest}`);
  const failed = rows.filter((r) => r.pass === false).length;
  log(
    `${rows.filter((r) => r.pass === true).length} targets met, ${failed} missed, ${rows.filter((r) => r.pass === null).length} without a verdict`,
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`${e.stack ?? e}\n`);
    process.exit(1);
  },
);
