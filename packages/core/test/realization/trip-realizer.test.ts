import { describe, expect, it } from 'vitest';
import type { Crossing } from '../../src/realization/fence-tracker.js';
import {
  INITIAL_STATE,
  ordered,
  realize,
  type PlannedAction,
  type Realization,
  type RealizerState,
} from '../../src/realization/trip-realizer.js';

const T0 = Date.parse('2026-06-02T08:00:00Z');
let n = 0;
const enter = (location: string, min: number): Crossing => ({
  kind: 'enter',
  location,
  time: T0 + min * 60_000,
  fixes: [`e${n++}`, `e${n++}`],
});
const exit = (location: string, min: number): Crossing => ({ kind: 'exit', location, time: T0 + min * 60_000, fixes: [`e${n++}`] });

/** Feeds the crossings; every realization that did something, as text. */
function run(actions: PlannedAction[], crossings: Crossing[]): { out: string[]; state: RealizerState; all: Realization[] } {
  let state = INITIAL_STATE;
  const out: string[] = [];
  const all: Realization[] = [];
  for (const c of crossings) {
    const r = realize(actions, state, c);
    state = r.state;
    all.push(r);
    if (r.action)
      out.push(
        `${r.action.key} ${r.action.lifecycle} ${(r.action.startTime - T0) / 60_000}${r.action.endTime === undefined ? '' : `-${(r.action.endTime - T0) / 60_000}`}`,
      );
    if (r.tripStatus) out.push(`trip ${r.tripStatus}`);
  }
  return { out, state, all };
}

const plan = (...locations: string[]): PlannedAction[] =>
  locations.map((location, i) => ({ key: `a${i + 1}`, location, sequenceNr: i + 1 }));

describe('realizing a trip from geofence crossings', () => {
  it('realizes each action on entry (actual) and on exit (realized), and moves the trip on', () => {
    const { out, all } = run(plan('A', 'B', 'C'), [
      enter('A', 10),
      exit('A', 40),
      enter('B', 60),
      exit('B', 100),
      enter('C', 120),
      exit('C', 140),
    ]);
    expect(out).toEqual([
      'a1 actual 10',
      'a1 realized 10-40',
      'trip inTransit',
      'a2 actual 60',
      'a2 realized 60-100',
      'trip inTransit',
      'a3 actual 120',
      'a3 realized 120-140',
      'trip completed',
    ]);
    // The location events that decided both crossings, once each.
    const realized = all[1]!.action!;
    expect(realized.contextEvents).toEqual([...new Set(realized.contextEvents)]);
    expect(realized.contextEvents).toHaveLength(3);
  });

  it('realizes nothing at a location the trip does not name', () => {
    expect(run(plan('A', 'B'), [enter('X', 5), exit('X', 20)]).out).toEqual([]);
  });

  it('realizes, at a location visited twice, the action whose turn it is', () => {
    // A, B, A: the second visit to A realizes the third action.
    expect(
      run(plan('A', 'B', 'A'), [enter('A', 0), exit('A', 30), enter('B', 50), exit('B', 80), enter('A', 100), exit('A', 120)]).out,
    ).toEqual([
      'a1 actual 0',
      'a1 realized 0-30',
      'trip inTransit',
      'a2 actual 50',
      'a2 realized 50-80',
      'trip inTransit',
      'a3 actual 100',
      'a3 realized 100-120',
      'trip completed',
    ]);
    // Back at A before going to B: the later visit to A is not realized early.
    const back = run(plan('A', 'B', 'A'), [enter('A', 0), exit('A', 30), enter('A', 35), exit('A', 45), enter('B', 60)]);
    expect(back.out).toEqual(['a1 actual 0', 'a1 realized 0-30', 'trip inTransit', 'a2 actual 60']);
  });

  it('skips an action the vehicle never went to, leaving it planned', () => {
    expect(run(plan('A', 'B', 'C'), [enter('A', 0), exit('A', 20), enter('C', 50), exit('C', 70)]).out).toEqual([
      'a1 actual 0',
      'a1 realized 0-20',
      'trip inTransit',
      'a3 actual 50',
      'a3 realized 50-70',
      'trip completed',
    ]);
  });

  it('ignores an exit of another location while an action is open, and an entry while one is', () => {
    expect(run(plan('A', 'B'), [enter('A', 0), exit('B', 5), enter('B', 6), exit('A', 20)]).out).toEqual([
      'a1 actual 0',
      'a1 realized 0-20',
      'trip inTransit',
    ]);
  });

  it('orders actions by sequenceNr, those without one last, then as listed', () => {
    const actions: PlannedAction[] = [
      { key: 'x', location: 'X', sequenceNr: undefined },
      { key: 'c', location: 'C', sequenceNr: 3 },
      { key: 'a', location: 'A', sequenceNr: 1 },
      { key: 'y', location: 'Y', sequenceNr: undefined },
    ];
    expect(ordered(actions).map((a) => a.key)).toEqual(['a', 'c', 'x', 'y']);
  });
});
