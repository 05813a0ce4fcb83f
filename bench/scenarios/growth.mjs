/**
 * Group `growth`: the embedded service with few and with many entities stored. Vehicles are
 * preloaded by POST /api/v5/bulk/vehicles (10,000, then up to `--growth-large` within
 * `--growth-budget` seconds); at each size, GET p99 of random stored vehicles and PUT throughput of
 * new ones. Targets: the large store's GET p99 at most 1.5× and PUT throughput at least 0.8× the
 * small one's.
 */
import { vehicleDoc } from '../lib/documents.mjs';
import { EMB_TOKEN, startEmbedded } from '../lib/services.mjs';
import { fmt, idMaker, load, log, percentile, request } from '../lib/util.mjs';

/** `count` GETs of `pickPath()` by `concurrency` clients; their latencies in ms, sorted. */
async function getLatencies(url, token, count, pickPath, concurrency = 4) {
  const lat = [];
  let left = count;
  const worker = async () => {
    while (left-- > 0) {
      const t = performance.now();
      const r = await request(url + pickPath(), { token });
      lat.push(performance.now() - t);
      if (r.status !== 200) throw new Error(`GET answered ${r.status}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return lat.sort((a, b) => a - b);
}

export async function growth(ctx) {
  const { cfg } = ctx;
  log('\n== growth, embedded: GET p99 and PUT throughput with few and with many entities stored');
  const emb = await startEmbedded(ctx);
  const ids = idMaker('76000000');
  let stored = 0;
  const preload = async (upTo, budgetS) => {
    const t0 = Date.now();
    const batch = 10_000;
    let next = stored;
    const worker = async () => {
      while (next < upTo && Date.now() - t0 < budgetS * 1000) {
        const from = next;
        const to = Math.min(upTo, from + batch);
        next = to;
        const docs = [];
        for (let i = from; i < to; i++) docs.push(vehicleDoc(ids.at(i), i));
        const r = await request(`${emb.url}/api/v5/bulk/vehicles`, { method: 'POST', token: EMB_TOKEN, body: `[${docs.join(',')}]` });
        if (r.status !== 200 || JSON.parse(r.body).accepted !== to - from)
          throw new Error(`preload bulk answered ${r.status}: ${r.body.slice(0, 200)}`);
        stored = Math.max(stored, to);
      }
    };
    await Promise.all([worker(), worker()]);
    const s = (Date.now() - t0) / 1000;
    log(`    preloaded up to ${fmt(stored, 0)} vehicles (${fmt(s)} s)`);
  };
  const measure = async (label) => {
    const count = stored;
    await getLatencies(emb.url, EMB_TOKEN, 1_000, () => `/api/v5/vehicles/${ids.at(Math.floor(Math.random() * count))}`); // warm-up
    const lat = await getLatencies(
      emb.url,
      EMB_TOKEN,
      cfg.growthGets,
      () => `/api/v5/vehicles/${ids.at(Math.floor(Math.random() * count))}`,
    );
    const putIds = idMaker();
    let i = 0;
    await load({
      url: emb.url,
      token: EMB_TOKEN,
      method: 'PUT',
      path: '/api/v5/vehicles',
      bodyFn: () => vehicleDoc(putIds.at(i), i++),
      duration: cfg.warmup || 1,
      connections: cfg.connections,
    });
    const put = await load({
      url: emb.url,
      token: EMB_TOKEN,
      method: 'PUT',
      path: '/api/v5/vehicles',
      bodyFn: () => vehicleDoc(putIds.at(i), i++),
      duration: cfg.duration,
      connections: cfg.connections,
    });
    const m = { count, p50: percentile(lat, 50), p99: percentile(lat, 99), putRps: put.rps, putBad: put.non2xx + put.errors };
    log(`    ${label}: ${fmt(count, 0)} stored: GET p50 ${fmt(m.p50)} ms p99 ${fmt(m.p99)} ms; PUT vehicle ${fmt(m.putRps)} req/s`);
    return m;
  };
  try {
    await preload(cfg.growthSmall, 3600);
    const small = await measure('small');
    const tPre = Date.now();
    await preload(cfg.growthLarge, cfg.growthPreloadBudgetS);
    const preloadRate = (stored - cfg.growthSmall) / ((Date.now() - tPre) / 1000);
    const large = await measure('large');
    const reduced = large.count < cfg.growthLarge;
    const why = reduced
      ? `REDUCED: ${fmt(large.count, 0)} stored instead of ${fmt(cfg.growthLarge, 0)} (preload budget ${cfg.growthPreloadBudgetS} s at ${fmt(preloadRate)} vehicles/s)`
      : `${fmt(large.count, 0)} stored (preloaded by POST /api/v5/bulk/vehicles at ${fmt(preloadRate)}/s)`;
    ctx.addRow({
      scenario: `growth: GET vehicle p99 with ${fmt(large.count, 0)} vs ${fmt(small.count, 0)} stored, embedded`,
      figure: large.p99,
      unit: 'ms',
      baseline: small.p99,
      target: '<= 1.5',
      status: reduced ? 'reduced' : undefined,
      note: `${why}; random ids, 4 concurrent clients, p50 ${fmt(large.p50)} vs ${fmt(small.p50)} ms`,
    });
    ctx.addRow({
      scenario: `growth: PUT vehicle throughput with ${fmt(large.count, 0)} vs ${fmt(small.count, 0)} stored, embedded`,
      figure: large.putRps,
      unit: 'req/s',
      baseline: small.putRps,
      target: '>= 0.8',
      ...(large.putBad + small.putBad > 0 ? { pass: false } : {}),
      note: `${why}; new ids, ${cfg.connections} connections`,
    });
  } finally {
    await emb.stop();
  }
}
