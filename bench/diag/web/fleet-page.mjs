/**
 * The fleet page (/) against its targets: first render of 10,000 vehicles, frames per second while
 * 1,000 positions a second arrive, and the size of the page's own code. After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/web/fleet-page.mjs [vehicles=10000] [rate=1000] [seconds=5]
 *
 * 1. Code size: the page's own chunk (services/web/dist/assets/index-*.js, with the bundler's
 *    runtime chunk and its own CSS) and the vendor chunk (Leaflet, topojson-client, world-atlas:
 *    services/web/vite.config.mjs splits them off), gzipped here with zlib (level 9).
 * 2. First render: `otm serve` on a fresh data folder gets one location event for each of
 *    `vehicles` vehicles (POST /api/v5/bulk/events, batches of 5,000); then Debian's chromium
 *    (playwright-core, 1280×900, the token already in sessionStorage) opens the page; the time is
 *    from navigation start to the page setting `document.body.dataset.markers` to the count (set
 *    after the frame that drew them), read in the page with performance.now().
 * 3. Frame rate: for `seconds` seconds, `rate` location events a second of existing vehicles (a bulk
 *    POST every 100 ms) reach the page through the stream; the page counts requestAnimationFrame
 *    callbacks meanwhile. Prints the frames a second, the longest frame and the moves applied.
 * Targets (docs/web.md): first render ≤ 2 s, ≥ 30 fps at 1,000 updates/s, own code ≤ 150 KB gzipped.
 */
/* global window, document, MutationObserver, requestAnimationFrame -- in page.evaluate and addInitScript: run in the page */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServe, stop } from '../../../test/process.ts';

const [vehiclesArg = '10000', rateArg = '1000', secondsArg = '5'] = process.argv.slice(2);
const VEHICLES = Number(vehiclesArg);
const RATE = Number(rateArg);
const SECONDS = Number(secondsArg);
const TOKEN = 'web-diag-token-1';
const H = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const DIST = fileURLToPath(new URL('../../../services/web/dist/', import.meta.url));
const CHROMIUM = process.env.OTM_CHROMIUM ?? '/usr/bin/chromium';

const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
const verdict = (ok) => (ok ? 'meets' : 'MISSES');

// --- 1. Code size ---------------------------------------------------------------------------
const assets = fs.readdirSync(path.join(DIST, 'assets'));
const size = (filter) => {
  let raw = 0;
  let gz = 0;
  for (const f of assets.filter(filter)) {
    const body = fs.readFileSync(path.join(DIST, 'assets', f));
    raw += body.length;
    gz += gzipSync(body, { level: 9 }).length;
  }
  return { raw, gz };
};
const ownJs = size((f) => f.endsWith('.js') && !f.startsWith('vendor'));
const ownCss = size((f) => f.endsWith('.css') && !f.startsWith('vendor'));
const vendor = size((f) => f.startsWith('vendor'));
if (vendor.raw === 0) throw new Error('no vendor chunk in services/web/dist/assets: npm run build');
const ownGz = ownJs.gz + ownCss.gz;

// --- 2. First render ------------------------------------------------------------------------
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-web-diag-'));
const otm = await startServe({ OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:acme:read+write` });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
try {
  const vehicles = Array.from({ length: VEHICLES }, () => randomUUID());
  const side = Math.ceil(Math.sqrt(VEHICLES));
  const at = (i, jitter = 0) => ({ lat: 44 + (Math.floor(i / side) / side) * 10 + jitter, lon: -2 + ((i % side) / side) * 16 + jitter });
  const event = (i, time, jitter) => ({
    eventType: 'locationUpdateEvent',
    lifecycle: 'actual',
    creationDate: new Date(time).toISOString(),
    vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicles[i] },
    geoReference: { type: 'latLonPointGeoReference', ...at(i, jitter) },
  });
  const bulk = async (events) => {
    const res = await fetch(`${otm.url}/api/v5/bulk/events`, { method: 'POST', headers: H, body: JSON.stringify(events) });
    if (res.status !== 200) throw new Error(`bulk: ${res.status} ${await res.text()}`);
  };
  const t0 = Date.now() - 60_000;
  const ingestStart = performance.now();
  for (let from = 0; from < VEHICLES; from += 5000) {
    await bulk(Array.from({ length: Math.min(5000, VEHICLES - from) }, (_, k) => event(from + k, t0, 0)));
  }
  const ingestMs = performance.now() - ingestStart;

  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript((token) => {
    sessionStorage.setItem('otm-token', token);
    // When the page sets data-markers: performance.now() (from navigation start) and the count.
    new MutationObserver(() => {
      const n = document.body?.dataset.markers;
      if (n !== undefined && window.__markersAt === undefined) window.__markersAt = { n: Number(n), ms: performance.now() };
    }).observe(document, { attributes: true, subtree: true, attributeFilter: ['data-markers'] });
  }, TOKEN);
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${otm.url}/`);
  await page.waitForFunction(() => window.__markersAt !== undefined, undefined, { timeout: 60_000 });
  const first = await page.evaluate(() => window.__markersAt);
  if (first.n !== VEHICLES) throw new Error(`the page drew ${first.n} markers, not ${VEHICLES}`);
  await page.getByText('following changes').waitFor({ timeout: 10_000 });

  // --- 3. Frames a second under 1,000 updates a second ----------------------------------------
  await page.evaluate(() => {
    const s = { frames: 0, longest: 0, last: 0, start: 0, stop: false };
    window.__fps = s;
    const tick = (t) => {
      if (s.start === 0) s.start = t;
      else s.longest = Math.max(s.longest, t - s.last);
      s.last = t;
      s.frames++;
      if (!s.stop) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  const movesBefore = Number(await page.evaluate(() => document.body.dataset.moves ?? '0'));
  const perBatch = Math.round(RATE / 10);
  const feedStart = performance.now();
  let sent = 0;
  for (let b = 0; b < SECONDS * 10; b++) {
    const due = feedStart + b * 100;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const now = Date.now();
    await bulk(Array.from({ length: perBatch }, (_, k) => event((b * perBatch + k) % VEHICLES, now, 0.05 * ((b % 4) + 1))));
    sent += perBatch;
  }
  const feedMs = performance.now() - feedStart;
  await page.waitForTimeout(500); // the last batch's stream messages
  const fps = await page.evaluate(() => {
    const s = window.__fps;
    s.stop = true;
    return { frames: s.frames, ms: s.last - s.start, longest: s.longest };
  });
  const moves = Number(await page.evaluate(() => document.body.dataset.moves ?? '0')) - movesBefore;
  const rate = (fps.frames - 1) / (fps.ms / 1000);

  console.log(
    `fleet page, ${VEHICLES} vehicles (ingest ${Math.round(ingestMs)} ms), chromium ${browser.version()}, ${os.cpus().length} CPU ${os.cpus()[0]?.model ?? ''}`,
  );
  console.log(
    `own code:     ${kb(ownGz)} gzipped (JS ${kb(ownJs.raw)} → ${kb(ownJs.gz)}, CSS ${kb(ownCss.raw)} → ${kb(ownCss.gz)}); target ≤ 150 KB: ${verdict(ownGz <= 150 * 1024)}`,
  );
  console.log(`vendor chunk: ${kb(vendor.gz)} gzipped (${kb(vendor.raw)}): Leaflet, topojson-client, world-atlas land 110m, Leaflet's CSS`);
  console.log(
    `first render: ${Math.round(first.ms)} ms from navigation to ${first.n} markers drawn; target ≤ 2000 ms: ${verdict(first.ms <= 2000)}`,
  );
  console.log(
    `frame rate:   ${rate.toFixed(1)} fps over ${(fps.ms / 1000).toFixed(1)} s (longest frame ${Math.round(fps.longest)} ms) while ${sent} positions were sent in ${(feedMs / 1000).toFixed(1)} s (${Math.round(sent / (feedMs / 1000))}/s), ${moves} moves applied; target ≥ 30 fps: ${verdict(rate >= 30)}`,
  );
  if (errors.length > 0) console.log(`page errors: ${errors.join('; ')}`);
} finally {
  await browser.close();
  await stop(otm);
  fs.rmSync(dataDir, { recursive: true, force: true });
}
