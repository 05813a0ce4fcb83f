import { describe, expect, it } from 'vitest';
import { Health, PartState, ThrottledLog, backoffDelay, supervise } from '../src/health.js';

const until = async (check: () => boolean, ms = 5_000) => {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('backoffDelay', () => {
  it('doubles from the first delay up to the cap, taking off a random half at most', () => {
    const b = { initialMs: 100, maxMs: 1_000 };
    expect([1, 2, 3, 4, 5, 10].map((n) => backoffDelay(n, b, () => 1))).toEqual([100, 200, 400, 800, 1_000, 1_000]);
    expect([1, 2, 3, 4, 5, 10].map((n) => backoffDelay(n, b, () => 0))).toEqual([50, 100, 200, 400, 500, 500]);
    for (let i = 0; i < 100; i++) {
      const d = backoffDelay(3, b);
      expect(d).toBeGreaterThanOrEqual(200);
      expect(d).toBeLessThanOrEqual(400);
    }
  });
});

describe('PartState and Health', () => {
  it('keeps when a part went down while it stays down, and tells the gauge of each change', () => {
    const seen: boolean[] = [];
    const part = new PartState('consumer g/t', 'loop', { up: false, onChange: (up) => seen.push(up) });
    const first = part.status();
    expect(first).toMatchObject({ up: false, reason: 'starting' });
    part.down('cannot connect');
    expect(part.status()).toEqual({ up: false, since: first.since, reason: 'cannot connect' });
    part.up();
    part.up();
    part.down('crashed');
    expect(seen).toEqual([false, true, false]);
  });

  it('reports the parts that are down, and as stalled only loops down longer than the bound', () => {
    const health = new Health();
    const loop = new PartState('dispatcher', 'loop');
    const store = new PartState('event store', 'store');
    const dynamic: PartState[] = [];
    health.add(loop);
    health.add(store);
    const unwatch = health.watch(() => dynamic);
    expect(health.down()).toEqual([]);
    loop.down('redis down');
    store.down('disk full');
    dynamic.push(new PartState('stream reader acme', 'loop', { up: false }));
    const now = Date.now() + 200_000;
    expect(
      health
        .down(now)
        .map((p) => p.name)
        .sort(),
    ).toEqual(['dispatcher', 'event store', 'stream reader acme']);
    expect(
      health
        .stalled(120, now)
        .map((p) => p.name)
        .sort(),
    ).toEqual(['dispatcher', 'stream reader acme']);
    expect(health.stalled(120)).toEqual([]);
    unwatch();
    expect(health.stalled(120, now).map((p) => p.name)).toEqual(['dispatcher']);
    loop.up();
    expect(health.stalled(120, now)).toEqual([]);
  });
});

describe('supervise', () => {
  it('starts a failing loop again with backoff until it works, and is down meanwhile', async () => {
    let runs = 0;
    let restarts = 0;
    const loop = supervise(
      'reader',
      async (signal, up) => {
        runs++;
        if (runs < 3) throw new Error(`failure ${runs}`);
        up();
        await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
      },
      { backoff: { initialMs: 10, maxMs: 20 }, onRestart: () => restarts++ },
    );
    expect(loop.status().up).toBe(false);
    await until(() => loop.status().up);
    expect(runs).toBe(3);
    expect(restarts).toBe(2);
    expect(loop.restarts).toBe(2);
    await loop.stop();
    expect(runs).toBe(3);
  });

  it('counts a loop that returns by itself as failed, and stop() ends the wait for a restart', async () => {
    let runs = 0;
    const loop = supervise(
      'export',
      () => {
        runs++;
        return Promise.resolve();
      },
      { backoff: { initialMs: 60_000, maxMs: 60_000 } },
    );
    await until(() => runs === 1 && loop.status().reason === 'ended by itself');
    const t = Date.now();
    await loop.stop();
    expect(Date.now() - t).toBeLessThan(1_000);
    expect(runs).toBe(1);
  });
});

describe('ThrottledLog', () => {
  it('lets one line a key through per interval and counts the ones held back', () => {
    const log = new ThrottledLog(1_000);
    expect(log.take('a', 0)).toEqual({ log: true, skipped: 0 });
    expect(log.take('a', 10)).toEqual({ log: false, skipped: 1 });
    expect(log.take('a', 20)).toEqual({ log: false, skipped: 2 });
    expect(log.take('b', 20)).toEqual({ log: true, skipped: 0 });
    expect(log.take('a', 1_000)).toEqual({ log: true, skipped: 2 });
  });
});
