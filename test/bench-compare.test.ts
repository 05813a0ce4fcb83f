/** bench/compare.mjs: rows of two bench runs matched by scenario, ratio changes, verdict flips. */
import { describe, expect, it } from 'vitest';
// @ts-expect-error: plain ESM without type declarations
import { compareRuns, scenarioKey } from '../bench/compare.mjs';

const row = (scenario: string, ratio: number | undefined, pass: boolean | undefined, figure = 1) => ({
  scenario,
  ratio,
  pass,
  figure,
  unit: 'req/s',
});

describe('bench compare', () => {
  it('matches a scenario whose name carries different numbers in each run', () => {
    expect(scenarioKey('visibility lag p99, vehicle → Redis, at 2,324 PUT/s (half max)')).toBe(
      scenarioKey('visibility lag p99, vehicle → Redis, at 1,949 PUT/s (half max)'),
    );
    expect(scenarioKey('PUT trip, embedded')).not.toBe(scenarioKey('PUT trip, distributed'));
  });

  it('gives the change of each ratio, the verdicts, and the rows only one run has', () => {
    const older = { rows: [row('PUT event at 100 conn', 0.4, false), row('GET trip', 0.5, true), row('gone', 1, true)] };
    const newer = {
      rows: [row('PUT event at 50 conn', 0.6, true), row('GET trip', 0.5, true), row('new', 0.2, false), row('memory', undefined, false)],
    };
    const out = compareRuns(older, newer);
    expect(out.map((r: { scenario: string }) => r.scenario)).toEqual(['PUT event at 50 conn', 'GET trip', 'new', 'memory', 'gone']);
    expect(out[0].change).toBeCloseTo(0.5);
    expect(out[0]).toMatchObject({ verdict: 'FAIL → pass', flipped: true });
    expect(out[1]).toMatchObject({ change: 0, verdict: 'pass → pass', flipped: false });
    expect(out[2]).toMatchObject({ change: undefined, verdict: '— → FAIL', flipped: false });
    expect(out[3]).toMatchObject({ change: undefined, verdict: '— → FAIL' });
    expect(out[4]).toMatchObject({ verdict: 'pass → —', flipped: false });
  });
});
