import { describe, expect, it } from 'vitest';
import {
  actionUuid,
  columnLabel,
  LIFECYCLES,
  lifecycleCaption,
  lifecycleCells,
  lifecycleColumns,
  lifecycleStatus,
  NO_LIFECYCLE,
} from '../src/fleet/lifecycle-grid.js';

describe('the lifecycles side by side', () => {
  it("asks for an action's versions by the UUID its id ends in", () => {
    expect(LIFECYCLES).toEqual(['requested', 'planned', 'projected', 'actual', 'realized']);
    expect(actionUuid('0B6B7F3E-5C1D-4A8E-9F11-2A7C0D5E9A09')).toBe('0B6B7F3E-5C1D-4A8E-9F11-2A7C0D5E9A09');
    expect(actionUuid('https://example.org/actions/0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a09')).toBe('0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a09');
    expect(actionUuid('stop-1')).toBeUndefined();
    expect(actionUuid(undefined)).toBeUndefined();
  });

  it('has a column for each lifecycle any action has a version of, earliest first, no lifecycle before all', () => {
    const versions = [
      new Map([
        ['actual', 1],
        ['planned', 2],
      ]),
      new Map([[NO_LIFECYCLE, 3]]),
      new Map([['projected', 4]]),
    ];
    expect(lifecycleColumns(versions)).toEqual([NO_LIFECYCLE, 'planned', 'projected', 'actual']);
    expect(lifecycleColumns([])).toEqual([]);
    expect([NO_LIFECYCLE, 'planned'].map(columnLabel)).toEqual(['no lifecycle', 'planned']);
  });

  it('marks a cell that differs from the last version on its left, across a missing one', () => {
    const columns = ['planned', 'projected', 'actual', 'realized'];
    const texts = new Map<string, [string, string]>([
      ['planned', ['06:00 – 06:30', 'Depot']],
      ['actual', ['06:10 – 06:40', 'Depot']],
      ['realized', ['06:10 – 06:40', 'Depot']],
    ]);
    expect(lifecycleCells(texts, columns)).toEqual([
      { absent: false, time: '06:00 – 06:30', place: 'Depot', changed: false },
      { absent: true },
      { absent: false, time: '06:10 – 06:40', place: 'Depot', changed: true },
      { absent: false, time: '06:10 – 06:40', place: 'Depot', changed: false },
    ]);
    // Another place at the same time is a change too.
    const moved = new Map<string, [string, string]>([
      ['planned', ['', 'Depot']],
      ['projected', ['', 'Hub']],
    ]);
    expect(lifecycleCells(moved, columns).map((c) => !c.absent && c.changed)).toEqual([false, true, false, false]);
  });

  it('says what the table holds', () => {
    expect(lifecycleCaption(['planned'])).toBe('Only one lifecycle is stored for these actions (planned): nothing to set beside it yet.');
    expect(lifecycleCaption([NO_LIFECYCLE, 'planned', 'actual'])).toBe(
      "Each action's versions, no lifecycle | planned | actual: a cell that differs from the one on its left is marked as changed.",
    );
    expect(lifecycleStatus(7, 3, 2)).toBe('7 versions of 3 actions in 2 lifecycles.');
    expect(lifecycleStatus(1, 1, 1)).toBe('1 version of 1 action in 1 lifecycle.');
  });
});
