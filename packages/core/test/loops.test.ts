import { afterEach, describe, expect, it, vi } from 'vitest';
import { Health } from '../src/health.js';
import { createLogger } from '../src/logger.js';
import { LoopKind } from '../src/loops.js';
import { registry } from '../src/metrics.js';

const metric = async (name: string, loop: string) =>
  (await registry.getSingleMetric(name)!.get()).values.find((v) => v.labels.loop === loop)?.value;

/** A logger whose lines (JSON) are kept. */
function capturing() {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, logger: createLogger('info', { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) }) };
}

describe('LoopKind', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('keeps otm_loop_up at 1 while no loop of the kind is down, over every component with loops of it', async () => {
    const a = new LoopKind('test-kind-a', 'test loop');
    const b = new LoopKind('test-kind-a', 'test loop');
    expect(await metric('otm_loop_up', 'test-kind-a')).toBe(1);
    const one = a.add('one');
    const two = b.add('two');
    one.down('store unavailable');
    expect(await metric('otm_loop_up', 'test-kind-a')).toBe(0);
    two.down('store unavailable');
    one.up();
    // The other component's loop is still down.
    expect(await metric('otm_loop_up', 'test-kind-a')).toBe(0);
    two.down('again'); // already down: counted once
    two.up();
    expect(await metric('otm_loop_up', 'test-kind-a')).toBe(1);
    // A loop that ends while down is no longer counted.
    one.down('gone');
    a.remove(one);
    expect(await metric('otm_loop_up', 'test-kind-a')).toBe(1);
    a.restarted();
    a.restarted();
    expect(await metric('otm_loop_restarts_total', 'test-kind-a')).toBe(2);
  });

  it('names the loops that are down for /readyz, the longest down first, and the rest of them as one part', () => {
    const kind = new LoopKind('test-kind-b', 'dispatcher subscription', { named: 2 });
    const health = new Health();
    health.watch(() => kind.monitored());
    const parts = Array.from({ length: 5 }, (_, i) => kind.add(`t/${i}`));
    expect(health.down()).toEqual([]);
    expect(kind.monitored()).toEqual([]);
    vi.useFakeTimers({ toFake: ['Date'] });
    const t0 = Date.now();
    // Down one after the other, a second apart.
    [3, 1, 4, 0].forEach((i, n) => {
      vi.setSystemTime(t0 + n * 1_000);
      parts[i]!.down(`cause ${i}`);
    });
    vi.setSystemTime(t0 + 10_000);
    const down = health.down();
    expect(down.map((p) => p.name)).toEqual([
      'dispatcher subscription t/3',
      'dispatcher subscription t/1',
      'dispatcher subscription: 2 more down',
    ]);
    expect(down[2]).toMatchObject({ kind: 'loop', reason: 'cause 4' });
    // Down 10, 9 and (the longest of the rest) 8 seconds.
    expect(down.map((p) => p.seconds)).toEqual([10, 9, 8]);
    expect(health.stalled(9).length).toBe(2);
    parts[3]!.up();
    parts[1]!.up();
    parts[4]!.up();
    expect(health.down().map((p) => p.name)).toEqual(['dispatcher subscription t/0']);
  });

  it('logs a cause once per interval for every loop of the kind, with how many failures it held back', () => {
    const { lines, logger } = capturing();
    const kind = new LoopKind('test-kind-c', 'stream reader', { logIntervalMs: 60_000 });
    const parts = Array.from({ length: 4 }, (_, i) => kind.add(`tenant-${i}`));
    for (const p of parts)
      kind.fail(p, new Error('redis unavailable'), logger, { tenant: p.name }, 'stream: reading the change feed failed');
    kind.fail(parts[0]!, new Error('clickhouse unavailable'), logger, {}, 'stream: reading the change feed failed');
    expect(parts.every((p) => !p.isUp && p.status().reason !== undefined)).toBe(true);
    expect(lines.map((l) => [l.err, l.loop])).toEqual([
      ['redis unavailable', 'stream reader tenant-0'],
      ['clickhouse unavailable', 'stream reader tenant-0'],
    ]);
    expect(parts[0]!.status().reason).toBe('clickhouse unavailable');
  });

  it('keeps the metrics of one supervised loop, and forgets it once released', async () => {
    const kind = new LoopKind('test-kind-d', 'entity export');
    const s = kind.supervision();
    s.onChange(false);
    expect(await metric('otm_loop_up', 'test-kind-d')).toBe(0);
    s.onRestart();
    expect(await metric('otm_loop_restarts_total', 'test-kind-d')).toBe(1);
    s.release();
    expect(await metric('otm_loop_up', 'test-kind-d')).toBe(1);
  });
});
