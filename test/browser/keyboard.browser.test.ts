/** The fleet page with the keyboard only (Tab, Shift+Tab, Enter, typing): no click anywhere. */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { newPage, serveAndLaunch, screenshot, tabTo, withoutLifecycleProbes } from './browser.js';

const TOKEN = 'browser-keyboard-token';
const H = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const served = serveAndLaunch('keyboard', TOKEN);

const stop1 = (id: string, name: string, lat: number, lon: number, seq: number) => ({
  associationType: 'inline',
  entity: {
    actionType: 'stop',
    id: randomUUID(),
    lifecycle: 'planned',
    sequenceNr: seq,
    location: {
      associationType: 'inline',
      entity: { entityType: 'location', id, name, geoReference: { type: 'latLonPointGeoReference', lat, lon } },
    },
  },
});

describe('the fleet page with the keyboard', () => {
  it('takes the token, selects a trip, zooms in, shows a track and checks a document', async () => {
    const vehicle = randomUUID();
    const now = Date.now();
    const events = [0, 1].map((i) => ({
      eventType: 'locationUpdateEvent',
      lifecycle: 'actual',
      creationDate: new Date(now - 60_000 * (2 - i)).toISOString(),
      vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicle },
      geoReference: { type: 'latLonPointGeoReference', lat: 52 + i * 0.1, lon: 5 + i * 0.1 },
    }));
    expect((await fetch(`${served.otm.url}/api/v5/bulk/events`, { method: 'POST', headers: H, body: JSON.stringify(events) })).status).toBe(
      200,
    );
    const trip = {
      entityType: 'trip',
      name: 'Keyboard run',
      status: 'confirmed',
      actions: [stop1(randomUUID(), 'Depot', 51.9225, 4.47917, 1), stop1(randomUUID(), 'Customer', 52.0907, 5.1214, 2)],
    };
    expect((await fetch(`${served.otm.url}/api/v5/trips`, { method: 'PUT', headers: H, body: JSON.stringify(trip) })).status).toBe(200);

    const { page, errors } = await newPage(served.browser);
    await page.goto(`${served.otm.url}/`);

    // The token form.
    await tabTo(page, '#token');
    await page.keyboard.type(TOKEN);
    await page.keyboard.press('Enter');
    await page.getByText('Token in use for this tab.').waitFor();
    await page.getByText('1 vehicle on the map, following changes.').waitFor();
    await page.locator('#trips tr').first().waitFor();

    // A trip: its row is a Tab stop, Enter selects it.
    await tabTo(page, '#trips tr');
    await page.keyboard.press('Enter');
    await page.getByText('Keyboard run: 2 actions, 2 stops on the map.').waitFor();
    expect(await page.locator('.stop-marker').count()).toBe(2);

    // Zoom in: back (Shift+Tab) to the map's zoom control, Enter; the stops move twice as far apart.
    const spread = () =>
      page.locator('.stop-marker').evaluateAll((els) => {
        const [a, b] = els.map((e) => e.getBoundingClientRect());
        return Math.round(Math.hypot(a!.x - b!.x, a!.y - b!.y));
      });
    await expect.poll(spread).toBeGreaterThan(0);
    await page.waitForTimeout(400); // the fit to the trip's stops animates
    const before = await spread();
    await tabTo(page, '.leaflet-control-zoom-in', true);
    await page.keyboard.press('Enter');
    await expect.poll(spread).toBeGreaterThan(before * 1.8);
    await screenshot(page, 'fleet-keyboard-zoom.png');

    // A track: Tab to the vehicle select (one vehicle: already chosen), then to Show track, Enter.
    await tabTo(page, '#track-vehicle');
    expect(await page.locator('#track-vehicle').inputValue()).toBe(vehicle);
    await tabTo(page, '#track-form button[type=submit]');
    await page.keyboard.press('Enter');
    await page.getByText('Track of 2 positions.').waitFor();

    // The time slider: Tab to it (it starts at the newest position), Left to the first, Right back.
    const at = (ms: number) => `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
    const t0 = Date.parse(events[0]!.creationDate);
    const t1 = Date.parse(events[1]!.creationDate);
    const valueText = () => page.locator('#track-slider').getAttribute('aria-valuetext');
    await tabTo(page, '#track-slider');
    expect(await valueText()).toBe(`${at(t1)}, position 2 of 2`);
    await page.keyboard.press('ArrowLeft');
    expect(await valueText()).toBe(`${at(t0)}, position 1 of 2`);
    expect(await page.locator('#track-point').innerText()).toContain('52.00000, 5.00000');
    await page.keyboard.press('ArrowRight');
    expect(await valueText()).toBe(`${at(t1)}, position 2 of 2`);
    expect(await page.locator('#track-point').innerText()).toContain('52.10000, 5.10000');
    await page.keyboard.press('Home');
    expect(await valueText()).toBe(`${at(t0)}, position 1 of 2`);

    // The validator: kind (ArrowDown then ArrowUp: back to vehicles), the document typed, Check with Enter.
    await tabTo(page, '#validate-kind');
    await page.keyboard.press('ArrowDown');
    expect(await page.locator('#validate-kind').inputValue()).toBe('routes');
    await page.keyboard.press('ArrowUp');
    expect(await page.locator('#validate-kind').inputValue()).toBe('vehicles');
    await page.keyboard.press('Tab');
    expect(await page.locator(':focus').getAttribute('id')).toBe('validate-doc');
    await page.keyboard.type('{"entityType":"vehicle","licencePlate":"AB-12-CD"}');
    await page.keyboard.press('Tab');
    expect(await page.locator(':focus').textContent()).toBe('Check');
    await page.keyboard.press('Enter');
    await page.getByText("did you mean 'licensePlate'?").waitFor();

    await screenshot(page, 'fleet-keyboard.png');
    // The validator's 400 and the 404s of the trip's lifecycle probes are expected answers.
    expect(withoutLifecycleProbes(errors).filter((e) => !e.includes('status of 400'))).toEqual([]);
  });
});
