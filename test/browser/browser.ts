/** Debian's chromium, driven by playwright-core (no browser download), for the tests of test/browser/. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AxeBuilder } from '@axe-core/playwright';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';
import { startServe, stop, type Running } from '../process.js';

export const CHROMIUM = process.env.OTM_CHROMIUM ?? '/usr/bin/chromium';
/** Screenshots go here (gitignored). */
export const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));

export async function launch(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does), or set OTM_CHROMIUM`);
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
}

export interface Served {
  readonly otm: Running;
  readonly browser: Browser;
}

/**
 * For the tests of a file: `otm serve` on a fresh data directory (`otm-<name>-…`), with `token`
 * reading and writing for tenant acme, and chromium; started before the tests, stopped after.
 * The members of the answer are set once the tests run.
 */
export function serveAndLaunch(name: string, token: string): Served {
  const served = {} as { otm: Running; browser: Browser };
  let dataDir: string;
  beforeAll(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `otm-${name}-`));
    served.otm = await startServe({ OTM_DATA_DIR: dataDir, OTM_TOKENS: `${token}:acme:read+write` });
    served.browser = await launch();
  });
  afterAll(async () => {
    await served.browser?.close();
    if (served.otm) await stop(served.otm);
    fs.rmSync(dataDir, { recursive: true, force: true });
  });
  return served;
}

/** A page of a new 1280×900 context, with a default timeout of 10 s, and its console errors. */
export async function newPage(browser: Browser): Promise<{ page: Page; errors: string[] }> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  page.setDefaultTimeout(10_000);
  return { page, errors: consoleErrors(page) };
}

/**
 * The console errors and uncaught exceptions of a page, as they come. A resource that failed to
 * load is followed by its URL: `Failed to load resource: ... status of 404 (Not Found) <url>`.
 */
export function consoleErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const url = m.location().url;
    errors.push(m.text().startsWith('Failed to load resource') && url ? `${m.text()} ${url}` : m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  return errors;
}

export async function screenshot(page: Page, name: string): Promise<string> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, name);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/** axe-core's serious and critical violations of the page (or of `include`), as `rule: targets`. */
export async function seriousViolations(page: Page, opts: { include?: string; disable?: string[] } = {}): Promise<string[]> {
  let builder = new AxeBuilder({ page });
  if (opts.include !== undefined) builder = builder.include(opts.include);
  if (opts.disable !== undefined) builder = builder.disableRules(opts.disable);
  const { violations } = await builder.analyze();
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

/** Presses Tab (or Shift+Tab) until the focused element matches `selector`; fails after `max` presses. */
export async function tabTo(page: Page, selector: string, back = false, max = 120): Promise<number> {
  for (let i = 1; i <= max; i++) {
    await page.keyboard.press(back ? 'Shift+Tab' : 'Tab');
    if ((await page.locator(`${selector}:focus`).count()) > 0) return i;
  }
  throw new Error(`${selector} not reached with ${max} ${back ? 'Shift+Tab' : 'Tab'}`);
}

/**
 * The errors but the 404s of the fleet page's lifecycle probes (`GET /api/v5/actions/{id}?lifecycle=`
 * of a lifecycle an action has no version of: how the API says so).
 */
export function withoutLifecycleProbes(errors: readonly string[]): string[] {
  return errors.filter((e) => !/status of 404 .*\/api\/v5\/actions\/[0-9a-f-]{36}\?lifecycle=[a-z]+$/.test(e));
}
