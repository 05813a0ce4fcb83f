/**
 * The distributed deployment under chaos, as long as you like (test/distributed/chaos.ts; the
 * test of `npm test` runs a few minutes of it), and the hand-over time of a dead worker's partitions.
 *
 *   node --import ./bench/lib/register-ts.mjs bench/chaos.mjs [--minutes 60] [--seed N] [--rate 100]
 *       a random schedule of faults for about that many minutes (seed printed; the same seed gives
 *       the same schedule), steady writes meanwhile, then the checks;
 *   ... bench/chaos.mjs --fixed [--writes 20000] [--rate 200]
 *       the fixed sequence (ClickHouse stopped 15 s, Redis 10 s, worker and query SIGKILLed,
 *       Kafka 10 s), repeated until that many writes were made;
 *   ... bench/chaos.mjs --handover [--rounds 3] [--session 10000]
 *       with the production consumer timings (session 10 s, heartbeat 1 s, rebalance 10 s): two
 *       workers, one SIGKILLed; how long until events written right after the kill, on every
 *       partition, are all visible; then the same with the only worker killed and a new one started.
 * Every mode runs the roles with the production consumer timings (`--session` ms to change them).
 * Needs `npm run build` (the `otm` processes run from dist). Exits 1 when a check fails.
 */
import { parseArgs } from 'node:util';
import { FIXED_SEQUENCE, runChaos, schedule, sleep, summary } from '../test/distributed/chaos.ts';
import { startCluster } from '../test/distributed/cluster.ts';

const { values: a } = parseArgs({
  options: {
    minutes: { type: 'string', default: '60' },
    seed: { type: 'string' },
    rate: { type: 'string' },
    fixed: { type: 'boolean', default: false },
    writes: { type: 'string', default: '20000' },
    handover: { type: 'boolean', default: false },
    rounds: { type: 'string', default: '3' },
    session: { type: 'string', default: '10000' },
  },
});
const log = (s) => process.stdout.write(`${s}\n`);
const H = { authorization: 'Bearer writer-token-acme', 'content-type': 'application/json' };

/** Faults enough for `minutes` (the run stops starting new ones when that time is up). */
function scheduleFor(seed, minutes) {
  return schedule(seed, Math.max(1, Math.round((minutes * 60) / 5)));
}

/** The consumer timings of production (the cluster of the tests uses shorter ones), or --session's. */
function timings() {
  const session = Number(a.session);
  return {
    KAFKA_SESSION_TIMEOUT_MS: String(session),
    KAFKA_HEARTBEAT_MS: String(Math.min(1000, Math.floor(session / 3))),
    KAFKA_REBALANCE_TIMEOUT_MS: String(session),
  };
}

async function chaos() {
  const c = await startCluster({ env: { OTM_WEBHOOK_ALLOW: '127.0.0.1', ...timings() } });
  let failed = false;
  try {
    const runs = [];
    if (a.fixed) {
      const rate = Number(a.rate ?? 200);
      const each = FIXED_SEQUENCE.at(-1).at + FIXED_SEQUENCE.at(-1).downMs + 5_000;
      const rounds = Math.max(1, Math.ceil(Number(a.writes) / ((rate * each) / 1000)));
      for (let i = 0; i < rounds; i++) {
        runs.push(await runChaos(c, { prefix: `7d${i.toString(16).padStart(6, '0')}`, faults: FIXED_SEQUENCE, rate, log }));
        log(summary(runs.at(-1)));
      }
    } else {
      const seed = a.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(a.seed);
      log(`chaos seed ${seed}`);
      const faults = scheduleFor(seed, Number(a.minutes));
      const untilMs = Number(a.minutes) * 60_000;
      runs.push(await runChaos(c, { prefix: '7e000000', faults, seed, rate: Number(a.rate ?? 100), untilMs, log }));
      log(summary(runs[0]));
    }
    for (const r of runs) {
      const bad = r.refused.length + r.lost.length + r.undelivered.length + r.unhealthy.length + (r.writes - r.acknowledged);
      if (bad > 0) {
        failed = true;
        log(
          `FAILED: ${JSON.stringify({ refused: r.refused.slice(0, 5), lost: r.lost.slice(0, 5), undelivered: r.undelivered.slice(0, 5), unhealthy: r.unhealthy })}`,
        );
      }
    }
    const total = runs.reduce((t, r) => ({ writes: t.writes + r.writes, acked: t.acked + r.acknowledged, lost: t.lost + r.lost.length }), {
      writes: 0,
      acked: 0,
      lost: 0,
    });
    log(`total: ${total.writes} writes, ${total.acked} acknowledged, ${total.lost} lost; ${failed ? 'FAIL' : 'PASS'}`);
  } finally {
    await c.close();
  }
  return failed;
}

/** Events for `n` vehicles (spread over every partition), written now; resolves with their paths. */
async function writeSpread(c, prefix, n) {
  const paths = [];
  for (let i = 0; i < n; i++) {
    const id = `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
    const doc = {
      eventType: 'locationUpdateEvent',
      id,
      lifecycle: 'actual',
      creationDate: new Date().toISOString(),
      geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
      vehicle: {
        associationType: 'reference',
        entityType: 'vehicle',
        uuid: `${prefix}-0000-4000-8000-${(0xf000 + i).toString(16).padStart(12, '0')}`,
      },
    };
    for (;;) {
      const res = await fetch(`${c.url}/api/v5/events`, { method: 'PUT', headers: H, body: JSON.stringify(doc) }).catch(() => undefined);
      await res?.arrayBuffer();
      if (res?.status === 200) break;
      await sleep(100);
    }
    paths.push(`/api/v5/events/${id}`);
  }
  return paths;
}

async function allVisible(c, paths) {
  let pending = paths;
  while (pending.length > 0) {
    const next = [];
    for (const p of pending) {
      const res = await fetch(`${c.url}${p}`, { headers: H }).catch(() => undefined);
      await res?.arrayBuffer();
      if (res?.status !== 200) next.push(p);
    }
    pending = next;
    if (pending.length > 0) await sleep(100);
  }
}

async function ready(c, name) {
  for (;;) {
    const res = await fetch(`${c.processes.get(name).url}/readyz`).catch(() => undefined);
    if (res?.status === 200) return;
    await sleep(100);
  }
}

async function handover() {
  const session = Number(a.session);
  const c = await startCluster({ env: timings() });
  const rows = [];
  try {
    await c.startRole('worker-b', ['worker']);
    await Promise.all([ready(c, 'worker'), ready(c, 'worker-b')]);
    await allVisible(c, await writeSpread(c, 'ad000000', 48));
    for (let round = 0; round < Number(a.rounds); round++) {
      // A worker SIGKILLed: the other takes over its partitions once its session timed out.
      const killed = round % 2 === 0 ? 'worker' : 'worker-b';
      await c.stopRole(killed, 'SIGKILL');
      const t0 = Date.now();
      await allVisible(c, await writeSpread(c, `ad${(round + 1).toString(16).padStart(6, '0')}`, 48));
      const toOther = (Date.now() - t0) / 1000;
      await c.startRole(killed, ['worker']);
      await ready(c, killed);
      await sleep(3_000);
      rows.push(['two workers, one SIGKILLed', toOther]);
      log(`round ${round + 1}: a SIGKILLed worker's partitions taken over by the other, every event visible after ${toOther.toFixed(1)} s`);
    }
    // The only worker SIGKILLed and a replacement started at once.
    await c.stopRole('worker-b', 'SIGTERM');
    for (let round = 0; round < Number(a.rounds); round++) {
      await c.stopRole('worker', 'SIGKILL');
      const t0 = Date.now();
      const writing = writeSpread(c, `ae${round.toString(16).padStart(6, '0')}`, 48);
      await c.startRole('worker', ['worker']);
      await allVisible(c, await writing);
      const toNew = (Date.now() - t0) / 1000;
      rows.push(['one worker SIGKILLed, a new one started', toNew]);
      log(`round ${round + 1}: the only worker SIGKILLed and a new one started: every event visible after ${toNew.toFixed(1)} s`);
      await sleep(3_000);
    }
  } finally {
    await c.close();
  }
  for (const what of new Set(rows.map((r) => r[0]))) {
    const s = rows.filter((r) => r[0] === what).map((r) => r[1]);
    log(`${what}: ${s.map((x) => x.toFixed(1)).join(', ')} s (session timeout ${session / 1000} s)`);
  }
  return false;
}

const failed = a.handover ? await handover() : await chaos();
process.exit(failed ? 1 : 0);
