/** The API documentation (/api/v5/docs) in a real browser: Swagger UI over this service's openapi.json. */
import { describe, expect, it } from 'vitest';
import { newPage, serveAndLaunch, screenshot, seriousViolations } from './browser.js';

const TOKEN = 'browser-docs-token';
const served = serveAndLaunch('docs', TOKEN);

describe('GET /api/v5/docs', () => {
  // axe-core takes about 10 s over Swagger UI's page on two cores.
  it('serves Swagger UI from the package, and calls the API with the token typed into Authorize', { timeout: 60_000 }, async () => {
    const { page, errors } = await newPage(served.browser);
    const outside: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(served.otm.url) && !r.url().startsWith('data:')) outside.push(r.url());
    });
    const res = await page.goto(`${served.otm.url}/api/v5/docs`);
    expect(res?.status()).toBe(200);
    await page.getByText('OTM trip data exchange service').first().waitFor();

    await page.getByRole('button', { name: 'Authorize' }).first().click();
    const dialog = page.locator('.modal-ux');
    await dialog.locator('input[type=text], input[type=password]').first().waitFor();
    // The dialog's close button (an icon alone) is named by our script around Swagger UI (axe: button-name).
    expect(await dialog.locator('button.close-modal').getAttribute('aria-label')).toBe('Close');
    await dialog.locator('input[type=text], input[type=password]').first().fill(TOKEN);
    // Two schemes (the bearer token, the stream ticket): each its own form; the bearer token's comes first.
    await dialog.locator('button.authorize').first().click();
    await dialog.locator('button', { hasText: 'Logout' }).first().waitFor();
    await dialog.locator('button.btn-done').first().click();

    const op = page.locator('#operations-Vehicle-getLatestPositions');
    await op.locator('.opblock-summary').first().click();
    // Deep linking stays (the address follows the operation opened), though the path is no link.
    await expect.poll(() => new URL(page.url()).hash).toBe('#/Vehicle/getLatestPositions');
    expect(await op.locator('.opblock-summary-control a[href]').count()).toBe(0);
    await op.getByRole('button', { name: 'Try it out' }).click();
    await op.getByRole('button', { name: 'Execute' }).click();
    const status = op.locator('.live-responses-table tbody .response-col_status').first();
    await status.waitFor();
    expect((await status.textContent())?.trim()).toBe('200');
    await screenshot(page, 'docs-try-it-out.png');

    expect(errors).toEqual([]);
    expect(outside).toEqual([]);
    // No serious or critical violation: our CSS darkens Swagger UI's colours (color-contrast), its
    // operations' paths are text, not links inside their buttons (nested-interactive), and the
    // fields of Try it out are named (label-title-only).
    expect(await seriousViolations(page)).toEqual([]);
  });
});
