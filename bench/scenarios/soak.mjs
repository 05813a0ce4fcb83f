/**
 * Group `soak`, run only when asked (`npm run bench -- --only soak`): a steady, bounded mix of
 * writes and reads for `--soak-minutes` (default 10) on each deployment of `--soak-deployments`
 * (default embedded,distributed), to see whether memory stays flat and every answer is a 2xx.
 *
 * The load is open-loop at a fixed rate (`--soak-rate`, default 200 requests a second, plus one
 * bulk of 500 events every 2 s), far below what the deployments sustain here, so that memory that
 * grows is not a queue. Requests go over keep-alive connections (undici pools of 16, loopback),
 * straight to `otm serve`, or writes to `otm ingress` and reads to `otm query`; at most 256 are in
 * flight, and a request due while 256 are is not sent but counted (`not sent`). The mix, per 20
 * requests of the rate:
 *
 *   9  PUT of a location event (a new id, one of a fleet of 200 vehicles, creationDate now)
 *   1  PUT of a new vehicle          1  PUT of a fleet vehicle again (an update)
 *   1  PUT of a trip with 11 inline entities: a new one, or an earlier one again (every other)
 *   2  GET of an event by id         2  GET of a vehicle by id         2  GET of a trip by id
 *   2  a list page (vehicles limit=100 or trips limit=20, following `next` up to 5 pages)
 *
 * and beside them: POST /api/v5/bulk/events of 500 events every 2 s, the track of a fleet
 * vehicle over its last minute every 5 s, the latest positions every 5 s. GETs by id ask for
 * documents whose PUT was answered at least 5 s before (ids of the fleet until there are such),
 * so that none is expected to answer 404: every answer that is not a 2xx counts as an error. The
 * documents a GET did not find are asked for again after the run, to tell late from lost.
 *
 * The same load runs `--soak-warmup` seconds (default 60) before the first period; its figures are
 * shown, not judged. Every 5 s the sampler reads VmRSS, RssAnon and RssFile of each process from
 * /proc, and a probe PUTs a vehicle and GETs it until found (visibility). Each period
 * (`--soak-period`, default 60 s) ends with the mean of the memory samples, the node processes'
 * heap and event-loop delay (GET /metrics: prom-client's nodejs_heap_size_used_bytes,
 * nodejs_external_memory_bytes, nodejs_eventloop_lag_p99_seconds), for the embedded service the
 * resident pages of the LMDB file mapped and the bytes on disk, the cores each process kept busy,
 * p50/p99 of each operation that period, the answers by status, and the probes' visibility.
 *
 * Rows judged for each deployment: the mean RSS of the last period against the second's (the
 * first settles after the warm-up) of every process of ours (the service, or each role) and their
 * sum, at most 1.10; for the embedded service also its anonymous memory (RssAnon: heap and
 * buffers, without the mapped database); and error answers = 0 (any non-2xx, failed request, or
 * request not sent). Kafka, ClickHouse and Redis are shown, not judged. The per-period tables are
 * printed as Markdown, for docs/PERFORMANCE.md, and kept in the results with every figure.
 */
import fs from 'node:fs';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Pool } from 'undici';
import { TRIP } from '../lib/documents.mjs';
import { clusterPids, cpuSeconds } from '../lib/proc.mjs';
import { DIST_TOKEN, EMB_TOKEN, startDistributed, startEmbedded } from '../lib/services.mjs';
import { fmt, idMaker, log, memoryOf, percentile, request, sleep } from '../lib/util.mjs';

/** The operations, in the order of the latency table. */
const OPS = ['PUT event', 'PUT vehicle', 'PUT trip', 'bulk 500', 'GET by id', 'list', 'track', 'positions'];
const FLEET = 200;
const BULK_EVENTS = 500;
const BULK_EVERY_MS = 2_000;
const TRACK_EVERY_MS = 5_000;
const POSITIONS_EVERY_MS = 5_000;
const SAMPLE_EVERY_MS = 5_000;
const PROBE_EVERY_MS = 5_000;
const MAX_IN_FLIGHT = 256;
/** A document is read by id only once its PUT was answered this long ago. */
const MATURE_MS = 5_000;
const MB = 1024 * 1024;

export async function soak(ctx) {
  const { cfg } = ctx;
  const deployments = cfg.soakDeployments;
  log(
    `\n== soak: ${cfg.soakMinutes} min of mixed load on each of ${deployments.join(', ')} at ${fmt(cfg.soakRate)} requests/s + ${BULK_EVENTS} events by bulk every ${BULK_EVERY_MS / 1000} s; periods of ${cfg.soakPeriod} s`,
  );
  for (const d of deployments) {
    if (d === 'embedded') await soakEmbedded(ctx);
    else await soakDistributed(ctx);
  }
}

async function soakEmbedded(ctx) {
  log('\n-- soak, embedded: otm serve (in-process bus, LMDB, event log)');
  const emb = await startEmbedded(ctx);
  try {
    const pid = emb.svc.child.pid;
    const r = await soakRun(ctx, {
      writeUrl: emb.url,
      readUrl: emb.url,
      token: EMB_TOKEN,
      ours: { service: { pid, metricsUrl: emb.url } },
      others: {},
      extra: () => ({
        ...mdbMapped(pid),
        mdbDiskMB: diskMB(emb.dataDir, /\.mdb$/),
        logDiskMB: diskMB(path.join(emb.dataDir, 'events'), /./),
      }),
    });
    report(ctx, 'embedded', r);
  } finally {
    await emb.stop();
  }
}

async function soakDistributed(ctx) {
  log('\n-- soak, distributed: otm ingress, query, worker, dispatcher on Kafka, Redis, ClickHouse');
  const { cluster, ingress, query } = await startDistributed(ctx);
  try {
    const roles = ['ingress', 'query', 'worker', 'dispatcher'];
    const ours = Object.fromEntries(
      roles.map((name) => {
        const p = cluster.processes.get(name);
        return [name, { pid: p.child.pid, metricsUrl: p.url }];
      }),
    );
    const pids = clusterPids(cluster);
    const others = Object.fromEntries(
      ['ClickHouse', 'Kafka broker', 'Redis'].filter((n) => pids[n] !== undefined).map((n) => [n, { pid: pids[n] }]),
    );
    const r = await soakRun(ctx, { writeUrl: ingress, readUrl: query, token: DIST_TOKEN, ours, others, extra: () => ({}) });
    report(ctx, 'distributed', r);
  } finally {
    await cluster.close();
  }
}

// ---------------------------------------------------------------------------------------------
// The documents

/** A location event of `vehicle` at time `t` (its creationDate: the track and positions read it). */
function eventDoc(id, vehicle, i, t) {
  return (
    `{"eventType":"locationUpdateEvent","id":"${id}","lifecycle":"actual","creationDate":"${new Date(t).toISOString()}",` +
    `"geoReference":{"type":"latLonPointGeoReference","lat":${(52 + (i % 1000) / 10000).toFixed(4)},"lon":${(5.4 + (i % 977) / 10000).toFixed(4)},` +
    `"speed":{"value":${50 + (i % 30)},"unit":"km/h"},"heading":{"value":${i % 360},"unit":"degrees"}},` +
    `"vehicle":{"associationType":"reference","entityType":"vehicle","uuid":"${vehicle}"}}`
  );
}

const vehicleBody = (id, i) => `{"entityType":"vehicle","id":"${id}","name":"Truck ${i}","vehicleType":"tractor","licensePlate":"SK-${i}"}`;

/**
 * The typical trip as trip number `n`: every UUID in it (the trip's and its inline entities', and
 * the references among them) replaced by one of its own, so that each trip is a set of entities of
 * its own; `version` changes its name, so that a PUT of the same `n` again is an update.
 */
function tripMaker() {
  const text = JSON.stringify(TRIP);
  const uuids = [...new Set(text.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g))];
  const prefixes = uuids.map(() => idMaker().prefix);
  const re = new RegExp(uuids.join('|'), 'g');
  const tripIndex = uuids.indexOf(TRIP.id);
  if (tripIndex < 0) throw new Error('the typical trip has no id');
  const idOf = (n) => `${prefixes[tripIndex]}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
  return {
    idOf,
    body(n, version) {
      const at = new Map(uuids.map((u, k) => [u, `${prefixes[k]}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`]));
      return text.replace(re, (u) => at.get(u)).replace(`"name":"${TRIP.name}"`, `"name":"${TRIP.name} #${n} v${version}"`);
    },
  };
}

/** Ids answered, readable by GET once MATURE_MS old: `add(id)`, `pick()` (undefined when none yet). */
function maturing(max = 5_000) {
  const pending = [];
  const ripe = [];
  let next = 0;
  const ripen = () => {
    const now = performance.now();
    while (pending.length > 0 && now - pending[0].t >= MATURE_MS) {
      const { id } = pending.shift();
      if (ripe.length < max) ripe.push(id);
      else ripe[next++ % max] = id;
    }
  };
  return {
    add: (id) => pending.push({ id, t: performance.now() }),
    pick() {
      ripen();
      return ripe.length === 0 ? undefined : ripe[Math.floor(Math.random() * ripe.length)];
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Memory and CPU

/**
 * The LMDB files (*.mdb) a process maps, from /proc/<pid>/smaps: their resident MB summed over
 * every mapping, and how many mappings there are. lmdb-js grows its map without unmapping the
 * smaller maps before it (when no mapSize is given), so a page of the file resident in two of them
 * counts twice here and in VmRSS, though it is one page of the page cache.
 */
function mdbMapped(pid) {
  try {
    let kb = 0;
    let maps = 0;
    let inFile = false;
    for (const line of fs.readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
      if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) {
        inFile = line.trimEnd().endsWith('.mdb');
        if (inFile) maps++;
      } else if (inFile && line.startsWith('Rss:')) kb += Number(/(\d+)/.exec(line)?.[1] ?? 0);
    }
    return { mdbMappedMB: kb / 1024, mdbMaps: maps };
  } catch {
    return { mdbMappedMB: NaN, mdbMaps: NaN };
  }
}

/** MB on disk of the files under `dir` whose name matches `re`. */
function diskMB(dir, re) {
  let bytes = 0;
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const f = path.join(d, e.name);
      if (e.isDirectory()) walk(f);
      else if (e.isFile() && re.test(e.name)) bytes += fs.statSync(f, { throwIfNoEntry: false })?.size ?? 0;
    }
  };
  try {
    walk(dir);
  } catch {
    return NaN;
  }
  return bytes / MB;
}

/**
 * prom-client's gauges of a node process (GET /metrics): { heapMB, heapTotalMB, externalMB,
 * loopP99Ms, cacheMB, cacheEntries } (the last two: its cache of latest versions, NaN in a process
 * without one), or undefined. prom-client resets its event-loop delay histogram at each scrape, so
 * `loopP99Ms` is of the time since the previous one (the period, as scraped once a period).
 */
async function metricsOf(url) {
  try {
    const r = await request(`${url}/metrics`);
    if (r.status !== 200) return undefined;
    const g = (name) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'm').exec(r.body)?.[1] ?? NaN);
    return {
      heapMB: g('nodejs_heap_size_used_bytes') / MB,
      heapTotalMB: g('nodejs_heap_size_total_bytes') / MB,
      externalMB: g('nodejs_external_memory_bytes') / MB,
      loopP99Ms: g('nodejs_eventloop_lag_p99_seconds') * 1000,
      cacheMB: g('otm_entity_cache_bytes') / MB,
      cacheEntries: g('otm_entity_cache_entries'),
    };
  } catch {
    return undefined;
  }
}

function cpuOf(pid) {
  try {
    const { user, sys } = cpuSeconds(`/proc/${pid}/stat`);
    return user + sys;
  } catch {
    return NaN;
  }
}

// ---------------------------------------------------------------------------------------------
// The run

/**
 * One soak run. `ours`: name -> { pid, metricsUrl } (judged); `others`: name -> { pid } (the
 * servers: shown, not judged); `extra(name)`: more figures of a process of ours at a period's end.
 * Resolves { periods, totals, unanswered, notFound, settings }.
 */
async function soakRun(ctx, { writeUrl, readUrl, token, ours, others, extra }) {
  const { cfg } = ctx;
  const poolOpts = { connections: 16, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 60_000, bodyTimeout: 60_000 };
  const writer = new Pool(writeUrl, poolOpts);
  const reader = readUrl === writeUrl ? writer : new Pool(readUrl, poolOpts);
  const auth = { authorization: `Bearer ${token}` };
  const jsonHeaders = { ...auth, 'content-type': 'application/json' };

  // The fleet, PUT before the clock starts, and visible before it does.
  const fleet = idMaker();
  const fleetIds = Array.from({ length: FLEET }, (_, i) => fleet.at(i));
  for (let i = 0; i < FLEET; i += 20) {
    await Promise.all(
      fleetIds.slice(i, i + 20).map(async (id, j) => {
        const r = await writer.request({ method: 'PUT', path: '/api/v5/vehicles', headers: jsonHeaders, body: vehicleBody(id, i + j) });
        const text = await r.body.text();
        if (r.statusCode !== 200) throw new Error(`PUT of a fleet vehicle answered ${r.statusCode}: ${text.slice(0, 200)}`);
      }),
    );
  }
  const until = Date.now() + 60_000;
  while ((await request(`${readUrl}/api/v5/vehicles/${fleetIds[FLEET - 1]}`, { token })).status !== 200) {
    if (Date.now() > until) throw new Error('the fleet was not visible within 60 s');
    await sleep(50);
  }

  const events = idMaker();
  const vehicles = idMaker();
  const trips = tripMaker();
  let tripCount = 0;
  let eventCount = 0;
  let vehicleCount = 0;
  const ripe = { events: maturing(), vehicles: maturing(), trips: maturing() };
  const listNext = { vehicles: undefined, trips: undefined };
  const listDepth = { vehicles: 0, trips: 0 };

  const newPeriodStats = () => ({
    lat: Object.fromEntries(OPS.map((o) => [o, []])),
    status: {},
    errors: [],
    sent: 0,
    notSent: 0,
    bulkEvents: 0,
    lags: [],
  });
  let stats = newPeriodStats();
  let inFlight = 0;
  const totals = { sent: 0, notSent: 0, errors: 0, byStatus: {}, errorSamples: [] };
  /** The paths of GETs by id answered 404 (of documents answered at least MATURE_MS before), asked again at the end. */
  const notFound = new Set();
  /** Counts an error of `op` under `label` (a status, `failed`, …) with its message. */
  const countError = (op, label, message) => {
    const key = `${op} ${label}`;
    stats.status[key] = (stats.status[key] ?? 0) + 1;
    totals.byStatus[key] = (totals.byStatus[key] ?? 0) + 1;
    totals.errors++;
    stats.errors.push(message);
    if (totals.errorSamples.length < 10) totals.errorSamples.push(message);
  };

  /** Sends one request, times it to the end of its body, counts its answer; `then(text)` on a 2xx. */
  const send = (op, pool, opts, then) => {
    if (inFlight >= MAX_IN_FLIGHT) {
      stats.notSent++;
      totals.notSent++;
      return;
    }
    inFlight++;
    stats.sent++;
    totals.sent++;
    const t0 = performance.now();
    pool
      .request(opts)
      .then(async (r) => {
        const text = await r.body.text();
        const ms = performance.now() - t0;
        if (r.statusCode >= 200 && r.statusCode < 300) {
          const key = `${op} ${r.statusCode}`;
          stats.status[key] = (stats.status[key] ?? 0) + 1;
          totals.byStatus[key] = (totals.byStatus[key] ?? 0) + 1;
          stats.lat[op].push(ms);
          then?.(text);
        } else {
          countError(op, String(r.statusCode), `${opts.method} ${opts.path.slice(0, 80)} → ${r.statusCode} ${text.slice(0, 160)}`);
          if (op === 'GET by id' && r.statusCode === 404 && notFound.size < 10_000) notFound.add(opts.path);
        }
      })
      .catch((err) => countError(op, 'failed', `${opts.method} ${opts.path.slice(0, 80)} → ${err.code ?? err.message}`))
      .finally(() => inFlight--);
  };

  const putEvent = () => {
    const i = eventCount++;
    const id = events.at(i);
    send(
      'PUT event',
      writer,
      { method: 'PUT', path: '/api/v5/events', headers: jsonHeaders, body: eventDoc(id, fleetIds[i % FLEET], i, Date.now()) },
      () => ripe.events.add(id),
    );
  };
  const putVehicle = (update) => {
    const i = vehicleCount++;
    const id = update ? fleetIds[i % FLEET] : vehicles.at(i);
    send('PUT vehicle', writer, { method: 'PUT', path: '/api/v5/vehicles', headers: jsonHeaders, body: vehicleBody(id, i) }, () =>
      update ? undefined : ripe.vehicles.add(id),
    );
  };
  const putTrip = () => {
    // Every other trip PUT is an update of an earlier trip, once there is one to read.
    const again = tripCount % 2 === 1 ? ripe.trips.pick() : undefined;
    const n = again === undefined ? tripCount : again;
    tripCount++;
    send('PUT trip', writer, { method: 'PUT', path: '/api/v5/trips', headers: jsonHeaders, body: trips.body(n, tripCount) }, () =>
      again === undefined ? ripe.trips.add(n) : undefined,
    );
  };
  const getById = (kind) => {
    let id = kind === 'trips' ? ripe.trips.pick() : ripe[kind].pick();
    if (kind === 'trips' && id !== undefined) id = trips.idOf(id);
    if (id === undefined) {
      kind = 'vehicles';
      id = fleetIds[Math.floor(Math.random() * FLEET)];
    }
    send('GET by id', reader, { method: 'GET', path: `/api/v5/${kind}/${id}`, headers: auth });
  };
  const list = (kind) => {
    const limit = kind === 'vehicles' ? 100 : 20;
    const path = listNext[kind] && listDepth[kind] < 5 ? listNext[kind] : `/api/v5/${kind}?limit=${limit}`;
    listDepth[kind] = path === listNext[kind] ? listDepth[kind] + 1 : 1;
    listNext[kind] = undefined;
    send('list', reader, { method: 'GET', path, headers: auth }, (text) => {
      try {
        const next = JSON.parse(text).next ?? undefined;
        listNext[kind] = next?.startsWith('http') ? ((u) => u.pathname + u.search)(new URL(next)) : next;
      } catch {
        listNext[kind] = undefined;
      }
    });
  };
  const MIX = [
    ...Array(9).fill(putEvent),
    () => putVehicle(false),
    () => putVehicle(true),
    putTrip,
    () => getById('events'),
    () => getById('events'),
    () => getById('vehicles'),
    () => getById('vehicles'),
    () => getById('trips'),
    () => getById('trips'),
    () => list('vehicles'),
    () => list('trips'),
  ];
  const bulk = () => {
    const docs = [];
    const t = Date.now();
    for (let k = 0; k < BULK_EVENTS; k++) {
      const i = eventCount++;
      docs.push(eventDoc(events.at(i), fleetIds[i % FLEET], i, t));
    }
    stats.bulkEvents += BULK_EVENTS;
    send('bulk 500', writer, { method: 'POST', path: '/api/v5/bulk/events', headers: jsonHeaders, body: `[${docs.join(',')}]` }, (text) => {
      const accepted = /^\{"accepted":(\d+),/.exec(text.slice(0, 40));
      if (!accepted || Number(accepted[1]) !== BULK_EVENTS)
        countError('bulk 500', 'partly accepted', `bulk accepted ${accepted?.[1] ?? '?'} of ${BULK_EVENTS}: ${text.slice(0, 160)}`);
    });
  };
  let trackN = 0;
  const track = () => {
    const to = Date.now();
    const q = `from=${new Date(to - 60_000).toISOString()}&to=${new Date(to).toISOString()}`;
    send('track', reader, { method: 'GET', path: `/api/v5/vehicles/${fleetIds[trackN++ % FLEET]}/track?${q}`, headers: auth });
  };
  const positions = () => send('positions', reader, { method: 'GET', path: '/api/v5/vehicles/positions', headers: auth });

  // The sampler: memory every SAMPLE_EVERY_MS, a period's figures at its end.
  const all = { ...ours, ...others };
  const periods = [];
  let samples = Object.fromEntries(Object.keys(all).map((n) => [n, []]));
  let cpuAt = {
    t: performance.now(),
    of: Object.fromEntries(Object.entries(all).map(([n, p]) => [n, cpuOf(p.pid)])),
    self: process.cpuUsage(),
  };
  const sample = () => {
    for (const [n, p] of Object.entries(all)) samples[n].push(memoryOf(p.pid));
  };
  const endPeriod = async (index) => {
    sample();
    const s = stats;
    stats = newPeriodStats();
    const taken = samples;
    samples = Object.fromEntries(Object.keys(all).map((n) => [n, []]));
    const now = performance.now();
    const cpuNow = Object.fromEntries(Object.entries(all).map(([n, p]) => [n, cpuOf(p.pid)]));
    const self = process.cpuUsage(cpuAt.self);
    const seconds = (now - cpuAt.t) / 1000;
    const cores = Object.fromEntries(Object.keys(all).map((n) => [n, (cpuNow[n] - cpuAt.of[n]) / seconds]));
    cores['load generator'] = (self.user + self.system) / 1e6 / seconds;
    const benchLoopP99Ms = loop.percentile(99) / 1e6;
    loop.reset();
    cpuAt = { t: now, of: cpuNow, self: process.cpuUsage() };
    const procs = {};
    for (const [n, p] of Object.entries(all)) {
      const xs = taken[n].filter((m) => Number.isFinite(m.rssMB));
      const mean = (k) => xs.reduce((a, m) => a + m[k], 0) / xs.length;
      const last = xs[xs.length - 1] ?? {};
      procs[n] = {
        ours: n in ours,
        rssMB: mean('rssMB'),
        rssEndMB: last.rssMB,
        rssMaxMB: Math.max(...xs.map((m) => m.rssMB)),
        anonMB: mean('anonMB'),
        fileMB: mean('fileMB'),
        samples: xs.length,
        cores: cores[n],
        ...(p.metricsUrl ? await metricsOf(p.metricsUrl) : {}),
        ...(n in ours ? extra(n) : {}),
      };
    }
    const ops = {};
    for (const o of OPS) {
      const xs = s.lat[o].sort((a, b) => a - b);
      ops[o] = { n: xs.length, p50: percentile(xs, 50), p99: percentile(xs, 99), max: xs[xs.length - 1] };
    }
    const everything = OPS.flatMap((o) => s.lat[o]).sort((a, b) => a - b);
    const errors = Object.entries(s.status)
      .filter(([k]) => !/ 2\d\d$/.test(k))
      .reduce((a, [, v]) => a + v, 0);
    const period = {
      index,
      endS: Math.round((now - tStart - warmMs) / 1000),
      seconds,
      sent: s.sent,
      notSent: s.notSent,
      bulkEvents: s.bulkEvents,
      errors,
      status: s.status,
      errorSamples: s.errors.slice(0, 5),
      p50: percentile(everything, 50),
      p99: percentile(everything, 99),
      ops,
      procs,
      coresLoadGenerator: cores['load generator'],
      benchLoopP99Ms,
      lag: (() => {
        const xs = s.lags.sort((a, b) => a - b);
        return { n: xs.length, p50: percentile(xs, 50), max: xs[xs.length - 1] };
      })(),
    };
    if (index === 0) warm = period;
    else periods.push(period);
    printProgress(period);
  };

  // The load, open-loop: what is due by now is sent at each tick of ~5 ms.
  const rate = cfg.soakRate;
  const durationMs = cfg.soakMinutes * 60_000;
  const periodMs = cfg.soakPeriod * 1000;
  const nPeriods = Math.max(1, Math.round(durationMs / periodMs));
  // The warm-up: the same load, untimed, before the first period (its figures shown, not judged).
  const warmMs = cfg.soakWarmup * 1000;
  let warm;
  let warmTotals;
  let warmNotFound = new Set();
  let warmedUp = warmMs === 0;
  // The visibility probe, every PROBE_EVERY_MS while the load runs: a vehicle PUT, then a GET
  // every 10 ms until it is found (given up after 30 s: counted as 30 s).
  let loadRunning = true;
  const prober = (async () => {
    for (let k = 0; loadRunning; k++) {
      const t0 = performance.now();
      const id = idMaker().next();
      const put = await request(`${writeUrl}/api/v5/vehicles`, { method: 'PUT', token, body: vehicleBody(id, k) }).catch(() => undefined);
      if (put?.status === 200) {
        const answered = performance.now();
        for (;;) {
          const g = await request(`${readUrl}/api/v5/vehicles/${id}`, { token }).catch(() => undefined);
          if (g?.status === 200 || performance.now() - answered > 30_000) break;
          await sleep(10);
        }
        stats.lags.push(performance.now() - answered);
      }
      await sleep(Math.max(0, PROBE_EVERY_MS - (performance.now() - t0)));
    }
  })();
  // The load generator's own event-loop delay: a stall here delays requests and their timing.
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const tStart = performance.now();
  let issued = 0;
  let bulks = 0;
  let tracks = 0;
  let positionReads = 0;
  let sampled = 0;
  let ended = 0;
  const pendingPeriods = [];
  sample();
  while (ended < nPeriods) {
    const el = performance.now() - tStart;
    const due = Math.floor((el / 1000) * rate);
    while (issued < due) MIX[issued++ % MIX.length]();
    for (; bulks <= Math.floor(el / BULK_EVERY_MS); bulks++) bulk();
    for (; tracks <= Math.floor(el / TRACK_EVERY_MS); tracks++) track();
    for (; positionReads <= Math.floor(el / POSITIONS_EVERY_MS); positionReads++) positions();
    if (Math.floor(el / SAMPLE_EVERY_MS) > sampled) {
      sampled++;
      sample();
    }
    if (!warmedUp && el >= warmMs) {
      warmedUp = true;
      pendingPeriods.push(endPeriod(0));
      warmTotals = structuredClone(totals);
      Object.assign(totals, { sent: 0, notSent: 0, errors: 0, byStatus: {}, errorSamples: [] });
      warmNotFound = new Set(notFound);
      notFound.clear();
    }
    if (el >= warmMs + (ended + 1) * periodMs) pendingPeriods.push(endPeriod(++ended));
    await sleep(5);
  }
  loadRunning = false;
  // The requests still in flight finish (their answers count in the last period's status counts).
  const drainUntil = Date.now() + 60_000;
  while (inFlight > 0 && Date.now() < drainUntil) await sleep(20);
  await Promise.all(pendingPeriods);
  await prober;
  // The documents a GET by id did not find: asked again, now that the load has stopped.
  const recheck = async (paths, when) => {
    let stillMissing = 0;
    const samples = [];
    const all = [...paths];
    for (let i = 0; i < all.length; i += 32)
      await Promise.all(
        all.slice(i, i + 32).map(async (p) => {
          const r = await request(`${readUrl}${p}`, { token }).catch(() => ({ status: 0 }));
          if (r.status !== 200) {
            stillMissing++;
            if (samples.length < 5) samples.push(`${p} → ${r.status}`);
          }
        }),
      );
    if (all.length > 0)
      log(
        `    ${when}: ${all.length} documents a GET by id did not find: ${stillMissing} still not found after the run${samples.length ? ` (${samples.join(', ')})` : ''}`,
      );
    return { count: all.length, stillMissing, samples };
  };
  const notFoundWarm = await recheck(warmNotFound, 'warm-up');
  const notFoundTimed = await recheck(notFound, 'timed periods');
  loop.disable();
  const last = periods[periods.length - 1];
  for (const [k, v] of Object.entries(stats.status)) {
    last.status[k] = (last.status[k] ?? 0) + v;
    if (!/ 2\d\d$/.test(k)) last.errors += v;
  }
  if (inFlight > 0) totals.errors += inFlight;
  await writer.close();
  if (reader !== writer) await reader.close();
  return {
    periods,
    totals,
    unanswered: inFlight,
    notFound: notFoundTimed,
    warm: warm && { period: warm, totals: warmTotals, notFound: notFoundWarm },
    settings: { rate, periodS: cfg.soakPeriod, minutes: cfg.soakMinutes, warmupS: cfg.soakWarmup, fleet: FLEET },
  };
}

// ---------------------------------------------------------------------------------------------
// The output

const mbs = (x) => fmt(x, 0);
const msf = (x) => (x > 30_000 ? '> 30 s' : fmt(x));

function printProgress(p) {
  const mem = Object.entries(p.procs)
    .filter(([, v]) => v.ours)
    .map(([n, v]) => `${n} ${mbs(v.rssMB)} MB (heap ${mbs(v.heapMB)})`)
    .join(', ');
  log(
    `    ${p.index === 0 ? 'warm-up' : `period ${p.index} (${p.endS} s)`}: ${fmt(p.sent, 0)} requests${p.notSent ? `, ${p.notSent} NOT SENT` : ''}, ${p.errors} errors, p50 ${fmt(p.p50)} ms p99 ${fmt(p.p99)} ms; RSS ${mem}; visible after ≤ ${msf(p.lag.max)} ms`,
  );
}

/** The two tables of a deployment, as Markdown; returns their lines. */
function tables(dep, r) {
  const names = Object.keys(r.periods[0].procs);
  const ours = names.filter((n) => r.periods[0].procs[n].ours);
  const others = names.filter((n) => !r.periods[0].procs[n].ours);
  const embedded = dep === 'embedded';
  const period = (p) => (p.index === 0 ? `warm-up (${r.settings.warmupS} s, not judged)` : `${p.index} (${p.endS} s)`);
  const shown = [r.warm?.period, ...r.periods].filter(Boolean);
  const lines = [];
  const head1 = ['period', 'requests', 'errors'];
  for (const n of ours)
    head1.push(
      ...(embedded
        ? [`${n} RSS MB`, 'anon', 'file', 'LMDB mapped', 'heap used', 'LMDB on disk', 'event log on disk', 'cores']
        : [`${n} RSS MB`, 'heap', 'cores']),
    );
  if (ours.length > 1) head1.push('ours RSS MB');
  for (const n of others) head1.push(`${n} RSS MB`);
  head1.push('visible after, p50 / max ms');
  lines.push(`| ${head1.join(' | ')} |`, `|${head1.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`);
  for (const p of shown) {
    const c = [period(p), fmt(p.sent, 0) + (p.notSent ? ` (${p.notSent} not sent)` : ''), String(p.errors)];
    for (const n of ours) {
      const v = p.procs[n];
      c.push(
        ...(embedded
          ? [
              mbs(v.rssMB),
              mbs(v.anonMB),
              mbs(v.fileMB),
              `${mbs(v.mdbMappedMB)} (${v.mdbMaps} maps)`,
              mbs(v.heapMB),
              mbs(v.mdbDiskMB),
              mbs(v.logDiskMB),
              fmt(v.cores),
            ]
          : [mbs(v.rssMB), mbs(v.heapMB), fmt(v.cores)]),
      );
    }
    if (ours.length > 1) c.push(mbs(ours.reduce((a, n) => a + p.procs[n].rssMB, 0)));
    for (const n of others) c.push(mbs(p.procs[n].rssMB));
    c.push(`${msf(p.lag.p50)} / ${msf(p.lag.max)}`);
    lines.push(`| ${c.join(' | ')} |`);
  }
  lines.push('');
  const loops = ours.map((n) => `${n === 'service' ? 'service' : n} loop p99`);
  const head2 = ['period', ...OPS.map((o) => `${o} p50 / p99`), 'all p99', ...loops, 'bench loop p99'];
  lines.push(`| ${head2.join(' | ')} |`, `|${head2.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`);
  for (const p of shown)
    lines.push(
      `| ${[
        period(p),
        ...OPS.map((o) => (p.ops[o].n ? `${fmt(p.ops[o].p50)} / ${fmt(p.ops[o].p99)}` : '—')),
        fmt(p.p99),
        ...ours.map((n) => fmt(p.procs[n].loopP99Ms)),
        fmt(p.benchLoopP99Ms),
      ].join(' | ')} |`,
    );
  return lines;
}

/** The deployment's tables and its rows. */
function report(ctx, dep, r) {
  const { periods, totals } = r;
  const lines = tables(dep, r);
  log(
    `\n    soak, ${dep}: each period ${r.settings.periodS} s; RSS = mean of the samples taken every ${SAMPLE_EVERY_MS / 1000} s; heap from /metrics at the period's end; cores = CPU seconds / wall seconds; latencies in ms, from the request sent to its answer's end; loop p99 = event-loop delay p99 (ms) of each process (prom-client) and of the load generator\n`,
  );
  for (const l of lines) log(`    ${l}`);
  log('');
  const n = periods.length;
  const first = periods[1];
  const last = periods[n - 1];
  const judged = n >= 3;
  const why = judged ? '' : `NOT JUDGED: ${n} period(s); the last is compared with the second, so at least 3 are needed`;
  const which = `period ${n} vs period 2 (${r.settings.periodS} s each)`;
  const detail = {
    deployment: dep,
    settings: r.settings,
    totals,
    unanswered: r.unanswered,
    notFound: r.notFound,
    warm: r.warm,
    periods,
    tables: lines,
  };
  const ours = Object.keys(periods[0].procs).filter((k) => periods[0].procs[k].ours);
  const row = (scenario, fig, base, note, extra = {}) =>
    ctx.addRow({
      scenario,
      figure: fig,
      baseline: base,
      unit: 'MB',
      target: '<= 1.10',
      ...(judged ? {} : { pass: null, status: 'not judged' }),
      note: [why, note].filter(Boolean).join('; '),
      ...extra,
    });
  let detailGiven = false;
  const withDetail = () => (detailGiven ? {} : ((detailGiven = true), { detail }));
  if (n < 2) {
    ctx.notRun(
      `soak, ${dep}: RSS, last period vs period 2`,
      '<= 1.10',
      `only ${n} period: lengthen --soak-minutes or shorten --soak-period`,
    );
  } else {
    for (const name of ours) {
      const a = first.procs[name];
      const b = last.procs[name];
      const cache =
        b.cacheEntries > 0
          ? `; the cache of latest versions ${fmt(a.cacheEntries, 0)} → ${fmt(b.cacheEntries, 0)} documents, ${mbs(a.cacheMB)} → ${mbs(b.cacheMB)} MB of its bound`
          : '';
      const heap = `heap used ${mbs(a.heapMB)} → ${mbs(b.heapMB)} MB (of ${mbs(a.heapTotalMB)} → ${mbs(b.heapTotalMB)} MB taken), external ${mbs(a.externalMB)} → ${mbs(b.externalMB)} MB${cache}`;
      const split = `RssAnon ${mbs(a.anonMB)} → ${mbs(b.anonMB)} MB, RssFile ${mbs(a.fileMB)} → ${mbs(b.fileMB)} MB${b.mdbMappedMB !== undefined ? ` (LMDB mapped ${mbs(a.mdbMappedMB)} → ${mbs(b.mdbMappedMB)} MB in ${a.mdbMaps} → ${b.mdbMaps} mappings of the file, on disk ${mbs(a.mdbDiskMB)} → ${mbs(b.mdbDiskMB)} MB)` : ''}`;
      row(
        `soak, ${dep}: RSS of ${name === 'service' ? 'otm serve' : `otm ${name}`}, ${which}`,
        b.rssMB,
        a.rssMB,
        `${heap}; ${split}; max ${mbs(b.rssMaxMB)} MB in the last period`,
        withDetail(),
      );
      if (dep === 'embedded')
        row(
          `soak, ${dep}: anonymous memory (RssAnon: heap, buffers; no mapped file) of otm serve, ${which}`,
          b.anonMB,
          a.anonMB,
          `RSS counts the resident pages of the LMDB file, which grows with the data written: page cache the kernel can take back, not the process's own memory; ${heap}`,
        );
    }
    if (ours.length > 1) {
      const sum = (p) => ours.reduce((x, k) => x + p.procs[k].rssMB, 0);
      const others = Object.keys(periods[0].procs)
        .filter((k) => !periods[0].procs[k].ours)
        .map((k) => `${k} ${mbs(first.procs[k].rssMB)} → ${mbs(last.procs[k].rssMB)} MB`)
        .join(', ');
      row(`soak, ${dep}: RSS of ${ours.join(' + ')}, ${which}`, sum(last), sum(first), `the servers, not judged: ${others}`, withDetail());
    }
  }
  const bad = totals.errors + totals.notSent;
  const ok = Object.entries(totals.byStatus)
    .filter(([k]) => / 2\d\d$/.test(k))
    .reduce((a, [, v]) => a + v, 0);
  const nonOk = Object.entries(totals.byStatus)
    .filter(([k]) => !/ 2\d\d$/.test(k))
    .map(([k, v]) => `${k}: ${fmt(v, 0)}`);
  const byStatus = `${fmt(ok, 0)} answered 2xx${nonOk.length ? `; not 2xx: ${nonOk.join(', ')}` : ''}`;
  const w = r.warm;
  const warmNote = w
    ? `; the ${r.settings.warmupS} s warm-up before (not judged): ${fmt(w.totals.sent, 0)} requests, ${w.totals.errors + w.totals.notSent} errors${w.notFound.count ? ` (${w.notFound.count} documents ${MATURE_MS / 1000} s old answered 404 to a GET, ${w.notFound.stillMissing} still not found after the run)` : ''}, visible after ≤ ${msf(w.period.lag.max)} ms`
    : '';
  ctx.addRow({
    scenario: `soak, ${dep}: error answers in ${fmt(r.settings.minutes)} min at ${fmt(r.settings.rate)} req/s + ${BULK_EVENTS} events / ${BULK_EVERY_MS / 1000} s`,
    figure: bad,
    unit: 'errors',
    target: '= 0',
    pass: bad === 0,
    note:
      `${fmt(totals.sent, 0)} requests sent${totals.notSent ? `, ${fmt(totals.notSent, 0)} NOT SENT (${MAX_IN_FLIGHT} in flight: the rate was not held)` : ''}${r.unanswered ? `, ${r.unanswered} unanswered 60 s after the end` : ''}; ${byStatus}` +
      (r.notFound.count
        ? `; ${r.notFound.count} documents answered by their PUT at least ${MATURE_MS / 1000} s before were not found by a GET (404), ${r.notFound.stillMissing} of them still not found after the run${r.notFound.stillMissing ? ` (LOST: ${r.notFound.samples.join(', ')})` : ' (late, not lost)'}`
        : '') +
      (totals.errorSamples.length ? `; first errors: ${totals.errorSamples.slice(0, 3).join(' | ')}` : '') +
      warmNote,
    ...withDetail(),
  });
  if (n >= 2)
    ctx.addRow({
      scenario: `soak, ${dep}: p99 of every request, ${which}`,
      figure: last.p99,
      baseline: first.p99,
      unit: 'ms',
      status: 'info',
      pass: null,
      note: `p50 ${fmt(first.p50)} → ${fmt(last.p50)} ms; visible after (a vehicle PUT, then GET until found, every ${PROBE_EVERY_MS / 1000} s) max ${msf(first.lag.max)} → ${msf(last.lag.max)} ms`,
    });
}
