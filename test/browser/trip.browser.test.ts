/** A trip on the fleet page: its stops as numbered markers, its actions with their lifecycles. */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { newPage, serveAndLaunch, screenshot, seriousViolations } from './browser.js';

const TOKEN = 'browser-trip-token';
const H = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const served = serveAndLaunch('trip', TOKEN);

async function put(kind: string, doc: unknown): Promise<void> {
  const res = await fetch(`${served.otm.url}/api/v5/${kind}`, { method: 'PUT', headers: H, body: JSON.stringify(doc) });
  expect(res.status, await res.clone().text()).toBe(200);
}

describe('a trip on the fleet page', () => {
  it('draws the stops of a selected trip as numbered markers and lists its actions in order', async () => {
    // The second stop is a reference to a stored action, whose location is a reference to a stored location.
    const utrecht = randomUUID();
    const secondStop = randomUUID();
    await put('locations', {
      entityType: 'location',
      id: utrecht,
      name: 'Customer Utrecht',
      geoReference: { type: 'latLonPointGeoReference', lat: 52.0907, lon: 5.1214 },
    });
    await put('actions', {
      actionType: 'stop',
      id: secondStop,
      lifecycle: 'planned',
      sequenceNr: 3,
      location: { associationType: 'reference', uuid: utrecht, entityType: 'location' },
      startTime: '2024-03-11T09:00:00Z',
      endTime: '2024-03-11T09:30:00Z',
      actions: [{ associationType: 'inline', entity: { actionType: 'unload', id: randomUUID(), lifecycle: 'planned' } }],
    });
    const trip = randomUUID();
    await put('trips', {
      entityType: 'trip',
      id: trip,
      name: 'Rotterdam - Utrecht',
      status: 'inTransit',
      actions: [
        { associationType: 'reference', uuid: secondStop, entityType: 'stop' },
        {
          associationType: 'inline',
          entity: { actionType: 'move', id: randomUUID(), lifecycle: 'actual', sequenceNr: 2 },
        },
        {
          associationType: 'inline',
          entity: {
            actionType: 'stop',
            id: randomUUID(),
            lifecycle: 'realized',
            sequenceNr: 1,
            location: {
              associationType: 'inline',
              entity: {
                entityType: 'location',
                id: randomUUID(),
                name: 'Depot Rotterdam',
                geoReference: { type: 'latLonPointGeoReference', lat: 51.9225, lon: 4.47917 },
              },
            },
            startTime: '2024-03-11T07:00:00Z',
            endTime: '2024-03-11T07:40:00Z',
            actions: [{ associationType: 'inline', entity: { actionType: 'load', id: randomUUID(), lifecycle: 'realized' } }],
          },
        },
      ],
    });

    const { page, errors } = await newPage(served.browser);
    const calls: string[] = [];
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (/^\/api\/v5\/(trips|actions|locations)\/./.test(u.pathname)) calls.push(u.pathname);
    });
    await page.goto(`${served.otm.url}/`);
    await page.getByLabel('API token').fill(TOKEN);
    await page.getByRole('button', { name: 'Use token' }).click();
    await page.getByRole('cell', { name: 'Rotterdam - Utrecht' }).click();
    await page.getByText('Rotterdam - Utrecht: 5 actions, 2 stops on the map.').waitFor();

    const stops = page.locator('.stop-marker');
    expect(await stops.count()).toBe(2);
    expect(await stops.evaluateAll((els) => els.map((e) => `${e.textContent} ${e.getAttribute('title')}`))).toEqual([
      '1 Stop 1: Depot Rotterdam',
      '2 Stop 2: Customer Utrecht',
    ]);
    const rows = await page
      .locator('#trip-actions tr')
      .evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')));
    expect(rows).toEqual([
      ['1', 'stop', 'realized', 'Depot Rotterdam', '2024-03-11 07:00 – 2024-03-11 07:40'],
      ['', 'load', 'realized', '', ''],
      ['', 'move', 'actual', '', ''],
      ['2', 'stop', 'planned', 'Customer Utrecht', '2024-03-11 09:00 – 2024-03-11 09:30'],
      ['', 'unload', 'planned', '', ''],
    ]);
    expect(calls).toEqual([`/api/v5/trips/${trip}`, `/api/v5/actions/${secondStop}`, `/api/v5/locations/${utrecht}`]);

    await screenshot(page, 'fleet-trip.png');
    expect(errors).toEqual([]);
    expect(await seriousViolations(page)).toEqual([]);
  });
});
