import type { ErrorObject } from 'ajv';
import { describe, expect, it } from 'vitest';
import { OtmServiceError } from '@otm/core';
import { schemaRefusal, validatorCompiler } from '@otm/http';
import {
  BBOX,
  CHANGES_QUERY,
  DURATION,
  bboxOf,
  decodeCursor,
  durationOf,
  encodeCursor,
  isPosition,
  kindsOf,
  listFilters,
  listQuery,
  timeOf,
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

/** The field a query's schema refuses, as the route answers it; undefined when the query follows it. */
function refused(schema: object, query: Record<string, unknown>): string | undefined {
  const check = validatorCompiler({ schema, method: 'GET', url: '/', httpPart: 'querystring' }) as ((d: unknown) => boolean) & {
    errors?: ErrorObject[];
  };
  if (check({ ...query })) return undefined;
  const items = schemaRefusal(check.errors ?? [], 'querystring', schema, 'GET', '/').items;
  return (items[0] as { field?: string }).field;
}
const one = (name: string, schema: object) => ({ type: 'object', additionalProperties: false, properties: { [name]: schema } });

describe('find parameters', () => {
  it('limit: 1 to the maximum, given once, else a 400 naming it', () => {
    expect(refused(CHANGES_QUERY, { limit: '1000' })).toBeUndefined();
    for (const bad of ['0', '1001', '-1', '10.5', '', 'ten', ['1', '2']])
      expect(refused(CHANGES_QUERY, { limit: bad }), String(bad)).toBe('limit');
  });

  it('an unknown parameter is a 400 naming it', () => {
    expect(refused(CHANGES_QUERY, { limits: '5' })).toBe('limits');
  });

  it('times: RFC 3339 with a zone only', () => {
    const q = listQuery('events');
    expect(refused(q, { from: '2026-11-25T09:00:00.5+01:00' })).toBeUndefined();
    expect(timeOf('2026-11-25T09:00:00.5+01:00')).toBe(Date.parse('2026-11-25T08:00:00.5Z'));
    for (const bad of ['2026-11-25', '2026-11-25T08:00:00', 'yesterday', '1732521600000'])
      expect(refused(q, { from: bad }), bad).toBe('from');
  });

  it('durations and bbox', () => {
    expect(durationOf('15m')).toBe(900_000);
    expect(durationOf('2d')).toBe(172_800_000);
    expect(refused(one('staleAfter', DURATION), { staleAfter: '15' })).toBe('staleAfter');
    expect(bboxOf('4.5,51.9,5.5,52.5')).toEqual([4.5, 51.9, 5.5, 52.5]);
    for (const bad of ['1,2,3', 'a,b,c,d', '1,2,3,4,5']) expect(refused(one('bbox', BBOX), { bbox: bad }), bad).toBe('bbox');
    for (const bad of ['5,52,4,53', '-181,0,0,1', '0,0,1,91']) {
      expect(refused(one('bbox', BBOX), { bbox: bad }), bad).toBeUndefined();
      expect(fieldOf(() => bboxOf(bad))).toBe('bbox');
    }
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
    expect(refused(listQuery('trips'), { status: 'driving' })).toBe('status');
    expect(refused(listQuery('trips'), { eventType: 'arrivalEvent' })).toBe('eventType');
    expect(refused(listQuery('events'), { eventType: 'teleportEvent' })).toBe('eventType');
    expect(fieldOf(() => listFilters('events', { from: '2026-11-25T10:00:00Z', to: '2026-11-25T09:00:00Z' }))).toBe('to');
    expect(refused(listQuery('vehicles'), { licensePlate: '' })).toBe('licensePlate');
    expect(kindsOf('trips,events')).toEqual(new Set(['trips', 'events']));
    expect(refused(CHANGES_QUERY, { kinds: 'trips,boats' })).toBe('kinds');
  });
});
