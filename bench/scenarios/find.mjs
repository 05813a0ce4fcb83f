/**
 * Group `find`: the find extensions of the embedded service against themselves, with the store
 * filled in-process first (through the same entity worker semantics and event store writes the
 * service uses, much faster than over HTTP):
 *
 * - list: p99 of page 10,000 of `GET /api/v5/vehicles?limit=100` (quick: page 1,000) with
 *   `findEntities` vehicles stored, against page 1; target at most 1.5×;
 * - positions: p50 of `GET /api/v5/vehicles/positions` for 10,000 vehicles against the p50 of a
 *   GET by id; target at most 20×; once with the fleet still, once with a vehicle's location
 *   event PUT before each read (the answer is then made again);
 * - track: one vehicle-day at 1 Hz (86,400 positions, format=ndjson, the whole window) with
 *   `findEventsSmall` and with `findEventsLarge` location events stored; target at most 2×; and its
 *   rate against the store reading the same track alone (in-process `track()`); target at least 0.3×;
 * - feed: reading the change feed from its start over HTTP (pages of 1,000) against the store's own
 *   read of the same entries (in-process `feed.read`); target at least 0.3×.
 * Requests are made one at a time, the two sides of each comparison interleaved, so that both see
 * the same moments of a noisy machine, every other round in the reverse order (ABBA).
 */
import fs from 'node:fs';
import { openEmbeddedStores } from '../../packages/embedded/dist/index.js';
import { applyChanges, createLogger, TOPICS } from '../../packages/core/dist/index.js';
import { EMB_TOKEN, TENANT, startEmbedded } from '../lib/services.mjs';
import { fmt, log, median, mkTemp, percentile, request } from '../lib/util.mjs';

const DAY0 = Date.parse('2026-03-02T00:00:00Z');
const TRACKED = '6b3e1f40-0c1a-4f7e-9a51-00000000aaaa';
const uuid = (prefix, i) => `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
const vehicleKey = (i) => uuid('6c000000', i);

function locationJson(id, vehicle, t, i) {
  return (
    `{"eventType":"locationUpdateEvent","id":"${id}","lifecycle":"actual","creationDate":"${new Date(t).toISOString()}",` +
    `"geoReference":{"type":"latLonPointGeoReference","lat":${(52 + (i % 1000) / 10000).toFixed(4)},"lon":${(5.4 + (i % 977) / 10000).toFixed(4)},` +
    `"speed":{"value":${50 + (i % 30)},"unit":"km/h"},"heading":{"value":${i % 360},"unit":"degrees"}},` +
    `"vehicle":{"associationType":"reference","entityType":"vehicle","uuid":"${vehicle}"}}`
  );
}

/** Writes events `from`..`to` (exclusive) of the fill: the tracked vehicle's day first, then others on other days. */
async function writeEvents(events, from, to) {
  for (let b = from; b < to; b += 10_000) {
    const writes = [];
    for (let i = b; i < Math.min(to, b + 10_000); i++) {
      const id = uuid('6d000000', i);
      const json =
        i < 86_400
          ? locationJson(id, TRACKED, DAY0 + i * 1000, i)
          : locationJson(id, vehicleKey(i % 10_000), DAY0 + 86_400_000 + (i % 2_000_000) * 1000, i);
      writes.push({ op: 'put', tenant: TENANT, doc: { kind: 'events', key: id, lifecycleRank: 4, json, value: JSON.parse(json) } });
    }
    await events.write(writes);
  }
}

/** Stores `n` vehicles through the entity worker's semantics, 5,000 a unit. */
async function writeVehicles(entities, n) {
  const logger = createLogger('silent');
  for (let b = 0; b < n; b += 5_000) {
    const batch = [];
    for (let i = b; i < Math.min(n, b + 5_000); i++) {
      const key = vehicleKey(i);
      batch.push({
        topic: TOPICS.entities,
        key,
        message: {
          v: 1,
          op: 'put',
          tenant: TENANT,
          kind: 'vehicles',
          key,
          acceptedAt: Date.now(),
          doc: { id: key, name: `Truck ${i}`, licensePlate: `BX-${i}` },
        },
      });
    }
    await entities.unit((tx) => applyChanges(tx, batch, { logger }));
  }
}

/** A GET that must answer 200, with the time it took (ms). */
const get = async (url, path) => {
  const t0 = process.hrtime.bigint();
  const r = await request(`${url}${path}`, { token: EMB_TOKEN });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${r.body.slice(0, 200)}`);
  return { ...r, ms };
};

/** p50 and p99 (ms) of each path, asked `n` times one at a time, the paths interleaved (ABBA). */
async function latencies(url, paths, n) {
  const ms = paths.map(() => []);
  for (let i = 0; i < n; i++) {
    // Every other round in the reverse order: a pause that the request before leaves behind (a
    // collection, a flush) falls on each path as often.
    for (let k = 0; k < paths.length; k++) {
      const j = i % 2 === 0 ? k : paths.length - 1 - k;
      ms[j].push((await get(url, paths[j])).ms);
    }
  }
  return ms.map((xs) => {
    const s = xs.sort((a, b) => a - b);
    return { p50: percentile(s, 50), p99: percentile(s, 99) };
  });
}

/** Seconds to read the tracked vehicle's day over HTTP (the body counted, not kept). */
async function trackSeconds(url) {
  const from = new Date(DAY0).toISOString();
  const to = new Date(DAY0 + 86_400_000).toISOString();
  const t0 = process.hrtime.bigint();
  const r = await get(url, `/api/v5/vehicles/${TRACKED}/track?from=${from}&to=${to}&format=ndjson`);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const lines = r.body.split('\n').length - 1;
  if (lines !== 86_400) throw new Error(`the track has ${lines} points, not 86,400`);
  return s;
}

export async function find(ctx) {
  const { cfg } = ctx;
  const entitiesN = cfg.findEntities;
  const deepPage = Math.min(10_000, Math.floor(entitiesN / 100) - 1);
  log(
    `\n== find, embedded: ${fmt(entitiesN)} vehicles; track day of 86,400 positions with ${fmt(cfg.findEventsSmall)} and ${fmt(cfg.findEventsLarge)} events`,
  );
  const dataDir = mkTemp('otm-bench-find-');
  // 1. Fill: vehicles, and the small event fill (the tracked day, then 10,000 other vehicles).
  let stores = openEmbeddedStores(dataDir);
  let t0 = Date.now();
  await writeVehicles(stores.entities, entitiesN);
  log(`    ${fmt(entitiesN)} vehicles stored in ${fmt((Date.now() - t0) / 1000)} s`);
  t0 = Date.now();
  await writeEvents(stores.events, 0, cfg.findEventsSmall);
  log(`    ${fmt(cfg.findEventsSmall)} location events stored in ${fmt((Date.now() - t0) / 1000)} s`);
  await stores.close();

  // 2. The service: lists, positions, track (small), the feed over HTTP.
  let emb = await startEmbedded(ctx, { OTM_DATA_DIR: dataDir });
  let feedHttp;
  let trackSmall;
  try {
    // The cursor of the deep page: walked to with pages of 1,000.
    let next = '/api/v5/vehicles?limit=1000';
    for (let p = 0; p < deepPage / 10; p++) next = JSON.parse((await get(emb.url, next)).body).next;
    const cursor = new URL(next, emb.url).searchParams.get('cursor');
    const first = '/api/v5/vehicles?limit=100';
    const deep = `/api/v5/vehicles?limit=100&cursor=${encodeURIComponent(cursor)}`;
    await latencies(emb.url, [first, deep], 50);
    const [l1, ld] = await latencies(emb.url, [first, deep], cfg.findRequests);
    ctx.addRow({
      scenario: `list page ${fmt(deepPage + 1)} vs page 1 (limit=100, ${fmt(entitiesN)} vehicles), p99, embedded`,
      figure: ld.p99,
      baseline: l1.p99,
      unit: 'ms',
      target: '<= 1.5',
      note: `p50 ${fmt(ld.p50)} vs ${fmt(l1.p50)} ms; ${cfg.findRequests} requests each, one at a time`,
    });

    const one = `/api/v5/vehicles/${vehicleKey(1)}`;
    const positions = '/api/v5/vehicles/positions';
    const count = JSON.parse((await get(emb.url, positions)).body).items.length;
    await latencies(emb.url, [one, positions], 20);
    const [g, p] = await latencies(emb.url, [one, positions], Math.max(50, cfg.findRequests / 4));
    ctx.addRow({
      scenario: `latest positions of ${fmt(count)} vehicles vs GET by id, p50, embedded`,
      figure: p.p50,
      baseline: g.p50,
      unit: 'ms',
      target: '<= 20',
      note: `p99 ${fmt(p.p99)} vs ${fmt(g.p99)} ms`,
    });
    // The same while the fleet moves: one vehicle's location event is PUT before each read.
    const moved = [];
    const gets = [];
    const reads = Math.max(50, cfg.findRequests / 4);
    for (let i = 0; i < reads + 10; i++) {
      const id = uuid('6e000000', i);
      const body = locationJson(id, vehicleKey((i * 37) % 10_000), DAY0 + 10 * 86_400_000 + i * 1000, i);
      const put = await request(`${emb.url}/api/v5/events`, { method: 'PUT', token: EMB_TOKEN, body });
      if (put.status !== 200) throw new Error(`PUT of a location event: ${put.status} ${put.body.slice(0, 200)}`);
      const ms = (await get(emb.url, positions)).ms;
      const gms = (await get(emb.url, one)).ms;
      if (i >= 10) (moved.push(ms), gets.push(gms));
    }
    const [gm, pm] = [gets, moved].map((xs) => xs.sort((a, b) => a - b));
    ctx.addRow({
      scenario: `latest positions of ${fmt(count)} vehicles, one moved before each read, vs GET by id, p50, embedded`,
      figure: percentile(pm, 50),
      baseline: percentile(gm, 50),
      unit: 'ms',
      target: '<= 20',
      note: `p99 ${fmt(percentile(pm, 99))} vs ${fmt(percentile(gm, 99))} ms; the read waits for the moved event's index commit`,
    });

    await trackSeconds(emb.url);
    const xs = [];
    for (let i = 0; i < cfg.trackRuns; i++) xs.push(await trackSeconds(emb.url));
    trackSmall = median(xs);

    t0 = process.hrtime.bigint();
    let entries = 0;
    next = '/api/v5/changes?limit=1000';
    while (entries < cfg.findFeedEntries) {
      const page = JSON.parse((await get(emb.url, next)).body);
      entries += page.items.length;
      if (page.items.length === 0) break;
      next = page.next;
    }
    feedHttp = { entries, s: Number(process.hrtime.bigint() - t0) / 1e9 };
  } finally {
    // Stops the service (and removes the empty folder it was given besides ours).
    await emb.stop();
  }

  // 3. The store alone: the same track and feed entries, in-process; then the large fill.
  stores = openEmbeddedStores(dataDir);
  let trackStore;
  let feedStore;
  try {
    const xs = [];
    for (let i = 0; i < cfg.trackRuns; i++) {
      const s0 = process.hrtime.bigint();
      let n = 0;
      for await (const pt of stores.events.track({ tenant: TENANT, vehicle: TRACKED, from: DAY0, to: DAY0 + 86_400_000 }))
        n += pt.doc.length > 0 ? 1 : 0;
      if (n !== 86_400) throw new Error(`store track: ${n} points`);
      xs.push(Number(process.hrtime.bigint() - s0) / 1e9);
    }
    trackStore = median(xs);
    const s0 = process.hrtime.bigint();
    let entries = 0;
    let after;
    while (entries < feedHttp.entries) {
      const page = await stores.entities.feed.read({ tenant: TENANT, limit: 1000, ...(after ? { after } : {}) });
      // What the query adds for telemetry: the document of each put, read from the event log.
      await Promise.all(
        page.entries.map((e) =>
          e.doc === undefined && e.op === 'put' ? stores.events.get(TENANT, e.kind, e.key, e.lifecycleRank) : undefined,
        ),
      );
      entries += page.entries.length;
      if (page.entries.length === 0 || page.next === undefined) break;
      after = page.next;
    }
    feedStore = { entries, s: Number(process.hrtime.bigint() - s0) / 1e9 };
    t0 = Date.now();
    await writeEvents(stores.events, cfg.findEventsSmall, cfg.findEventsLarge);
    log(`    ${fmt(cfg.findEventsLarge - cfg.findEventsSmall)} more location events stored in ${fmt((Date.now() - t0) / 1000)} s`);
  } finally {
    await stores.close();
  }
  ctx.addRow({
    scenario: 'track of one vehicle-day (86,400 positions, ndjson) streamed vs read by the store alone, embedded',
    figure: 86_400 / trackSmall,
    baseline: 86_400 / trackStore,
    unit: 'points/s',
    target: '>= 0.3',
    note: `median of ${cfg.trackRuns}: ${fmt(trackSmall)} s vs ${fmt(trackStore)} s`,
  });
  ctx.addRow({
    scenario: `change feed read from its start over HTTP vs the store's own read (${fmt(feedHttp.entries)} changes), embedded`,
    figure: feedHttp.entries / feedHttp.s,
    baseline: feedStore.entries / feedStore.s,
    unit: 'changes/s',
    target: '>= 0.3',
    note: `pages of 1,000; the store's read includes reading each telemetry document`,
  });

  // 4. The service again: the track with the large fill.
  emb = await startEmbedded(ctx, { OTM_DATA_DIR: dataDir });
  try {
    await trackSeconds(emb.url);
    const xs = [];
    for (let i = 0; i < cfg.trackRuns; i++) xs.push(await trackSeconds(emb.url));
    const trackLarge = median(xs);
    ctx.addRow({
      scenario: `track of one vehicle-day with ${fmt(cfg.findEventsLarge)} vs ${fmt(cfg.findEventsSmall)} events stored, embedded`,
      figure: trackLarge,
      baseline: trackSmall,
      unit: 's',
      target: '<= 2.0',
      note: `median of ${cfg.trackRuns}`,
    });
  } finally {
    await emb.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}
