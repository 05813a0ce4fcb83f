/**
 * The fleet page's performance targets, measured here and printed (docs/PERFORMANCE.md has the
 * figures; times are not asserted: the machines are shared): the first render of 10,000 vehicles
 * and the frame rate while 1,000 positions a second arrive. What is asserted is that the page does
 * the work: every marker drawn, every position applied, no page error.
 */
import { describe, expect, it } from 'vitest';
import { serveAndLaunch, screenshot } from './browser.js';
import { describeFigures, measureFleetPage } from './fleet-measure.js';

const TOKEN = 'browser-fleet-perf-token';
const served = serveAndLaunch('fleet-perf', TOKEN);

describe('the fleet page with 10,000 vehicles', () => {
  it('draws them all and follows 1,000 positions a second', async () => {
    const f = await measureFleetPage({
      url: served.otm.url,
      token: TOKEN,
      browser: served.browser,
      vehicles: 10_000,
      rate: 1000,
      seconds: 5,
    });
    try {
      for (const line of describeFigures(f)) console.log(`fleet page: ${line}`);
      await screenshot(f.page, 'fleet-10000-vehicles.png');
      expect(f.markers).toBe(10_000);
      expect(f.sent).toBe(5000);
      // Each position sent is newer than its vehicle's last one: the page moves a marker for each.
      expect(f.moves).toBe(f.sent);
      expect(f.fps).toBeGreaterThan(0);
      expect(f.pageErrors).toEqual([]);
    } finally {
      await f.page.context().close();
    }
  }, 180_000);
});
