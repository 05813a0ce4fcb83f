/** A trip on the fleet page: its stops as numbered markers, its actions, their lifecycle versions side by side. */
import { randomUUID } from 'node:crypto';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { newPage, serveAndLaunch, screenshot, seriousViolations, tabTo, withoutLifecycleProbes } from './browser.js';

const TOKEN = 'browser-trip-token';
const H = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const served = serveAndLaunch('trip', TOKEN);

async function put(kind: string, doc: unknown): Promise<void> {
  const res = await fetch(`${served.otm.url}/api/v5/${kind}`, { method: 'PUT', headers: H, body: JSON.stringify(doc) });
  expect(res.status, await res.clone().text()).toBe(200);
}

/**
 * The side-by-side table: its header, then each row's cells: `time / place`, `*` before a cell
 * marked as changed, `—` for no version.
 */
async function lifecycleTable(page: Page): Promise<string[][]> {
  return page.locator('#lifecycles-table tr').evaluateAll((trs) =>
    trs.map((tr) =>
      [...tr.querySelectorAll('th, td')].map((c) => {
        if (c.classList.contains('absent')) return '—';
        const parts = [...c.querySelectorAll('.when, .where')].map((e) => e.textContent);
        return parts.length === 0 ? (c.textContent ?? '') : `${c.classList.contains('changed') ? '*' : ''}${parts.join(' / ')}`;
      }),
    ),
  );
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
    const probes: string[] = [];
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (!/^\/api\/v5\/(trips|actions|locations)\/./.test(u.pathname)) return;
      if (u.searchParams.has('lifecycle')) probes.push(`${u.pathname}${u.search}`);
      else calls.push(u.pathname);
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

    // Each action has one version, of its own lifecycle: three lifecycles in all, one cell a row.
    await page.getByText('5 versions of 5 actions in 3 lifecycles.').waitFor();
    expect(await lifecycleTable(page)).toEqual([
      ['Stop', 'Action', 'planned', 'actual', 'realized'],
      ['1', 'stop', '—', '—', '2024-03-11 07:00 – 2024-03-11 07:40 / Depot Rotterdam'],
      ['', 'load', '—', '—', 'no time'],
      ['', 'move', '—', 'no time', '—'],
      ['2', 'stop', '2024-03-11 09:00 – 2024-03-11 09:30 / Customer Utrecht', '—', '—'],
      ['', 'unload', 'no time', '—', '—'],
    ]);
    // Every lifecycle asked of each action that has an id; the referenced location fetched once all the same.
    expect(probes).toHaveLength(5 * 5);
    expect(probes).toContain(`/api/v5/actions/${secondStop}?lifecycle=planned`);

    await screenshot(page, 'fleet-trip.png');
    // The browser logs the probes' 404s (a lifecycle without a version); nothing else.
    expect(errors.length - withoutLifecycleProbes(errors).length).toBe(5 * 4);
    expect(withoutLifecycleProbes(errors)).toEqual([]);
    expect(await seriousViolations(page)).toEqual([]);
  });

  it("sets each action's lifecycle versions side by side, a trip chosen with the keyboard", async () => {
    // Stop 1 planned, projected (the same) and actual (later, elsewhere); stop 2 planned and
    // projected (later), with no actual yet; its unload planned only.
    const depot = {
      entityType: 'location',
      id: randomUUID(),
      name: 'Depot Amsterdam',
      geoReference: { type: 'latLonPointGeoReference', lat: 52.37, lon: 4.89 },
    };
    const yard = {
      entityType: 'location',
      id: randomUUID(),
      name: 'Yard Zaandam',
      geoReference: { type: 'latLonPointGeoReference', lat: 52.44, lon: 4.82 },
    };
    const customer = {
      entityType: 'location',
      id: randomUUID(),
      name: 'Customer Haarlem',
      geoReference: { type: 'latLonPointGeoReference', lat: 52.38, lon: 4.64 },
    };
    await put('locations', yard);
    const first = randomUUID();
    const second = randomUUID();
    const stop = (id: string, lifecycle: string, seq: number, location: unknown, startTime: string, endTime: string, extra = {}) => ({
      actionType: 'stop',
      id,
      lifecycle,
      sequenceNr: seq,
      location,
      startTime,
      endTime,
      ...extra,
    });
    const trip = randomUUID();
    await put('trips', {
      entityType: 'trip',
      id: trip,
      name: 'Amsterdam - Haarlem',
      status: 'inTransit',
      actions: [
        {
          associationType: 'inline',
          entity: stop(first, 'planned', 1, { associationType: 'inline', entity: depot }, '2024-03-12T07:00:00Z', '2024-03-12T07:30:00Z'),
        },
        {
          associationType: 'inline',
          entity: stop(
            second,
            'planned',
            2,
            { associationType: 'inline', entity: customer },
            '2024-03-12T09:00:00Z',
            '2024-03-12T09:30:00Z',
            {
              actions: [{ associationType: 'inline', entity: { actionType: 'unload', id: randomUUID(), lifecycle: 'planned' } }],
            },
          ),
        },
      ],
    });
    const ref = (l: { id: string }) => ({ associationType: 'reference', entityType: 'location', uuid: l.id });
    await put('actions', stop(first, 'projected', 1, ref(depot), '2024-03-12T07:00:00Z', '2024-03-12T07:30:00Z'));
    await put('actions', stop(first, 'actual', 1, ref(yard), '2024-03-12T07:12:00Z', '2024-03-12T07:51:00Z'));
    await put('actions', stop(second, 'projected', 2, ref(customer), '2024-03-12T09:20:00Z', '2024-03-12T09:50:00Z'));
    // A trip whose actions have one lifecycle only.
    const single = randomUUID();
    await put('trips', {
      entityType: 'trip',
      id: single,
      name: 'Single lifecycle',
      status: 'confirmed',
      actions: [
        { associationType: 'inline', entity: stop(randomUUID(), 'planned', 1, ref(yard), '2024-03-13T08:00:00Z', '2024-03-13T08:20:00Z') },
      ],
    });

    const { page, errors } = await newPage(served.browser);
    await page.goto(`${served.otm.url}/`);
    await tabTo(page, '#token');
    await page.keyboard.type(TOKEN);
    await page.keyboard.press('Enter');
    await page.locator(`#trips tr[data-trip="${trip}"]`).waitFor();
    await tabTo(page, `#trips tr[data-trip="${trip}"]`);
    await page.keyboard.press('Enter');
    await page.getByText('6 versions of 3 actions in 3 lifecycles.').waitFor();
    expect(await page.locator('#lifecycles-caption').textContent()).toBe(
      "Each action's versions, planned | projected | actual: a cell that differs from the one on its left is marked as changed.",
    );
    expect(await lifecycleTable(page)).toEqual([
      ['Stop', 'Action', 'planned', 'projected', 'actual'],
      [
        '1',
        'stop',
        '2024-03-12 07:00 – 2024-03-12 07:30 / Depot Amsterdam',
        '2024-03-12 07:00 – 2024-03-12 07:30 / Depot Amsterdam',
        '*2024-03-12 07:12 – 2024-03-12 07:51 / Yard Zaandam',
      ],
      [
        '2',
        'stop',
        '2024-03-12 09:00 – 2024-03-12 09:30 / Customer Haarlem',
        '*2024-03-12 09:20 – 2024-03-12 09:50 / Customer Haarlem',
        '—',
      ],
      ['', 'unload', 'no time', '—', '—'],
    ]);
    // What a screen reader hears of a changed cell and of an empty one; the row's header is its action.
    const cells = page.locator('#lifecycles tr').first().locator('td');
    expect(await cells.nth(3).textContent()).toBe('changed: 2024-03-12 07:12 – 2024-03-12 07:51Yard Zaandam');
    expect(await page.locator('#lifecycles tr').nth(1).locator('td').nth(3).textContent()).toBe('—no version');
    expect(await page.locator('#lifecycles tr').first().getByRole('rowheader').textContent()).toBe('stop');
    // The trip's own copy keeps the lifecycle it holds (planned); the stops are drawn from it.
    await page.getByText('Amsterdam - Haarlem: 3 actions, 2 stops on the map.').waitFor();
    await screenshot(page, 'fleet-lifecycles.png');
    expect(await seriousViolations(page)).toEqual([]);

    // Back (Shift+Tab) to the other trip's row: one lifecycle, and the table says so.
    await tabTo(page, `#trips tr[data-trip="${single}"]`, true);
    await page.keyboard.press('Enter');
    await page.getByText('1 version of 1 action in 1 lifecycle.').waitFor();
    expect(await page.locator('#lifecycles-caption').textContent()).toBe(
      'Only one lifecycle is stored for these actions (planned): nothing to set beside it yet.',
    );
    expect(await lifecycleTable(page)).toEqual([
      ['Stop', 'Action', 'planned'],
      ['1', 'stop', '2024-03-13 08:00 – 2024-03-13 08:20 / Yard Zaandam'],
    ]);
    await screenshot(page, 'fleet-lifecycles-single.png');
    expect(withoutLifecycleProbes(errors)).toEqual([]);
  });
});
