import { describe, expect, it } from 'vitest';
import { OtmServiceError } from '@otm/core';
import {
  bboxParam,
  decodeCursor,
  durationParam,
  encodeCursor,
  isPosition,
  kindsParam,
  limitParam,
  listFilters,
  timeParam,
} from '../src/find-params.js';

/** The `field` a 400 names. */
function fieldOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(OtmServiceError);
    expect((e as OtmServiceError).status).toBe(400);
    return ((e as OtmServiceError).items[0] as { field?: string }).field;
  }
  return undefined;
}

describe('find parameters', () => {
  it('limit: 1 to the maximum, else a 400 naming it', () => {
    expect(limitParam(undefined, 100, 1000)).toBe(100);
    expect(limitParam('1000', 100, 1000)).toBe(1000);
    for (const bad of ['0', '1001', '-1', '1e3', '10.5', ''])
      expect(
        fieldOf(() => limitParam(bad, 100, 1000)),
        bad,
      ).toBe('limit');
  });

  it('times: RFC 3339 with a zone only', () => {
    expect(timeParam('from', '2026-11-25T08:00:00Z')).toBe(Date.parse('2026-11-25T08:00:00Z'));
    expect(timeParam('from', '2026-11-25T09:00:00.5+01:00')).toBe(Date.parse('2026-11-25T08:00:00.5Z'));
    for (const bad of ['2026-11-25', '2026-11-25T08:00:00', 'yesterday', '1732521600000'])
      expect(
        fieldOf(() => timeParam('from', bad)),
        bad,
      ).toBe('from');
  });

  it('durations and bbox', () => {
    expect(durationParam('staleAfter', '15m')).toBe(900_000);
    expect(durationParam('staleAfter', '2d')).toBe(172_800_000);
    expect(fieldOf(() => durationParam('staleAfter', '15'))).toBe('staleAfter');
    expect(bboxParam('4.5,51.9,5.5,52.5')).toEqual([4.5, 51.9, 5.5, 52.5]);
    for (const bad of ['1,2,3', '5,52,4,53', '-181,0,0,1', '0,0,1,91', 'a,b,c,d', '1,2,3,4,5'])
      expect(
        fieldOf(() => bboxParam(bad)),
        bad,
      ).toBe('bbox');
  });

  it('cursors round-trip, and anything else is a 400 naming cursor', () => {
    const c = encodeCursor([1732521600000, '7a000000-0000-4000-8000-000000000001']);
    expect(decodeCursor(c, isPosition)).toEqual([1732521600000, '7a000000-0000-4000-8000-000000000001']);
    for (const bad of ['%%%', encodeCursor({ a: 1 }), encodeCursor([1.5, 'x']), 'x'.repeat(2000)])
      expect(fieldOf(() => decodeCursor(bad, isPosition))).toBe('cursor');
  });

  it('filters: per kind, enums checked, ids as storage keys', () => {
    const f = listFilters('trips', { status: 'inTransit', vehicle: '7B000000-0000-4000-8000-000000000001' });
    expect([...f.facets]).toEqual([
      ['status', 'inTransit'],
      ['vehicle', '7b000000-0000-4000-8000-000000000001'],
    ]);
    expect(fieldOf(() => listFilters('trips', { status: 'driving' }))).toBe('status');
    expect(fieldOf(() => listFilters('events', { eventType: 'teleportEvent' }))).toBe('eventType');
    expect(fieldOf(() => listFilters('events', { from: '2026-11-25T10:00:00Z', to: '2026-11-25T09:00:00Z' }))).toBe('to');
    expect(fieldOf(() => listFilters('vehicles', { licensePlate: '' }))).toBe('licensePlate');
    expect(kindsParam('trips,events')).toEqual(new Set(['trips', 'events']));
    expect(fieldOf(() => kindsParam('trips,boats'))).toBe('kinds');
  });
});
