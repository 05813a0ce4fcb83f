/**
 * The fleet page (/) against its targets: first render of 10,000 vehicles, frames per second while
 * 1,000 positions a second arrive, and the size of the page's own code. After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/web/fleet-page.mjs [vehicles=10000] [rate=1000] [seconds=5]
 *
 * 1. Code size: what the fleet page's index.html loads from services/web/dist/assets: its own
 *    chunk (index-*.js, with the bundler's runtime and modulepreload chunks and its own CSS) and
 *    the vendor chunk (Leaflet, topojson-client, world-atlas: services/web/vite.config.mjs splits
 *    them off), gzipped here with zlib (level 9). The API docs page's chunks (docs-*, swagger-ui-*)
 *    are not the fleet page's.
 * 2. First render and 3. frame rate, on `otm serve` with a fresh data folder, as
 *    test/browser/fleet-measure.ts measures them (the browser test fleet-performance prints the
 *    same figures for 10,000 vehicles at 1,000 positions a second).
 * Targets (docs/web.md): first render ≤ 2 s, ≥ 30 fps at 1,000 updates/s, own code ≤ 150 KB gzipped.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServe, stop } from '../../../test/process.ts';
import { describeFigures, measureFleetPage } from '../../../test/browser/fleet-measure.ts';

const [vehiclesArg = '10000', rateArg = '1000', secondsArg = '5'] = process.argv.slice(2);
const VEHICLES = Number(vehiclesArg);
const RATE = Number(rateArg);
const SECONDS = Number(secondsArg);
const TOKEN = 'web-diag-token-1';
const DIST = fileURLToPath(new URL('../../../services/web/dist/', import.meta.url));
const CHROMIUM = process.env.OTM_CHROMIUM ?? '/usr/bin/chromium';

const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
const verdict = (ok) => (ok ? 'meets' : 'MISSES');

// --- 1. Code size ---------------------------------------------------------------------------
const assets = [...fs.readFileSync(path.join(DIST, 'index.html'), 'utf8').matchAll(/"\/assets\/([^"]+)"/g)].map((m) => m[1]);
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

// --- 2. First render and 3. frame rate (test/browser/fleet-measure.ts) -------------------------
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-web-diag-'));
const otm = await startServe({ OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:acme:read+write` });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
try {
  const f = await measureFleetPage({ url: otm.url, token: TOKEN, browser, vehicles: VEHICLES, rate: RATE, seconds: SECONDS });
  if (f.markers !== VEHICLES) throw new Error(`the page drew ${f.markers} markers, not ${VEHICLES}`);
  console.log(`fleet page, ${VEHICLES} vehicles, chromium ${browser.version()}, ${os.cpus().length} CPU ${os.cpus()[0]?.model ?? ''}`);
  console.log(
    `own code:     ${kb(ownGz)} gzipped (JS ${kb(ownJs.raw)} → ${kb(ownJs.gz)}, CSS ${kb(ownCss.raw)} → ${kb(ownCss.gz)}); target ≤ 150 KB: ${verdict(ownGz <= 150 * 1024)}`,
  );
  console.log(`vendor chunk: ${kb(vendor.gz)} gzipped (${kb(vendor.raw)}): Leaflet, topojson-client, world-atlas land 110m, Leaflet's CSS`);
  const [render, frames] = describeFigures(f);
  console.log(`${render}; target ≤ 2000 ms: ${verdict(f.firstRenderMs <= 2000)}`);
  console.log(`${frames}; target ≥ 30 fps: ${verdict(f.fps >= 30)}`);
  if (f.pageErrors.length > 0) console.log(`page errors: ${f.pageErrors.join('; ')}`);
} finally {
  await browser.close();
  await stop(otm);
  fs.rmSync(dataDir, { recursive: true, force: true });
}
