/**
 * Group `activity`: a vehicle's activity (`GET /api/v5/vehicles/{id}/activity`, docs/realization.md)
 * over a year of positions at one a minute (525,600 location events; quick: a month, 44,640),
 * embedded. The year is written in-process first (the event store's own writes, as `find` does),
 * then `otm serve` (with `OTM_TRACK_MAX_DAYS=366`) answers the activity of the whole year `runs`
 * times, one request at a time, interleaved with reading the same year's track as CSV (the
 * baseline: the same positions over HTTP, with their documents). Target: p95 at most 300 ms.
 *
 * The year: every day parked at home until 07:00, then until 18:00 forty minutes of driving at
 * 50 km/h and twenty parked, in turn, then home again; GPS jitter of ±15 m.
 */
import fs from 'node:fs';
import { openEmbeddedStores } from '../../packages/embedded/dist/index.js';
import { EMB_TOKEN, TENANT, startEmbedded } from '../lib/services.mjs';
import { fmt, log, median, mkTemp, percentile, request } from '../lib/util.mjs';

const YEAR0 = Date.parse('2025-01-01T00:00:00Z');
const VEHICLE = '6b3e1f40-0c1a-4f7e-9a51-00000000bbbb';
const MIN = 60_000;
const uuid = (i) => `6e000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;

/** The position at minute `i` of the year: { lat, lon, kmh }. */
function positionAt(i, rnd) {
  const minuteOfDay = i % 1440;
  const day = Math.floor(i / 1440);
  const home = { lat: 52.09, lon: 5.12 };
  // Out and back: 40 minutes of driving east or west (by the day), 20 parked, from 07:00 to 18:00.
  let drivenMin = 0;
  let moving = false;
  if (minuteOfDay >= 420 && minuteOfDay < 1080) {
    const inDay = minuteOfDay - 420;
    const hour = Math.floor(inDay / 60);
    const inHour = inDay % 60;
    moving = inHour < 40;
    // Every hour it drives 40 minutes away, or back (odd hours): at the end of the day it is home.
    const away = hour % 2 === 0;
    const progress = Math.min(inHour, 40);
    drivenMin = away ? progress : 40 - progress;
  }
  const km = (drivenMin / 60) * 50;
  const east = (day % 2 === 0 ? 1 : -1) * km;
  const j = (m) => (rnd() * m) / 111_195;
  return { lat: home.lat + j(15), lon: home.lon + (east * 1000) / (111_195 * 0.615) + j(15) / 0.615, kmh: moving ? 50 : 0 };
}

function eventJson(i, rnd) {
  const p = positionAt(i, rnd);
  return (
    `{"eventType":"locationUpdateEvent","id":"${uuid(i)}","lifecycle":"actual","creationDate":"${new Date(YEAR0 + i * MIN).toISOString()}",` +
    `"geoReference":{"type":"latLonPointGeoReference","lat":${p.lat.toFixed(6)},"lon":${p.lon.toFixed(6)},"speed":{"value":${p.kmh},"unit":"km/h"}},` +
    `"vehicle":{"associationType":"reference","entityType":"vehicle","uuid":"${VEHICLE}"}}`
  );
}

/** A GET that must answer 200: its time (ms) and body. */
async function get(url, path) {
  const t0 = process.hrtime.bigint();
  const r = await request(`${url}${path}`, { token: EMB_TOKEN });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${r.body.slice(0, 200)}`);
  return { ms, body: r.body };
}

export async function activity(ctx) {
  const minutes = ctx.cfg.activityMinutes;
  const runs = ctx.cfg.activityRuns;
  log(`\n== activity, embedded: one vehicle, ${fmt(minutes)} positions (one a minute), ${runs} requests`);
  const dataDir = mkTemp('otm-bench-activity-');
  let seed = 7;
  const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
  const stores = openEmbeddedStores(dataDir);
  const t0 = Date.now();
  try {
    for (let b = 0; b < minutes; b += 10_000) {
      const writes = [];
      for (let i = b; i < Math.min(minutes, b + 10_000); i++) {
        const json = eventJson(i, rnd);
        writes.push({ op: 'put', tenant: TENANT, doc: { kind: 'events', key: uuid(i), lifecycleRank: 4, json, value: JSON.parse(json) } });
      }
      await stores.events.write(writes);
    }
  } finally {
    await stores.close();
  }
  log(`    ${fmt(minutes)} location events stored in ${fmt((Date.now() - t0) / 1000)} s`);

  const emb = await startEmbedded(ctx, { OTM_DATA_DIR: dataDir, OTM_TRACK_MAX_DAYS: '366' });
  try {
    const q = `from=${new Date(YEAR0).toISOString()}&to=${new Date(YEAR0 + minutes * MIN).toISOString()}`;
    const activityPath = `/api/v5/vehicles/${VEHICLE}/activity?${q}`;
    const trackPath = `/api/v5/vehicles/${VEHICLE}/track?${q}&format=csv`;
    const first = JSON.parse((await get(emb.url, activityPath)).body);
    const track = await get(emb.url, trackPath);
    const points = track.body.split('\n').length - 2;
    if (points !== minutes) throw new Error(`the track has ${points} points, not ${minutes}`);
    const act = [];
    const tracks = [];
    for (let i = 0; i < runs; i++) {
      act.push((await get(emb.url, activityPath)).ms);
      // The baseline is slower: every fourth round.
      if (i % 4 === 0) tracks.push((await get(emb.url, trackPath)).ms);
    }
    const sorted = act.sort((a, b) => a - b);
    const p95 = percentile(sorted, 95);
    const trackMs = median(tracks);
    ctx.addRow({
      scenario: `activity of one vehicle-${minutes >= 525_600 ? 'year' : 'month'} (${fmt(minutes)} positions, one a minute) p95, vs reading its track as CSV, embedded`,
      figure: p95,
      baseline: trackMs,
      unit: 'ms',
      target: '<= 300 ms',
      pass: p95 <= 300,
      note:
        `p50 ${fmt(percentile(sorted, 50))} ms of ${runs}; the track ${fmt(trackMs)} ms (median of ${tracks.length}); ` +
        `${fmt(first.summary.stopCount)} stops, ${fmt(first.summary.distance.value / 1000)} km`,
    });
  } finally {
    await emb.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}
