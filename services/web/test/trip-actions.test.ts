import { describe, expect, it } from 'vitest';
import { actionCells, inSequence, located, numberStops, placeName, timeWindow, type ActionRow } from '../src/fleet/trip-actions.js';

describe("a trip's actions", () => {
  it('go by sequenceNr, the unnumbered after them in the order listed', () => {
    const actions = [{ id: 'a' }, { id: 'b', sequenceNr: 2 }, { id: 'c' }, { id: 'd', sequenceNr: 1 }];
    expect(inSequence(actions).map((a) => a.id)).toEqual(['d', 'b', 'a', 'c']);
    expect(actions.map((a) => a.id)).toEqual(['a', 'b', 'c', 'd']);
  });

  it('show their times and the time window constraint they hold inline', () => {
    expect(timeWindow({ startTime: '2026-11-23T06:00:00Z', endTime: '2026-11-23T06:30:00Z' })).toBe('2026-11-23 06:00 – 2026-11-23 06:30');
    expect(timeWindow({ endTime: '2026-11-23T06:30:00Z' })).toBe(' – 2026-11-23 06:30');
    const constraint = {
      associationType: 'inline',
      entity: { value: { type: 'timeWindowConstraint', startTime: '2026-11-23T05:00:00Z', endTime: '2026-11-23T08:00:00Z' } },
    };
    expect(timeWindow({ startTime: '2026-11-23T06:00:00Z', constraint })).toBe(
      '2026-11-23 06:00 – ; window 2026-11-23 05:00 – 2026-11-23 08:00',
    );
    expect(timeWindow({ constraint: { associationType: 'reference', uuid: 'x' } })).toBe('');
  });

  it('name their location as fetched, or by the id it was referenced by', () => {
    const ref = { associationType: 'reference', uuid: 'loc-1' };
    expect(located(undefined, ref)).toEqual({ id: 'loc-1' });
    expect(located({ id: 'loc-1', name: 'Depot', geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 } }, ref)).toEqual({
      id: 'loc-1',
      name: 'Depot',
      lat: 52,
      lon: 5,
    });
    expect(located({ name: 'Office', geoReference: { type: 'addressGeoReference' } }, ref)).toEqual({ id: 'loc-1', name: 'Office' });
    expect([placeName({ id: 'x', name: 'Depot' }), placeName({ id: 'x' }), placeName(undefined)]).toEqual(['Depot', 'x', '']);
  });

  it('number the stops with a point (stop, load, unload), in the order of the list', () => {
    const row = (actionType: string, point: boolean, depth = 0): ActionRow => ({
      depth,
      action: { actionType, lifecycle: 'planned' },
      location: point ? { name: actionType, lat: 52, lon: 5 + depth } : { name: 'an address' },
    });
    const rows = [row('stop', true), row('load', true, 1), row('move', true), row('stop', false), row('unload', true, 1)];
    expect(numberStops(rows)).toEqual([
      [52, 5],
      [52, 6],
      [52, 6],
    ]);
    expect(rows.map((r) => r.stop)).toEqual([1, 2, undefined, undefined, 3]);
    expect(actionCells(rows[1]!)).toEqual(['2', 'load', 'planned', 'load', '']);
    expect(actionCells(rows[3]!)).toEqual(['', 'stop', 'planned', 'an address', '']);
  });
});
