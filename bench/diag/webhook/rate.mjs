/**
 * The webhook row of `npm run bench -- --only push` alone, repeated on one service: `events`
 * location events stored once, then each round a subscription (or `subs` of them, one tenant)
 * made from a cursor before them, delivering the backlog to receivers on loopback, against
 * the same bodies POSTed one at a time with undici by a process of its own (bench/lib/post-bodies.mjs,
 * as bench/scenarios/push.mjs does), and by this process (information). Prints each
 * round's changes/s, the baseline's measured right after it, their ratio, and the service's CPU
 * seconds for the round (from /proc).
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/webhook/rate.mjs [events=20000] [rounds=3] [subs=1] [--profile] [--what-if=free|events-first|coalesced]
 *
 * With `subs` > 1 every subscription delivers all `events` changes (to a receiver of its own); the
 * figure is the changes delivered a second over all of them, the baseline one receiver's bodies
 * POSTed once (so the ratio is per subscription × subs). With --profile the service runs with
 * bench/lib/profile-on-signal.cjs and the last round's deliveries are profiled (SIGUSR2 around
 * them); the profile's path is printed, summarise it with bench/lib/profile-top.mjs. With
 * --what-if the service runs with what-if.mjs (a cheaper document read, to estimate its effect).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { postFromChild, postHere, receiver } from '../../lib/post-bodies.mjs';
import { EMB_TOKEN, startEmbedded } from '../../lib/services.mjs';
import { REPO, fmt, log, request, sleep } from '../../lib/util.mjs';

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const PROFILE = process.argv.includes('--profile');
const EVENTS = Number(args[0] ?? 20_000);
const ROUNDS = Number(args[1] ?? 3);
const SUBS = Number(args[2] ?? 1);
const WHAT_IF = process.argv.find((a) => a.startsWith('--what-if='))?.slice('--what-if='.length);

const uuid = (prefix, i) => `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;

/** CPU seconds (user + system) of a process so far, or of its main thread (its task of the same id). */
function cpuOf(pid, mainThread = false) {
  const f = fs.readFileSync(mainThread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`, 'utf8');
  const parts = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(parts[11]) + Number(parts[12])) / 100;
}

const profDir = PROFILE ? fs.mkdtempSync(path.join(os.tmpdir(), 'otm-webhook-prof-')) : undefined;
const childOptions = [
  process.env.OTM_CHILD_NODE_OPTIONS ?? '',
  PROFILE ? `--require ${path.join(REPO, 'bench/lib/profile-on-signal.cjs')}` : '',
  WHAT_IF ? `--import ${path.join(REPO, 'bench/diag/webhook/what-if.mjs')}` : '',
].filter((o) => o !== '');
if (childOptions.length > 0) process.env.OTM_CHILD_NODE_OPTIONS = childOptions.join(' ');
const ctx = { serviceEnv: { ...(PROFILE ? { OTM_PROFILE_DIR: profDir } : {}), ...(WHAT_IF ? { OTM_WHAT_IF: WHAT_IF } : {}) } };
const emb = await startEmbedded(ctx, { OTM_WEBHOOK_ALLOW: '127.0.0.1', OTM_STREAMS_PER_TOKEN: '100' });
const pid = emb.svc.child.pid;
const rxs = [];
for (let s = 0; s < SUBS; s++) rxs.push(await receiver());
try {
  const put = await request(`${emb.url}/api/v5/vehicles`, { method: 'PUT', token: EMB_TOKEN, body: JSON.stringify({ name: 'before' }) });
  if (put.status !== 200) throw new Error(`PUT: ${put.status}`);
  const first = JSON.parse((await request(`${emb.url}/api/v5/changes?limit=1`, { token: EMB_TOKEN })).body).items[0].cursor;
  for (let b = 0; b < EVENTS; b += 5_000) {
    const lines = [];
    for (let i = b; i < Math.min(EVENTS, b + 5_000); i++) {
      lines.push(
        JSON.stringify({
          id: uuid('7e000000', i),
          eventType: 'locationUpdateEvent',
          lifecycle: 'actual',
          creationDate: new Date(Date.UTC(2026, 2, 2) + i * 1000).toISOString(),
          geoReference: { type: 'latLonPointGeoReference', lat: 52 + (i % 1000) / 10_000, lon: 5 + (i % 977) / 10_000 },
          vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: uuid('7c000000', i % 1000) },
        }),
      );
    }
    const r = await request(`${emb.url}/api/v5/bulk/events`, { method: 'POST', token: EMB_TOKEN, body: `[${lines.join(',')}]` });
    if (r.status !== 200) throw new Error(`bulk: ${r.status} ${r.body.slice(0, 200)}`);
  }
  await request(`${emb.url}/api/v5/changes?limit=1`, { token: EMB_TOKEN });
  await sleep(500);
  log(
    `webhook delivery: ${fmt(EVENTS)} changes, ${SUBS} subscription(s), ${ROUNDS} rounds${PROFILE ? ', profiled' : ''}${WHAT_IF ? `, what if ${WHAT_IF}` : ''}`,
  );
  const ratios = [];
  const cpuRatios = [];
  for (let round = 1; round <= ROUNDS; round++) {
    for (const rx of rxs) rx.reset();
    const profiling = PROFILE && round === ROUNDS;
    if (profiling) process.kill(pid, 'SIGUSR2');
    const cpu0 = cpuOf(pid);
    const main0 = cpuOf(pid, true);
    const t0 = performance.now();
    const ids = [];
    for (const rx of rxs) {
      const sub = await request(`${emb.url}/api/v5/subscriptions`, {
        method: 'POST',
        token: EMB_TOKEN,
        body: JSON.stringify({ url: rx.url, kinds: ['events'], from: first }),
      });
      if (sub.status !== 201) throw new Error(`subscribe: ${sub.status} ${sub.body.slice(0, 200)}`);
      ids.push(JSON.parse(sub.body).id);
    }
    const until = Date.now() + 300_000;
    while (rxs.some((rx) => rx.changes() < EVENTS) && Date.now() < until) await sleep(5);
    const webhookS = (performance.now() - t0) / 1000;
    const cpu = cpuOf(pid) - cpu0;
    const mainCpu = cpuOf(pid, true) - main0;
    if (profiling) process.kill(pid, 'SIGUSR2');
    for (const rx of rxs) if (rx.changes() < EVENTS) throw new Error(`${rx.changes()} of ${EVENTS} changes delivered in 300 s`);
    // Gone before the next round (the backlog is delivered again to a new subscription).
    for (const id of ids) await request(`${emb.url}/api/v5/subscriptions/${id}`, { method: 'DELETE', token: EMB_TOKEN });

    // The baseline from a process of its own, as the dispatcher is one (bench/lib/post-bodies.mjs);
    // from this process (sender and receiver on one event loop) for information.
    const bodies = rxs[0].bodies.slice();
    const plain = await postFromChild(rxs[0].url, bodies);
    const here = await postHere(rxs[0].url, bodies);
    const plainS = plain.seconds;
    const plainCpu = plain.cpuSeconds;
    const figure = (EVENTS * SUBS) / webhookS;
    const baseline = EVENTS / plainS;
    ratios.push(figure / baseline);
    // On CPU time, which a busy machine moves less than the clock: the baseline process's CPU a
    // batch POSTed plainly against the service's main thread's a batch.
    cpuRatios.push((plainCpu * SUBS) / mainCpu);
    log(
      `  round ${round}: ${fmt(Math.round(figure))} changes/s (${fmt(webhookS)} s, service CPU ${fmt(cpu)} s, main thread ` +
        `${fmt(mainCpu)} s: ${fmt((mainCpu * 1e6) / (EVENTS * SUBS))} µs a change) vs ${fmt(Math.round(baseline))} plainly ` +
        `(${fmt(plainS)} s, CPU ${fmt(plainCpu)} s): ${(figure / baseline).toFixed(2)}×, on CPU ${((plainCpu * SUBS) / mainCpu).toFixed(2)}×; ` +
        `POSTed from this process ${fmt(here.seconds)} s: ${(figure / (EVENTS / here.seconds)).toFixed(2)}× that`,
    );
    await sleep(300);
  }
  log(`ratios: ${ratios.map((r) => r.toFixed(2)).join(' ')}; on CPU: ${cpuRatios.map((r) => r.toFixed(2)).join(' ')}`);
} finally {
  for (const rx of rxs) await rx.close();
  await emb.stop();
  if (PROFILE) {
    for (const f of fs.readdirSync(profDir)) log(`profile: ${path.join(profDir, f)}`);
  }
}
