/**
 * Group `push`: changes pushed to clients by the embedded service (`otm serve`).
 *
 * - stream: `streamClients` Server-Sent Events clients (`GET /api/v5/stream?vehicle=`), each
 *   following one of as many vehicles, while `streamRate` location events a second of those
 *   vehicles arrive by bulk (a body of 1/20 of a second's events every 50 ms, one in flight at a
 *   time). The delivery lag of each event is the time from the answer to the bulk request that
 *   carried it to its arrival at its vehicle's client, p50 and p99; every event must arrive, once.
 *   Target: p99 at most 250 ms. The clients run in this process; one event loop reads them all,
 *   so the figure includes that process's own delay.
 * - webhooks: `webhookEvents` location events stored first, then a subscription made from a cursor
 *   before them, so that the dispatcher of `otm serve` delivers the backlog as fast as it can to a
 *   receiver on loopback (batches of OTM_WEBHOOK_BATCH, 100, one at a time, signed, recorded);
 *   against the same bodies the receiver got POSTed one at a time with undici (the dispatcher's
 *   client) by a process of its own, as the dispatcher is one (bench/lib/post-bodies.mjs), without
 *   reading the feed, signing or recording anything. Both are timed warm: the baseline POSTs the
 *   bodies once before each timed pass, and two subscriptions, each deleted after, deliver the
 *   backlog before the timed ones. Five rounds, each a delivery and then the baseline; the row
 *   takes the median of each side. Target: at least 0.5×.
 */
import fs from 'node:fs';
import http from 'node:http';
import { postFromChild, postHere, receiver } from '../lib/post-bodies.mjs';
import { EMB_TOKEN, startEmbedded } from '../lib/services.mjs';
import { fmt, log, median, percentile, request, sleep } from '../lib/util.mjs';

/** Untimed deliveries of the backlog before the timed ones (see `webhooks`). */
const WEBHOOK_WARMUPS = 2;
/** Timed rounds of the webhook row, each a delivery and then the baseline; the row takes the medians. */
const WEBHOOK_ROUNDS = 5;

const uuid = (prefix, i) => `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
const vehicleOf = (i) => uuid('7c000000', i);

/** Opens one SSE stream; calls `onEvent(data)` for each `data:` of a put; resolves once the answer's head arrived. */
function openStream(url, path, onEvent) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path,
        headers: { authorization: `Bearer ${EMB_TOKEN}`, accept: 'text/event-stream' },
        agent: false,
      },
      (res) => {
        if (res.statusCode !== 200) {
          reject(new Error(`GET ${path}: ${res.statusCode}`));
          res.resume();
          return;
        }
        res.setEncoding('utf8');
        let buf = '';
        res.on('data', (chunk) => {
          buf += chunk;
          for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
            const block = buf.slice(0, end);
            buf = buf.slice(end + 2);
            let event = 'message';
            let data = '';
            for (const line of block.split('\n')) {
              if (line.startsWith('event:')) event = line.slice(6).trim();
              else if (line.startsWith('data:')) data += line.slice(5).trimStart();
            }
            if (event === 'put' && data !== '') onEvent(data);
          }
        });
        resolve({ close: () => req.destroy() });
      },
    );
    req.on('error', (e) => {
      if (e.code !== 'ECONNRESET') reject(e);
    });
    req.end();
  });
}

/** CPU seconds (user + system) of a process's main thread so far (its task of the same id), from /proc; NaN elsewhere. */
function mainThreadCpu(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
    const parts = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(parts[11]) + Number(parts[12])) / 100;
  } catch {
    return NaN;
  }
}

async function webhooks(ctx) {
  const { cfg } = ctx;
  const n = cfg.webhookEvents;
  log(`\n== push, embedded: webhook delivery of ${fmt(n)} changes to one receiver on loopback`);
  const emb = await startEmbedded(ctx, { OTM_WEBHOOK_ALLOW: '127.0.0.1' });
  const rx = await receiver();
  try {
    const put = await request(`${emb.url}/api/v5/vehicles`, { method: 'PUT', token: EMB_TOKEN, body: JSON.stringify({ name: 'before' }) });
    if (put.status !== 200) throw new Error(`PUT: ${put.status}`);
    const first = JSON.parse((await request(`${emb.url}/api/v5/changes?limit=1`, { token: EMB_TOKEN })).body).items[0].cursor;
    for (let b = 0; b < n; b += 5_000) {
      const lines = [];
      for (let i = b; i < Math.min(n, b + 5_000); i++) {
        lines.push(
          JSON.stringify({
            id: uuid('7e000000', i),
            eventType: 'locationUpdateEvent',
            lifecycle: 'actual',
            creationDate: new Date(Date.UTC(2026, 2, 2) + i * 1000).toISOString(),
            geoReference: { type: 'latLonPointGeoReference', lat: 52 + (i % 1000) / 10_000, lon: 5 + (i % 977) / 10_000 },
            vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicleOf(i % 1000) },
          }),
        );
      }
      const r = await request(`${emb.url}/api/v5/bulk/events`, { method: 'POST', token: EMB_TOKEN, body: `[${lines.join(',')}]` });
      if (r.status !== 200) throw new Error(`bulk: ${r.status} ${r.body.slice(0, 200)}`);
    }
    // A read of the feed waits for the event index to take the last events (their feed entries are
    // written in its commit), so that the clock below counts the deliveries alone.
    await request(`${emb.url}/api/v5/changes?limit=1`, { token: EMB_TOKEN });
    // One delivery of the backlog after `first` (n events; the vehicle put is `first` itself) by a
    // new subscription, deleted after it: its seconds, the service's main-thread CPU seconds, and
    // the bodies the receiver got.
    const pid = emb.svc.child.pid;
    const deliver = async (what) => {
      rx.reset();
      const cpu0 = mainThreadCpu(pid);
      const t0 = performance.now();
      const r = await request(`${emb.url}/api/v5/subscriptions`, {
        method: 'POST',
        token: EMB_TOKEN,
        body: JSON.stringify({ url: rx.url, kinds: ['events'], from: first }),
      });
      if (r.status !== 201) throw new Error(`subscribe: ${r.status} ${r.body.slice(0, 200)}`);
      for (const until = Date.now() + 300_000; rx.changes() < n && Date.now() < until;) await sleep(5);
      const seconds = (performance.now() - t0) / 1000;
      const cpuSeconds = mainThreadCpu(pid) - cpu0;
      if (rx.changes() < n) throw new Error(`webhooks, ${what}: ${rx.changes()} of ${n} changes delivered in 300 s`);
      const bodies = rx.bodies.slice();
      const del = await request(`${emb.url}/api/v5/subscriptions/${JSON.parse(r.body).id}`, { method: 'DELETE', token: EMB_TOKEN });
      if (del.status !== 204 && del.status !== 200) throw new Error(`webhooks, ${what}: delete the subscription: ${del.status}`);
      await sleep(200);
      rx.reset();
      return { seconds, cpuSeconds, bodies };
    };
    // Both are timed warm. The baseline POSTs the bodies once before its timed pass, enough for its
    // few functions; the service's delivery path compiles on background threads through its first
    // two deliveries of the backlog (bench/diag/webhook/rate.mjs: the main thread at 4.3-5 µs a
    // change in rounds 1 and 2, 3.0-3.2 from round 3, with its other threads busy twice as long in
    // the first two). So two subscriptions deliver the backlog untimed, each deleted after it,
    // before the timed rounds.
    for (let w = 1; w <= WEBHOOK_WARMUPS; w++) {
      const { seconds } = await deliver('warming up');
      log(`    warm-up delivery ${w}: ${fmt(n / seconds)} changes/s`);
    }
    // Timed rounds, each a delivery and then the baseline: the same bodies POSTed again one at a
    // time with undici, from a process of its own as the dispatcher is (bench/lib/post-bodies.mjs).
    // Either side's rate moves by a fifth between single runs of half a second; the row takes the
    // median round of each.
    const rounds = [];
    let bodies;
    for (let r = 0; r < WEBHOOK_ROUNDS; r++) {
      const round = await deliver('timed');
      bodies ??= round.bodies;
      rounds.push({ ...round, plain: await postFromChild(rx.url, bodies) });
    }
    const webhookS = median(rounds.map((r) => r.seconds));
    const plainS = median(rounds.map((r) => r.plain.seconds));
    const serviceCpu = median(rounds.map((r) => r.cpuSeconds));
    const plainCpu = median(rounds.map((r) => r.plain.cpuSeconds));
    log(
      `    rounds: delivered ${rounds.map((r) => fmt(n / r.seconds)).join(', ')} changes/s; POSTed plainly ${rounds.map((r) => fmt(n / r.plain.seconds)).join(', ')}`,
    );
    // For information: the same bodies POSTed from this process (sender and receiver on one loop).
    rx.reset();
    const here = await postHere(rx.url, bodies);
    // CPU a batch, which a busy machine moves less than the clock: the service's main thread
    // delivering, the baseline's process POSTing plainly.
    const perBatch = (s) => fmt((s * 1000) / bodies.length, 2);
    ctx.addRow({
      scenario: `webhook delivery to one receiver on loopback (${fmt(n)} changes, batches of 100) vs the same bodies POSTed plainly, embedded`,
      figure: n / webhookS,
      baseline: n / plainS,
      unit: 'changes/s',
      target: '>= 0.5',
      note:
        `${fmt(bodies.length)} batches in ${fmt(webhookS)} s vs ${fmt(plainS)} s (medians of ${WEBHOOK_ROUNDS} rounds, each side in turn); the dispatcher also reads the feed and each document, signs and records each attempt; ` +
        `CPU a batch: the service's main thread ${perBatch(serviceCpu)} ms, POSTing plainly ${perBatch(plainCpu)} ms; ` +
        `POSTed from the bench process itself (sender and receiver on one event loop) ${fmt(here.seconds)} s: ${(plainS / here.seconds).toFixed(2)}× the baseline's rate`,
    });
  } finally {
    await rx.close();
    await emb.stop();
  }
}

export async function push(ctx) {
  await stream(ctx);
  await webhooks(ctx);
}

async function stream(ctx) {
  const { cfg } = ctx;
  const clients = cfg.streamClients;
  const rate = cfg.streamRate;
  const seconds = cfg.streamSeconds;
  log(`\n== push, embedded: ${fmt(clients)} stream clients, ${fmt(rate)} location events/s for ${seconds} s`);
  const emb = await startEmbedded(ctx, { OTM_STREAMS_PER_TOKEN: String(clients + 10) });
  const streams = [];
  try {
    /** Event id -> when the bulk request that carried it was answered (ms, performance.now()). */
    const answered = new Map();
    /** Event id -> arrival times (ms) before its answer was known, to be matched after. */
    const early = new Map();
    const lags = [];
    let received = 0;
    let duplicates = 0;
    const seen = new Set();
    const onEvent = (data) => {
      const now = performance.now();
      const id = /"id":"([^"]+)"/.exec(data)?.[1];
      if (id === undefined) return;
      received++;
      if (seen.has(id)) duplicates++;
      seen.add(id);
      const at = answered.get(id);
      if (at === undefined) early.set(id, now);
      else lags.push(now - at);
    };
    for (let i = 0; i < clients; i++) {
      streams.push(await openStream(emb.url, `/api/v5/stream?kinds=events&vehicle=${vehicleOf(i)}`, onEvent));
    }
    log(`    ${fmt(clients)} streams open`);

    const perBody = Math.max(1, Math.round(rate / 20));
    const bodies = Math.round((rate * seconds) / perBody);
    const t0 = performance.now();
    let n = 0;
    let refused = 0;
    for (let b = 0; b < bodies; b++) {
      // One body every 50 ms on a fixed schedule (a late one is sent at once, not skipped).
      const due = t0 + b * 50;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      const ids = [];
      const lines = [];
      for (let k = 0; k < perBody; k++, n++) {
        const id = uuid('7d000000', n);
        ids.push(id);
        lines.push(
          JSON.stringify({
            id,
            eventType: 'locationUpdateEvent',
            lifecycle: 'actual',
            creationDate: new Date().toISOString(),
            geoReference: { type: 'latLonPointGeoReference', lat: 52 + (n % 1000) / 10_000, lon: 5 + (n % 977) / 10_000 },
            vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicleOf(n % clients) },
          }),
        );
      }
      const r = await request(`${emb.url}/api/v5/bulk/events`, { method: 'POST', token: EMB_TOKEN, body: `[${lines.join(',')}]` });
      const at = performance.now();
      if (r.status !== 200) {
        refused += perBody;
        continue;
      }
      for (const id of ids) {
        answered.set(id, at);
        const e = early.get(id);
        if (e !== undefined) {
          lags.push(e - at);
          early.delete(id);
        }
      }
    }
    const sent = answered.size;
    const achieved = sent / ((performance.now() - t0) / 1000);
    // The last events: up to 5 s to arrive.
    const until = Date.now() + 5_000;
    while (seen.size < sent && Date.now() < until) await sleep(20);
    const missing = sent - [...answered.keys()].filter((id) => seen.has(id)).length;
    const sorted = lags.sort((a, b) => a - b);
    const p50 = percentile(sorted, 50);
    const p99 = percentile(sorted, 99);
    ctx.addRow({
      scenario: `stream delivery lag p99, ${fmt(clients)} clients each following a vehicle, ${fmt(Math.round(achieved))} location events/s, embedded`,
      figure: p99,
      unit: 'ms',
      target: '<= 250 ms',
      pass: missing === 0 && refused === 0 && duplicates === 0 ? p99 <= 250 : false,
      note:
        `p50 ${fmt(p50)} ms, max ${fmt(sorted[sorted.length - 1])} ms; ${fmt(sent)} events sent, ${fmt(received)} received, ` +
        `${missing} missing, ${duplicates} twice${refused ? `, ${refused} refused by the bulk` : ''}; from the bulk answer to the event at its client`,
    });
  } finally {
    for (const s of streams) s.close();
    await emb.stop();
  }
}
