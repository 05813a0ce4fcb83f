/** The fleet page (/) in a real browser: markers, live moves, a track and its time slider, the trips, the validator. */
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
  /** Stores the events, opens the page with the token and asks for the vehicle's track. */
  async function showTrack(events: unknown[], vehicle: string) {
    const bulk = await fetch(`${served.otm.url}/api/v5/bulk/events`, { method: 'POST', headers: H, body: JSON.stringify(events) });
    expect(bulk.status).toBe(200);
    const opened = await newPage(served.browser);
    const { page } = opened;
    await page.goto(`${served.otm.url}/`);
    await page.getByLabel('API token').fill(TOKEN);
    await page.getByRole('button', { name: 'Use token' }).click();
    await page.getByText('following changes').waitFor();
    await page.getByLabel('Vehicle', { exact: true }).selectOption(vehicle);
    await page.getByRole('button', { name: 'Show track' }).click();
    return opened;
  }

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

  it("marks a vehicle's stops on its track", async () => {
    // Three positions driving east, seven parked over six minutes (jitter of a few metres), two driving on.
    const vehicle = randomUUID();
    const base = Date.now() - 900_000;
    const at = (i: number, lat: number, lon: number) => location(vehicle, lat, lon, new Date(base + i * 60_000));
    const events = [
      ...[0, 1, 2].map((i) => at(i, 52.3, 4.8 + i * 0.02)),
      ...[3, 4, 5, 6, 7, 8, 9].map((i) => at(i, 52.3 + (i % 2) * 0.00003, 4.86)),
      ...[10, 11].map((i) => at(i, 52.3, 4.86 + (i - 9) * 0.02)),
    ];
    const { page, errors } = await showTrack(events, vehicle);
    await page.getByText('Track of 12 positions. 1 stop.').waitFor();
    expect(await page.locator('path.track-stop').count()).toBe(1);
    // The map is still fitting the track (animated): the stop's marker is told of the pointer directly.
    await page.locator('path.track-stop').dispatchEvent('mouseover');
    await page.getByText(/^Stop \d\d:\d\d–\d\d:\d\d UTC \(6 min\)$/).waitFor();
    await screenshot(page, 'fleet-track-stops.png');
    expect(errors).toEqual([]);
  });

  it("moves a marker along a vehicle's track with the time slider, by pointer and by keyboard", async () => {
    // Six positions eastwards, a minute apart but for a four-minute gap between the fourth and the fifth.
    const vehicle = randomUUID();
    const base = Date.now() - 600_000;
    const offsets = [0, 60, 120, 180, 420, 480].map((s) => s * 1000);
    const events = offsets.map((o, i) => {
      const e = location(vehicle, 52 + i * 0.01, 4.8 + i * 0.05, new Date(base + o));
      return {
        ...e,
        geoReference: { ...e.geoReference, speed: { value: 30 + i * 10, unit: 'km/h' }, heading: { value: 80 + i, unit: 'degrees' } },
      };
    });
    const { page, errors } = await showTrack(events, vehicle);
    await page.getByText('Track of 6 positions.').waitFor();

    const at = (ms: number) => `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
    const slider = page.getByRole('slider', { name: 'Time on the track' });
    const valueText = () => slider.getAttribute('aria-valuetext');
    const details = () => page.locator('#track-point').innerText();
    const markerX = async () => {
      const box = await page.locator('path.track-marker').boundingBox();
      return box!.x + box!.width / 2;
    };
    /** How much of the line's width the travelled part covers, in tenths (the positions are evenly spaced eastwards). */
    const travelled = async () => {
      const [done, line] = await Promise.all([
        page.locator('path.track-done').boundingBox(),
        page.locator('path.track-line').boundingBox(),
      ]);
      return Math.round((10 * (done!.width - 4)) / (line!.width - 3));
    };
    // The map fits the track (animated): wait for the end of the zoom, and for the marker to stay put.
    await expect.poll(travelled).toBe(10);
    await expect.poll(() => page.locator('.leaflet-map-pane.leaflet-zoom-anim').count(), { timeout: 5000 }).toBe(0);
    let last = NaN;
    await expect
      .poll(
        async () => {
          const [x, was] = [await markerX(), last];
          last = x;
          return x === was;
        },
        { timeout: 5000, interval: 200 },
      )
      .toBe(true);

    // The map fitted the track (even while the fit to the vehicles may still animate).
    expect((await page.locator('path.track-line').boundingBox())!.width).toBeGreaterThan(200);

    // It starts at the newest position.
    expect(await valueText()).toBe(`${at(base + offsets[5]!)}, position 6 of 6`);
    expect(await details()).toMatch(/Speed\s+80 km\/h/);
    expect(await details()).toMatch(/Heading\s+85°/);
    const x6 = await markerX();

    // The keyboard: each arrow a position.
    await slider.focus();
    for (let i = 0; i < 3; i++) await page.keyboard.press('ArrowLeft');
    expect(await valueText()).toBe(`${at(base + offsets[2]!)}, position 3 of 6`);
    expect(await details()).toContain('52.02000, 4.90000');
    expect(await details()).toMatch(/Speed\s+50 km\/h/);
    // The map is redrawn on the next frame.
    await expect.poll(travelled, { timeout: 5000 }).toBe(4); // two fifths of the way
    await expect.poll(markerX).toBeLessThan(x6 - 50);
    const x3 = await markerX();
    // The rest of the line stays drawn, dimmed, under the travelled part.
    expect(await page.locator('path.track-line').getAttribute('stroke-opacity')).toBe('0.35');
    await screenshot(page, 'fleet-track-slider.png');

    // A time between two positions (as a drag leaves it): the position reported last before it.
    await slider.fill(String(300_000));
    expect(await valueText()).toBe(`${at(base + 300_000)}, position 4 of 6`);
    expect(await page.locator('#track-time-value').textContent()).toBe(at(base + 300_000));
    expect(await details()).toContain(at(base + offsets[3]!));
    // Left goes back to the position shown (its time), Right on to the next.
    await page.keyboard.press('ArrowLeft');
    expect(await valueText()).toBe(`${at(base + offsets[3]!)}, position 4 of 6`);
    await page.keyboard.press('ArrowRight');
    expect(await valueText()).toBe(`${at(base + offsets[4]!)}, position 5 of 6`);
    // Home and End: the ends; Page Down: a tenth of the period back.
    await page.keyboard.press('Home');
    expect(await valueText()).toBe(`${at(base)}, position 1 of 6`);
    await expect.poll(markerX).toBeLessThan(x3);
    await expect.poll(travelled, { timeout: 5000 }).toBe(0);
    await page.keyboard.press('End');
    expect(await valueText()).toBe(`${at(base + offsets[5]!)}, position 6 of 6`);
    await page.keyboard.press('PageDown');
    expect(await valueText()).toBe(`${at(base + 432_000)}, position 5 of 6`);

    expect(errors).toEqual([]);
    expect(await seriousViolations(page)).toEqual([]);
  });
});
