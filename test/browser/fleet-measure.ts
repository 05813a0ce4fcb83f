/**
 * The fleet page's performance figures, measured in Debian's chromium against a running service:
 * used by test/browser/fleet-performance.browser.test.ts (which prints them) and by
 * bench/diag/web/fleet-page.mjs (which also compares them with the targets).
 *
 * 1. First render: one location event for each of `vehicles` vehicles (POST /api/v5/bulk/events,
 *    batches of 5,000); then the page opens in a 1280×900 context with the token already in
 *    sessionStorage; the time is from navigation start to the page setting
 *    `document.body.dataset.markers` to the count (set after the frame that drew them), read in the
 *    page with performance.now().
 * 2. Frame rate: for `seconds` seconds, `rate` location events a second of existing vehicles (a bulk
 *    POST every 100 ms) reach the page through the stream; the page counts requestAnimationFrame
 *    callbacks meanwhile: the frames a second, the longest frame and the moves the page applied.
 */
import { randomUUID } from 'node:crypto';
import type { Browser, Page } from 'playwright-core';

export interface FleetFigures {
  readonly vehicles: number;
  /** Milliseconds the bulk ingest of the first positions took. */
  readonly ingestMs: number;
  /** Markers the page drew at its first render, and when (ms from navigation start). */
  readonly markers: number;
  readonly firstRenderMs: number;
  /** Frames a second while positions arrived, the longest frame (ms), over how many ms. */
  readonly fps: number;
  readonly longestFrameMs: number;
  readonly measuredMs: number;
  /** Positions sent, in how many ms, and the moves the page applied (waited for up to 10 s after). */
  readonly sent: number;
  readonly sendMs: number;
  readonly moves: number;
  readonly pageErrors: readonly string[];
  /** The page, still open (for a screenshot); the caller closes its context. */
  readonly page: Page;
}

export interface FleetRun {
  readonly url: string;
  readonly token: string;
  readonly browser: Browser;
  readonly vehicles: number;
  /** Location events a second during the frame-rate measurement. */
  readonly rate: number;
  readonly seconds: number;
}

// What the functions given to page.evaluate and addInitScript use: they run in the page, where
// these exist (the tests' TypeScript has Node's types, not the DOM's).
interface PageWindow {
  __markersAt?: { n: number; ms: number };
  __fps?: { frames: number; longest: number; last: number; start: number; stop: boolean };
}
declare const window: PageWindow;
declare const document: { body?: { dataset: Record<string, string | undefined> } };
declare const sessionStorage: { setItem(key: string, value: string): void };
declare const requestAnimationFrame: (f: (t: number) => void) => void;
declare class MutationObserver {
  constructor(f: () => void);
  observe(target: unknown, options: Record<string, unknown>): void;
}

export async function measureFleetPage(run: FleetRun): Promise<FleetFigures> {
  const headers = { authorization: `Bearer ${run.token}`, 'content-type': 'application/json' };
  const vehicles = Array.from({ length: run.vehicles }, () => randomUUID());
  const side = Math.ceil(Math.sqrt(run.vehicles));
  const at = (i: number, jitter: number) => ({
    lat: 44 + (Math.floor(i / side) / side) * 10 + jitter,
    lon: -2 + ((i % side) / side) * 16 + jitter,
  });
  const event = (i: number, time: number, jitter: number) => ({
    eventType: 'locationUpdateEvent',
    lifecycle: 'actual',
    creationDate: new Date(time).toISOString(),
    vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicles[i] },
    geoReference: { type: 'latLonPointGeoReference', ...at(i, jitter) },
  });
  const bulk = async (events: unknown[]) => {
    const res = await fetch(`${run.url}/api/v5/bulk/events`, { method: 'POST', headers, body: JSON.stringify(events) });
    if (res.status !== 200) throw new Error(`bulk: ${res.status} ${await res.text()}`);
  };

  const t0 = Date.now() - 60_000;
  const ingestStart = performance.now();
  for (let from = 0; from < run.vehicles; from += 5000) {
    await bulk(Array.from({ length: Math.min(5000, run.vehicles - from) }, (_, k) => event(from + k, t0, 0)));
  }
  const ingestMs = performance.now() - ingestStart;

  const context = await run.browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript((token: string) => {
    sessionStorage.setItem('otm-token', token);
    // When the page sets data-markers: performance.now() (from navigation start) and the count.
    new MutationObserver(() => {
      const n = document.body?.dataset.markers;
      if (n !== undefined && window.__markersAt === undefined) window.__markersAt = { n: Number(n), ms: performance.now() };
    }).observe(document, { attributes: true, subtree: true, attributeFilter: ['data-markers'] });
  }, run.token);
  const page = await context.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error') pageErrors.push(m.text());
  });
  await page.goto(`${run.url}/`);
  await page.waitForFunction(() => window.__markersAt !== undefined, undefined, { timeout: 60_000 });
  const first = await page.evaluate(() => window.__markersAt!);
  await page.getByText('following changes').waitFor({ timeout: 10_000 });

  await page.evaluate(() => {
    const s = { frames: 0, longest: 0, last: 0, start: 0, stop: false };
    window.__fps = s;
    const tick = (t: number) => {
      if (s.start === 0) s.start = t;
      else s.longest = Math.max(s.longest, t - s.last);
      s.last = t;
      s.frames++;
      if (!s.stop) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  const movesNow = async () => Number(await page.evaluate(() => document.body?.dataset.moves ?? '0'));
  const movesBefore = await movesNow();
  const perBatch = Math.max(1, Math.round(run.rate / 10));
  const sendStart = performance.now();
  let sent = 0;
  for (let b = 0; b < run.seconds * 10; b++) {
    const wait = sendStart + b * 100 - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const now = Date.now();
    await bulk(Array.from({ length: perBatch }, (_, k) => event((b * perBatch + k) % run.vehicles, now, 0.05 * ((b % 4) + 1))));
    sent += perBatch;
  }
  const sendMs = performance.now() - sendStart;
  await page.waitForTimeout(500); // the last batch's stream messages
  const frames = await page.evaluate(() => {
    const s = window.__fps!;
    s.stop = true;
    return { frames: s.frames, ms: s.last - s.start, longest: s.longest };
  });
  // Every position applied (each is newer than its vehicle's last one), or 10 s gone.
  const deadline = Date.now() + 10_000;
  while ((await movesNow()) - movesBefore < sent && Date.now() < deadline) await page.waitForTimeout(50);
  const moves = (await movesNow()) - movesBefore;
  return {
    vehicles: run.vehicles,
    ingestMs,
    markers: first.n,
    firstRenderMs: first.ms,
    fps: (frames.frames - 1) / (frames.ms / 1000),
    longestFrameMs: frames.longest,
    measuredMs: frames.ms,
    sent,
    sendMs,
    moves,
    pageErrors,
    page,
  };
}

/** The figures in two lines, as the test and the diagnosis print them. */
export function describeFigures(f: FleetFigures): string[] {
  return [
    `first render: ${Math.round(f.firstRenderMs)} ms from navigation to ${f.markers} markers drawn (ingest of ${f.vehicles} positions ${Math.round(f.ingestMs)} ms)`,
    `frame rate:   ${f.fps.toFixed(1)} fps over ${(f.measuredMs / 1000).toFixed(1)} s (longest frame ${Math.round(f.longestFrameMs)} ms) while ${f.sent} positions were sent in ${(f.sendMs / 1000).toFixed(1)} s (${Math.round(f.sent / (f.sendMs / 1000))}/s), ${f.moves} moves applied`,
  ];
}
