/** Debian's chromium, driven by playwright-core (no browser download), for the tests of test/browser/. */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AxeBuilder } from '@axe-core/playwright';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env.OTM_CHROMIUM ?? '/usr/bin/chromium';
/** Screenshots go here (gitignored). */
export const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));

export async function launch(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does), or set OTM_CHROMIUM`);
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
}

/** The console errors and uncaught exceptions of a page, as they come. */
export function consoleErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
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
