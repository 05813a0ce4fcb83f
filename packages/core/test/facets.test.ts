import { describe, expect, it } from 'vitest';
import {
  FACET_VALUE_MAX,
  changeFacts,
  facet,
  facetsOf,
  filterValues,
  listedFacets,
  parseChangeDocument,
  trackFix,
  storageKey,
  eventTimeMs,
  speedKmh,
  eventFacts,
  eventFactsAt,
  linkedKey,
  newEventFactsTable,
  setEventFacts,
} from '../src/index.js';

const V = '7b000000-0000-4000-8000-000000000001';

describe('facets', () => {
  it('lists a trip under its status, vehicle, actors and external ids', () => {
    const trip = {
      id: 'x',
      status: 'inTransit',
      vehicle: { associationType: 'reference', uuid: V.toUpperCase(), entityType: 'vehicle' },
      actors: [
        { associationType: 'inline', entity: { id: 'https://example.com/actors/7c000000-0000-4000-8000-000000000001', name: 'a' } },
        { associationType: 'reference', uuid: '7c000000-0000-4000-8000-000000000002', entityType: 'actor' },
      ],
      externalIdentifiers: [{ id: 'ORDER-1', scheme: 'erp' }, { id: 'T-9' }],
    };
    expect(facetsOf('trips', trip).sort()).toEqual(
      [
        '',
        'status=inTransit',
        `vehicle=${V}`,
        'actor=7c000000-0000-4000-8000-000000000001',
        'actor=7c000000-0000-4000-8000-000000000002',
        'externalId=ORDER-1',
        'externalId=T-9',
      ].sort(),
    );
  });

  it('lists events by type, linked vehicle (also in references) and lifecycle', () => {
    const event = {
      eventType: 'locationUpdateEvent',
      lifecycle: 'actual',
      references: [{ associationType: 'reference', uuid: V, entityType: 'vehicle' }],
    };
    expect(facetsOf('events', event).sort()).toEqual(['', 'eventType=locationUpdateEvent', 'lifecycle=actual', `vehicle=${V}`].sort());
    expect(filterValues('events', event, 'vehicle')).toEqual([V]);
  });

  it('keeps facets bounded: a long value is hashed', () => {
    const long = 'x'.repeat(FACET_VALUE_MAX + 1);
    const f = facet('externalId', long);
    expect(f).toMatch(/^externalId=#[0-9a-f]{64}$/);
    expect(facetsOf('vehicles', { externalIdentifiers: [{ id: long }] })).toContain(f);
    expect(facet('externalId', 'short')).toBe('externalId=short');
  });

  it('lists an entity under the union of its versions', () => {
    expect(listedFacets({ at: 1, ranks: { 2: ['', 'lifecycle=planned'], 4: ['', 'lifecycle=actual'] } }).sort()).toEqual([
      '',
      'lifecycle=actual',
      'lifecycle=planned',
    ]);
  });
});

describe('trackFix', () => {
  const event = {
    eventType: 'locationUpdateEvent',
    creationDate: '2026-11-25T08:00:00Z',
    vehicle: { associationType: 'reference', uuid: V, entityType: 'vehicle' },
    geoReference: { type: 'latLonPointGeoReference', lat: 52.1, lon: 5.2, speed: { value: 10, unit: 'm/s' }, heading: { value: 90 } },
  };

  it('reads vehicle, time, position, speed in km/h and heading', () => {
    expect(trackFix(event, 0)).toEqual({
      vehicle: V,
      time: Date.parse('2026-11-25T08:00:00Z'),
      lat: 52.1,
      lon: 5.2,
      speedKmh: 36,
      heading: 90,
    });
  });

  it('takes the acceptance time when the event has none, and only location events with a vehicle and a position', () => {
    expect(trackFix({ ...event, creationDate: undefined }, 123)?.time).toBe(123);
    expect(trackFix({ ...event, eventType: 'sensorUpdateEvent' }, 0)).toBeUndefined();
    expect(trackFix({ ...event, vehicle: undefined }, 0)).toBeUndefined();
    expect(trackFix({ ...event, geoReference: { type: 'latLonPointGeoReference' } }, 0)).toBeUndefined();
  });
});

describe('speedKmh and eventTimeMs', () => {
  it('converts the known units, whatever their case and spaces, and no other name', () => {
    expect(speedKmh(10, 'm/s')).toBe(36);
    expect(speedKmh(10, ' M / S ')).toBe(36);
    expect(speedKmh(100, 'mph')).toBe(160.9344);
    expect(speedKmh(10, 'kn')).toBe(18.52);
    expect(speedKmh(0.1 + 0.2, 'km/h')).toBe(0.1 + 0.2); // as sent, not rounded
    for (const unit of ['constructor', 'toString', '__proto__', 'furlongs', '']) expect(speedKmh(10, unit)).toBeUndefined();
    expect(speedKmh(Number.NaN, 'km/h')).toBeUndefined();
    // Asked again (from the table of units met): the same answers.
    expect(speedKmh(10, ' M / S ')).toBe(36);
    expect(speedKmh(10, 'constructor')).toBeUndefined();
  });

  it('still converts once the table of units met is full', () => {
    for (let i = 0; i < 300; i++) expect(speedKmh(1, `unit-${i}`)).toBeUndefined();
    expect(speedKmh(10, 'MPS')).toBe(36);
  });

  it('takes creationDate, else lastModified, else the fallback', () => {
    expect(eventTimeMs({ creationDate: '2026-01-01T00:00:00Z', lastModified: '2026-02-01T00:00:00Z' }, 5)).toBe(Date.UTC(2026, 0, 1));
    expect(eventTimeMs({ creationDate: 'soon', lastModified: '2026-02-01T00:00:00Z' }, 5)).toBe(Date.UTC(2026, 1, 1));
    expect(eventTimeMs({ creationDate: 7 }, 5)).toBe(5);
  });
});

describe('linkedKey', () => {
  it('is the storage key of the entity an event names, found as GET finds the entity', () => {
    const inline = (id: string) => ({ associationType: 'inline', entity: { entityType: 'vehicle', id } });
    expect(linkedKey({ vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: V.toUpperCase() } }, 'vehicle')).toBe(V);
    expect(linkedKey({ vehicle: inline(`https://fleet.example/vehicles/${V.toUpperCase()}`) }, 'vehicle')).toBe(V);
    // A name keeps its case, as the vehicle's own PUT does: 'Truck 7' and 'truck 7' are two vehicles.
    expect(linkedKey({ vehicle: inline('Truck 7') }, 'vehicle')).toBe(storageKey('Truck 7'));
    expect(linkedKey({ vehicle: inline('Truck 7') }, 'vehicle')).not.toBe(storageKey('truck 7'));
    // Else the first item of references of that type; '' for none.
    const refs = [
      { associationType: 'reference', entityType: 'trip', uuid: V },
      { associationType: 'inline', entity: { entityType: 'vehicle', id: 'Truck 8' } },
    ];
    expect(linkedKey({ references: refs }, 'vehicle')).toBe(storageKey('Truck 8'));
    expect(linkedKey({ references: refs }, 'sensor')).toBe('');
    expect(linkedKey({ vehicle: { associationType: 'reference', entityType: 'vehicle' } }, 'vehicle')).toBe('');
  });
});

describe('eventFacts and their table', () => {
  const vehicle = { associationType: 'reference', entityType: 'vehicle', uuid: V.toUpperCase() };
  const located = {
    eventType: 'locationUpdateEvent',
    creationDate: '2026-01-01T00:00:00Z',
    vehicle,
    geoReference: {
      type: 'latLonPointGeoReference',
      lat: 52,
      lon: 5,
      speed: { value: 10, unit: 'm/s' },
      heading: { value: 90, unit: 'deg' },
    },
  };

  it('reads a track point, an event of a vehicle, and an event of none', () => {
    expect(eventFacts(located)).toEqual({
      time: Date.UTC(2026, 0, 1),
      vehicle: V,
      type: 'locationUpdateEvent',
      lat: 52,
      lon: 5,
      speedKmh: 36,
      heading: 90,
      located: true,
    });
    // A location event without a position is no track point, but still its vehicle's.
    expect(eventFacts({ ...located, geoReference: undefined })).toMatchObject({ vehicle: V, lat: null, located: false });
    expect(eventFacts({ eventType: 'startEngineEvent', vehicle })).toEqual({
      time: Number.NaN,
      vehicle: V,
      type: 'startEngineEvent',
      lat: null,
      lon: null,
      speedKmh: null,
      heading: null,
      located: false,
    });
    expect(eventFacts({ eventType: '', lastModified: '2026-01-02T00:00:00Z' })).toMatchObject({
      time: Date.UTC(2026, 0, 2),
      vehicle: '',
      type: undefined,
    });
  });

  it('keeps them in flat arrays and gives back the same facts; none for an entry not set', () => {
    const table = newEventFactsTable(3);
    const facts = [eventFacts(located), eventFacts({ eventType: 'startEngineEvent', vehicle })];
    setEventFacts(table, 0, facts[0]!);
    setEventFacts(table, 2, facts[1]!);
    expect(eventFactsAt(table, 0)).toEqual(facts[0]);
    expect(eventFactsAt(table, 1)).toBeUndefined();
    expect(eventFactsAt(table, 2)).toEqual(facts[1]);
    expect(eventFactsAt(table, 3)).toBeUndefined();
  });
});

describe('changeFacts (the stream and webhook filters)', () => {
  const V = '3f2b6c1e-9d4a-4f7b-8c2e-1a2b3c4d5e6f';
  const T = '5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d';
  const ref = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
  it('a vehicle names itself; a trip itself and its vehicle; an event its vehicle, trip and type', () => {
    expect(changeFacts('vehicles', V, undefined)).toEqual({ vehicles: [V], trips: [], eventType: undefined });
    expect(changeFacts('trips', T, { vehicle: ref('vehicle', V.toUpperCase()) })).toEqual({
      vehicles: [V],
      trips: [T],
      eventType: undefined,
    });
    const event = { eventType: 'locationUpdateEvent', vehicle: ref('vehicle', V), references: [ref('trip', T)] };
    expect(changeFacts('events', 'e1', event)).toEqual({ vehicles: [V], trips: [T], eventType: 'locationUpdateEvent' });
  });
  it('another kind names its vehicle; a change without a document names only itself', () => {
    expect(changeFacts('consignments', 'c1', { vehicle: ref('vehicle', V) }).vehicles).toEqual([V]);
    expect(changeFacts('events', 'e1', undefined)).toEqual({ vehicles: [], trips: [], eventType: undefined });
    expect(changeFacts('trips', T, undefined)).toEqual({ vehicles: [], trips: [T], eventType: undefined });
  });
  it('parses only JSON objects', () => {
    expect(parseChangeDocument(Buffer.from('{"a":1}'))).toEqual({ a: 1 });
    expect(parseChangeDocument('[1]')).toBeUndefined();
    expect(parseChangeDocument('{')).toBeUndefined();
    expect(parseChangeDocument(undefined)).toBeUndefined();
  });
});
