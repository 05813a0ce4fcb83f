/**
 * Group `lag`: visibility lag of the distributed deployment. Background PUTs of location events at
 * half the ingress's maximum PUT rate (from the `distributed` group of the same run, or measured
 * here first on a fresh cluster), and a probe every `lagProbeEveryMs` alternating a location event
 * (→ telemetry worker → ClickHouse) and a vehicle (→ entity worker → Redis): the time from the
 * PUT's answer until a GET on the query process finds it. Target: p99 at most 500 ms.
 */
import { locationBodies, locationEvent, vehicleDoc } from '../lib/documents.mjs';
import { DIST_TOKEN, startDistributed } from '../lib/services.mjs';
import { fmt, idMaker, load, log, percentile, request, sleep } from '../lib/util.mjs';

export async function lag(ctx) {
  const { cfg } = ctx;
  log('\n== visibility lag, distributed');
  let { cluster, ingress, query } = await startDistributed(ctx);
  try {
    if (ctx.maxPutRate === undefined) {
      log('    measuring the maximum PUT rate of the ingress first');
      const loc = locationBodies();
      if (cfg.warmup > 0)
        await load({
          url: ingress,
          token: DIST_TOKEN,
          method: 'PUT',
          path: '/api/v5/events',
          bodyFn: loc.next,
          duration: cfg.warmup,
          connections: cfg.connections,
        });
      ctx.maxPutRate = (
        await load({
          url: ingress,
          token: DIST_TOKEN,
          method: 'PUT',
          path: '/api/v5/events',
          bodyFn: loc.next,
          duration: cfg.duration,
          connections: cfg.connections,
        })
      ).rps;
      // That run left the worker a backlog of events: a fresh cluster.
      await cluster.close();
      ({ cluster, ingress, query } = await startDistributed(ctx));
    }
    const rate = ctx.maxPutRate / 2;
    log(
      `    visibility lag at ${fmt(rate)} PUT/s (half of ${fmt(ctx.maxPutRate)}), ${cfg.lagDuration} s, a probe every ${cfg.lagProbeEveryMs} ms`,
    );
    const l = await lagRun(ctx, { ingress, query, rate, duration: cfg.lagDuration });
    for (const [k, what] of [
      ['events', 'locationUpdateEvent → ClickHouse'],
      ['vehicles', 'vehicle → Redis'],
    ]) {
      const s = l[k];
      ctx.addRow({
        scenario: `visibility lag p99, ${what}, at ${fmt(l.achieved)} PUT/s (half max), distributed`,
        figure: s.p99,
        unit: 'ms',
        target: '<= 500 ms',
        pass: s.n > 0 && s.failed === 0 && l.bgBad === 0 ? s.p99 <= 500 : false,
        note: `p50 ${fmt(s.p50)} ms, p99 ${fmt(s.p99)} ms, max ${fmt(s.max)} ms over ${s.n} probes${s.failed ? `, ${s.failed} failed or not visible in 20 s` : ''}${l.bgBad ? `, ${l.bgBad} background errors` : ''}; GET polled every 5 ms`,
        detail: s,
      });
    }
  } finally {
    await cluster.close();
  }
}

/** The background load and the probes; each probe's GET is polled every 5 ms, given up after 20 s. */
async function lagRun(ctx, { ingress, query, rate, duration }) {
  const bg = locationBodies();
  const background = load({
    url: ingress,
    token: DIST_TOKEN,
    method: 'PUT',
    path: '/api/v5/events',
    bodyFn: bg.next,
    connections: 20,
    duration,
    overallRate: Math.max(1, Math.round(rate)),
  });
  const probeIds = idMaker();
  const samples = { events: [], vehicles: [] };
  const failures = { events: 0, vehicles: 0 };
  const probes = [];
  const probe = async (i) => {
    const kind = i % 2 === 0 ? 'events' : 'vehicles';
    const id = probeIds.next();
    const body = kind === 'events' ? locationEvent(id, i) : vehicleDoc(id, i);
    const r = await request(`${ingress}/api/v5/${kind}`, { method: 'PUT', token: DIST_TOKEN, body });
    const answered = performance.now();
    if (r.status !== 200) {
      failures[kind]++;
      return;
    }
    const until = answered + 20_000;
    for (;;) {
      const g = await request(`${query}/api/v5/${kind}/${id}`, { token: DIST_TOKEN });
      if (g.status === 200) {
        samples[kind].push(performance.now() - answered);
        return;
      }
      if (performance.now() > until) {
        failures[kind]++;
        return;
      }
      await sleep(5);
    }
  };
  const end = Date.now() + duration * 1000;
  for (let i = 0; Date.now() < end; i++) {
    probes.push(probe(i));
    await sleep(ctx.cfg.lagProbeEveryMs);
  }
  const bgResult = await background;
  await Promise.all(probes);
  const stats = (k) => {
    const s = samples[k].sort((a, b) => a - b);
    return { n: s.length, failed: failures[k], p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] };
  };
  return { events: stats('events'), vehicles: stats('vehicles'), achieved: bgResult.rps, bgBad: bgResult.non2xx + bgResult.errors };
}
