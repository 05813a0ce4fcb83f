/** The API documentation (/api/v5/docs) in a real browser: Swagger UI over this service's openapi.json. */
import fs from 'node:fs';
import path from 'node:path';
import type { Locator, Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { ARTIFACTS, newPage, serveAndLaunch, screenshot, seriousViolations } from './browser.js';

const TOKEN = 'browser-docs-token';
const served = serveAndLaunch('docs', TOKEN);

/**
 * The operations whose request or answer is one of the model's large, recursive schemas (a
 * vehicle, a trip, events): each kept the page busy for minutes when opened, before the docs page
 * bounded Swagger UI's `$ref` resolution (services/web/src/docs/bounded-refs.ts, docs/web.md).
 */
const LARGE_OPERATIONS = [
  'Vehicle-getVehicleByUuid',
  'Trip-listTrips',
  'Trip-createTrip',
  'Vehicle-getVehicleTrack',
  'Event-bulkCreateEvent',
  'Vehicle-createVehicle',
];
/** How long an operation may take to open before the test calls the page hung (not a target: see the printed times). */
const LIVENESS_MS = 30_000;

/** Opens an operation; resolves with the milliseconds until its answers are drawn and the page answers again. */
async function openOperation(page: Page, id: string): Promise<{ op: Locator; ms: number }> {
  const op = page.locator(`#operations-${id}`);
  const started = Date.now();
  await op.locator('.opblock-summary').first().click({ timeout: LIVENESS_MS });
  await op.locator('.responses-table').first().waitFor({ timeout: LIVENESS_MS });
  // The page's next frame, then its next task: the opened operation is drawn.
  await page.evaluate('new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)))');
  return { op, ms: Date.now() - started };
}

/** Try it out, Execute; resolves with the status answered and its body as shown. */
async function execute(op: Locator, fill: (op: Locator) => Promise<void> = async () => {}): Promise<{ status: string; body: string }> {
  await op.getByRole('button', { name: 'Try it out' }).click();
  await fill(op);
  await op.getByRole('button', { name: 'Execute' }).click();
  const status = op.locator('.live-responses-table tbody .response-col_status').first();
  await status.waitFor();
  const body = (await op.locator('.live-responses-table tbody .response-col_description pre').first().textContent()) ?? '';
  return { status: (await status.textContent())?.trim() ?? '', body };
}

describe('GET /api/v5/docs', () => {
  // axe-core takes about 10 s over Swagger UI's page on two cores.
  it('serves Swagger UI from the package, and calls the API with the token typed into Authorize', { timeout: 180_000 }, async () => {
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

    const { op } = await openOperation(page, 'Vehicle-getLatestPositions');
    // Deep linking stays (the address follows the operation opened), though the path is no link.
    await expect.poll(() => new URL(page.url()).hash).toBe('#/Vehicle/getLatestPositions');
    expect(await op.locator('.opblock-summary-control a[href]').count()).toBe(0);
    expect((await execute(op)).status).toBe('200');
    await screenshot(page, 'docs-try-it-out.png');

    // The large operations open promptly (the times are printed, for docs/web.md; only a hung page fails).
    const times: Record<string, number> = {};
    for (const id of LARGE_OPERATIONS) times[id] = (await openOperation(page, id)).ms;
    console.log(`docs page: ms to open each operation: ${JSON.stringify(times)}`);

    // Their examples are the model's documents, not samples generated from the schemas: the
    // vehicle's, sent by Try it out as it stands, is stored; then GET /api/v5/vehicles/{UUID} answers it.
    const doc = (await (await fetch(`${served.otm.url}/api/v5/openapi.json`)).json()) as {
      paths: Record<string, { put: { requestBody: { content: Record<string, { example: { id: string; licensePlate: string } }> } } }>;
    };
    const vehicle = doc.paths['/api/v5/vehicles']!.put.requestBody.content['application/json']!.example;
    const put = await execute(page.locator('#operations-Vehicle-createVehicle'));
    expect(put.status).toBe('200');
    const get = page.locator('#operations-Vehicle-getVehicleByUuid');
    const answer = await execute(get, (o) => o.locator('tr[data-param-name="UUID"] input').fill(vehicle.id));
    expect(answer.status).toBe('200');
    expect(JSON.parse(answer.body)).toMatchObject({ id: vehicle.id, licensePlate: vehicle.licensePlate });
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await get.screenshot({ path: path.join(ARTIFACTS, 'docs-vehicle-get.png') });

    // The answer's schema can be followed past what was inlined when the operation opened (a
    // vehicle's context event's context event ...): the rest is resolved as it is drawn.
    const answer200 = get.locator('table.responses-table:not(.live-responses-table) tr.response[data-code="200"]');
    await answer200.getByRole('tab', { name: 'Schema' }).click();
    let node = answer200.locator('.json-schema-2020-12').first();
    for (const label of ['contextEvents', 'Items', 'One of', '#0', 'contextEvents', 'Items', 'One of', '#0', 'contextEvents']) {
      const accordion = node.locator('button.json-schema-2020-12-accordion', { hasText: label }).first();
      await accordion.click();
      node = accordion.locator('xpath=ancestor::article[1]');
    }
    expect(Number(await node.getAttribute('data-json-schema-level'))).toBeGreaterThanOrEqual(9);
    expect(await node.locator('.json-schema-2020-12__attribute--primary').first().textContent()).toMatch(/^array<\(object/);

    expect(errors).toEqual([]);
    expect(outside).toEqual([]);
    // No serious or critical violation: our CSS darkens Swagger UI's colours (color-contrast), its
    // operations' paths are text, not links inside their buttons (nested-interactive), and the
    // fields of Try it out are named (label-title-only).
    expect(await seriousViolations(page)).toEqual([]);
  });
});
