/** The fleet page (/) in a real browser: markers, live moves, a track, the trips, the validator. */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { newPage, serveAndLaunch, screenshot, seriousViolations } from './browser.js';

const TOKEN = 'browser-fleet-token';
const H = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const served = serveAndLaunch('fleet', TOKEN);

const location = (vehicle: string, lat: number, lon: number, time: Date) => ({
  eventType: 'locationUpdateEvent',
  lifecycle: 'actual',
  creationDate: time.toISOString(),
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicle },
  geoReference: { type: 'latLonPointGeoReference', lat, lon },
});

describe('the fleet page', () => {
  it('shows 200 vehicles, moves one live, draws a track and checks a document', async () => {
    const vehicles = Array.from({ length: 200 }, () => randomUUID());
    const now = Date.now();
    const events = vehicles.flatMap((v, i) => [
      location(v, 48 + (i % 20) * 0.3, 2 + Math.floor(i / 20) * 0.6, new Date(now - 120_000)),
      location(v, 48.1 + (i % 20) * 0.3, 2.1 + Math.floor(i / 20) * 0.6, new Date(now - 60_000)),
    ]);
    const bulk = await fetch(`${served.otm.url}/api/v5/bulk/events`, { method: 'POST', headers: H, body: JSON.stringify(events) });
    expect(bulk.status).toBe(200);
    await fetch(`${served.otm.url}/api/v5/trips`, {
      method: 'PUT',
      headers: H,
      body: JSON.stringify({ entityType: 'trip', name: 'Paris run', status: 'inTransit' }),
    });

    const { page, errors } = await newPage(served.browser);
    await page.goto(`${served.otm.url}/`);
    await page.getByLabel('API token').fill(TOKEN);
    await page.getByRole('button', { name: 'Use token' }).press('Enter');
    // The markers are drawn on a canvas: the page counts them in data-markers once drawn.
    await expect.poll(() => page.locator('body').getAttribute('data-markers'), { timeout: 10_000 }).toBe('200');
    expect(await page.locator('#map canvas').count()).toBe(1);
    await page.getByText('following changes').waitFor();

    // A PUT of a location event moves its vehicle's marker within a second.
    const moved = vehicles[7]!;
    const moves = () => page.locator('body').getAttribute('data-moves');
    const before = await moves();
    const pixels = () => page.locator('#map').screenshot();
    const drawnBefore = await pixels();
    const put = await fetch(`${served.otm.url}/api/v5/events`, {
      method: 'PUT',
      headers: H,
      body: JSON.stringify(location(moved, 45, 12, new Date())),
    });
    expect(put.status).toBe(200);
    const t0 = Date.now();
    await expect.poll(moves, { timeout: 1000, interval: 20 }).not.toBe(before);
    const moveMs = Date.now() - t0;
    // ...and the canvas shows it (Leaflet redraws on the next frame).
    await expect.poll(async () => (await pixels()).equals(drawnBefore), { timeout: 1000, interval: 50 }).toBe(false);
    console.log(`marker moved ${moveMs} ms after the PUT answered`);

    // The track of a vehicle, chosen with the keyboard-usable select.
    await page.getByLabel('Vehicle', { exact: true }).selectOption(vehicles[3]!);
    await page.getByRole('button', { name: 'Show track' }).click();
    await page.getByText('Track of 2 positions.').waitFor();
    expect(await page.locator('path.track-line').count()).toBe(1);

    // The trips list, filtered by status.
    await page.getByLabel('Status', { exact: true }).selectOption('inTransit');
    await page.getByRole('button', { name: 'List' }).click();
    await page.getByRole('cell', { name: 'Paris run' }).waitFor();

    // The validator gives the API's hint for a misspelt member.
    await page.getByLabel('Kind', { exact: true }).selectOption('vehicles');
    await page.getByLabel('Document (JSON)').fill('{"entityType":"vehicle","licencePlate":"AB-12-CD"}');
    await page.getByRole('button', { name: 'Check' }).click();
    await page.getByText("did you mean 'licensePlate'?").waitFor();

    await screenshot(page, 'fleet-1280.png');
    await page.setViewportSize({ width: 390, height: 844 });
    await screenshot(page, 'fleet-390.png');

    // The browser logs the validator's 400 (the expected answer for an invalid document); nothing else.
    expect(errors.filter((e) => !e.includes('status of 400'))).toEqual([]);
    expect(errors.filter((e) => e.includes('status of 400'))).toHaveLength(1);
    expect(await seriousViolations(page)).toEqual([]);
  });
});
