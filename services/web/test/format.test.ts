import { describe, expect, it } from 'vitest';
import { count, errorLine, fmtSecond, fmtTime, str } from '../src/fleet/format.js';
import { positionOf } from '../src/fleet/positions.js';

describe("the fleet page's texts", () => {
  it("writes times in UTC: to the second with the zone, a document's to the minute", () => {
    expect(fmtSecond(Date.UTC(2024, 2, 11, 7, 0, 5, 999))).toBe('2024-03-11 07:00:05 UTC');
    expect(fmtTime('2024-03-11T09:00:05+02:00')).toBe('2024-03-11 07:00');
    expect(fmtTime('not a time')).toBe('not a time');
    expect(fmtTime(undefined)).toBe('');
    expect(fmtTime(1710140405000)).toBe('');
  });

  it('counts in the singular for one, else in the plural', () => {
    expect([0, 1, 2].map((n) => count(n, 'trip'))).toEqual(['0 trips', '1 trip', '2 trips']);
    expect(str('a')).toBe('a');
    expect(str(1)).toBe('');
  });

  it("says an error answer's items in one line", () => {
    expect(
      errorLine([
        { type: 'invalidField', field: 'licencePlate', message: "unknown member of vehicle; did you mean 'licensePlate'?" },
        { type: 'unauthorized', message: 'no token' },
      ]),
    ).toBe("licencePlate: unknown member of vehicle; did you mean 'licensePlate'?; no token");
    expect(errorLine([])).toBe('');
  });
});

describe('positionOf', () => {
  const event = {
    eventType: 'locationUpdateEvent',
    creationDate: '2026-11-26T06:18:27Z',
    vehicle: { associationType: 'reference', uuid: '0B6B7F3E-5C1D-4A8E-9F11-2A7C0D5E9A01', entityType: 'vehicle' },
    geoReference: { type: 'latLonPointGeoReference', lat: 52.09, lon: 5.12 },
  };

  it("reads a location event's vehicle (its id in lower case) and point", () => {
    expect(positionOf(event)).toEqual({
      vehicle: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a01',
      time: '2026-11-26T06:18:27Z',
      lat: 52.09,
      lon: 5.12,
    });
    // An inline vehicle, and an event without a time: the time it arrived.
    const untimed = { ...event, creationDate: undefined };
    expect(positionOf({ ...untimed, vehicle: { associationType: 'inline', entity: { id: 'V1' } } }, () => '2026-01-01T00:00:00Z')).toEqual({
      vehicle: 'v1',
      time: '2026-01-01T00:00:00Z',
      lat: 52.09,
      lon: 5.12,
    });
  });

  it('leaves out other events, and positions that are no point', () => {
    expect(positionOf({ ...event, eventType: 'startEngineEvent' })).toBeUndefined();
    expect(positionOf({ ...event, geoReference: { type: 'addressGeoReference', address: {} } })).toBeUndefined();
    expect(positionOf({ ...event, geoReference: { type: 'latLonPointGeoReference', lat: '52', lon: 5 } })).toBeUndefined();
    expect(positionOf({ ...event, vehicle: undefined })).toBeUndefined();
  });
});
