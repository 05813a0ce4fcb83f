/** Unit tests (no I/O): unit normalisation, the analyst columns of an event, and its track point read from them. */
import { describe, expect, it } from 'vitest';
import { speedKmh, storageKey, trackFix } from '@otm/core';
import { columnsTrackFix, eventColumns, normaliseQuantity } from '../../src/index.js';

describe('normaliseQuantity', () => {
  it.each([
    [1500, 'g', 1.5, 'kg'],
    [2, 't', 2000, 'kg'],
    [3, 'kg CO2e', 3, 'kg'],
    [1, 'lb', 0.45359237, 'kg'],
    [500, 'ml', 0.5, 'l'],
    [10, 'L', 10, 'l'],
    [10, 'litres', 10, 'l'],
    [1, 'm3', 1000, 'l'],
    [2, 'gal', 7.570823568, 'l'],
    [5000, 'Wh', 5, 'kWh'],
    [2, 'MWh', 2000, 'kWh'],
    [3.6, 'MJ', 1, 'kWh'],
  ] as const)('%s %s = %s %s', (value, unit, out, outUnit) => {
    expect(normaliseQuantity(value, unit)).toEqual({ value: out, unit: outUnit });
  });
  it('leaves unknown units alone', () => {
    expect(normaliseQuantity(1, 'furlong')).toBeUndefined();
    expect(normaliseQuantity(Number.NaN, 'kg')).toBeUndefined();
  });
  it('speeds', () => {
    expect(speedKmh(10, 'm/s')).toBe(36);
    expect(speedKmh(50, 'km/h')).toBe(50);
    expect(speedKmh(1, 'parsec/s')).toBeUndefined();
  });
});

describe('eventColumns', () => {
  it('takes ids from inline entities, references and the references array', () => {
    const c = eventColumns(
      {
        eventType: 'locationUpdateEvent',
        lifecycle: 'actual',
        creationDate: '2024-03-01T10:00:00.250Z',
        vehicle: { associationType: 'inline', entity: { id: 'AAAAAAAA-0000-4000-8000-000000000001', entityType: 'vehicle' } },
        references: [
          { associationType: 'reference', entityType: 'trip', uuid: 'aaaaaaaa-0000-4000-8000-000000000002' },
          { associationType: 'inline', entity: { entityType: 'sensor', id: 'aaaaaaaa-0000-4000-8000-000000000003' } },
        ],
        geoReference: {
          type: 'latLonPointGeoReference',
          lat: 52.1,
          lon: 4.3,
          speed: { value: 10, unit: 'm/s' },
          heading: { value: 90, unit: 'deg' },
        },
      },
      0,
    );
    expect(c).toMatchObject({
      event_type: 'locationUpdateEvent',
      lifecycle: 'actual',
      event_time: Date.parse('2024-03-01T10:00:00.250Z'),
      vehicle_id: 'aaaaaaaa-0000-4000-8000-000000000001',
      trip_id: 'aaaaaaaa-0000-4000-8000-000000000002',
      sensor_id: 'aaaaaaaa-0000-4000-8000-000000000003',
      lat: 52.1,
      lon: 4.3,
      speed: 10,
      speed_unit: 'm/s',
      speed_kmh: 36,
      heading: 90,
      heading_unit: 'deg',
    });
  });
  it('takes each id as the storage key its entity is found under: a UUID in lower case, the UUID a URI ends in, a name-based UUID', () => {
    const inline = (entityType: string, id: string) => ({ associationType: 'inline', entity: { entityType, id } });
    const c = eventColumns(
      {
        eventType: 'locationUpdateEvent',
        vehicle: inline('vehicle', 'https://fleet.example/vehicles/AAAAAAAA-0000-4000-8000-000000000001'),
        trip: inline('trip', 'trip 42'),
        references: [{ associationType: 'reference', entityType: 'sensor', uuid: 'AAAAAAAA-0000-4000-8000-000000000003' }],
        geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 4 },
      },
      0,
    );
    expect(c).toMatchObject({
      vehicle_id: 'aaaaaaaa-0000-4000-8000-000000000001',
      trip_id: storageKey('trip 42'),
      sensor_id: 'aaaaaaaa-0000-4000-8000-000000000003',
      transport_equipment_id: '',
    });
    expect(columnsTrackFix(c)).toMatchObject({ vehicle: 'aaaaaaaa-0000-4000-8000-000000000001', lat: 52, lon: 4 });
  });
  it('falls back to the acceptance time and leaves absent measurements null', () => {
    const c = eventColumns({ eventType: 'startEngineEvent', geoReference: { type: 'addressGeoReference' } }, 1234);
    expect(c).toMatchObject({ event_time: 1234, lat: null, lon: null, vehicle_id: '', amount: null, sensor_value: null });
  });
  it('reads weigh results and GeoJSON points', () => {
    const c = eventColumns(
      {
        eventType: 'weighEvent',
        weighingResult: { weighingType: 'calibrated', weight: { value: 12.5, unit: 't' } },
        transportEquipment: { associationType: 'reference', entityType: 'transportEquipment', uuid: 'x-1' },
        geoReference: { type: 'Feature', geometry: { type: 'Point', coordinates: [4.3, 52.1] } },
      },
      0,
    );
    expect(c).toMatchObject({
      weight: 12.5,
      weight_unit: 't',
      weight_kg: 12500,
      weighing_type: 'calibrated',
      transport_equipment_id: storageKey('x-1'),
      lat: 52.1,
      lon: 4.3,
    });
  });
});

describe('columnsTrackFix', () => {
  const V = 'B9B7E0F2-8A4C-4A6E-9D35-1F4B1E0C0A01';
  const point = {
    type: 'latLonPointGeoReference',
    lat: 52,
    lon: 4,
    speed: { value: 10, unit: 'm/s' },
    heading: { value: 90, unit: 'deg' },
  };
  const events: Array<Record<string, unknown>> = [
    {
      eventType: 'locationUpdateEvent',
      creationDate: '2024-03-01T10:00:00.250Z',
      vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: V },
      geoReference: point,
    },
    {
      eventType: 'locationUpdateEvent',
      vehicle: { associationType: 'inline', entity: { id: V, entityType: 'vehicle' } },
      geoReference: point,
    },
    {
      eventType: 'locationUpdateEvent',
      references: [{ associationType: 'reference', entityType: 'vehicle', uuid: 'TRUCK-7' }],
      geoReference: point,
    },
    {
      eventType: 'locationUpdateEvent',
      lastModified: '2024-03-01T10:00:00Z',
      vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: V },
      geoReference: { type: 'Feature', geometry: { type: 'Point', coordinates: [4.3, 52.1] } },
    },
    {
      eventType: 'locationUpdateEvent',
      vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: V },
      geoReference: { type: 'latLonPointGeoReference', lat: 52 },
    },
    { eventType: 'locationUpdateEvent', geoReference: point },
    { eventType: 'sensorUpdateEvent', vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: V }, geoReference: point },
  ];
  it.each(events.map((e, i) => [i, e] as const))('event %i: the same as trackFix of the event', (_, event) => {
    expect(columnsTrackFix(eventColumns(event, 1234))).toEqual(trackFix(event, 1234));
  });
  it('gives a fix for the first four only', () => {
    expect(events.map((e) => columnsTrackFix(eventColumns(e, 0)) !== undefined)).toEqual([true, true, true, true, false, false, false]);
  });
});
