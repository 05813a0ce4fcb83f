/**
 * Hostile documents against the model's validation (@otm/model): an invalid document costs work in
 * proportion to its size, not to the number of its problems times anything; the answer stays small
 * whatever the document echoes; every number is finite; latitudes and longitudes are in range.
 * Deterministic: no assertion on time (bench/diag/hostile/invalid-documents.mjs measures it).
 */
import { describe, expect, it } from 'vitest';
import { MAX_ERRORS, validateEntity, validatePatch, type OtmError } from '@otm/model';
import { reportWork } from '../../packages/model/src/validate.js';
import { checkDocument } from '../../services/ingress/src/check-document.js';
import { OtmServiceError } from '@otm/core';
import { trip } from '../fixtures/documents.js';

const UUID = '50824123-0924-4563-ac1e-ca0e37487823';
const point = (lat: unknown, lon: unknown) => ({ type: 'latLonPointGeoReference', lat, lon });
const size = (v: unknown) => JSON.stringify(v).length;
const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;

/** The items of the 400 that checkDocument (a PUT or a bulk item) throws, or [] when it accepts. */
function checked(kind: Parameters<typeof checkDocument>[0], body: unknown): OtmError[] {
  try {
    checkDocument(kind, body);
    return [];
  } catch (err) {
    if (err instanceof OtmServiceError) return err.items as OtmError[];
    throw err;
  }
}

/** `{ entityType: 'trip', <name(i)>: 0 ... }` with n members. */
function unknownMembers(n: number, name: (i: number) => string): Record<string, unknown> {
  const doc: Record<string, unknown> = { entityType: 'trip' };
  for (let i = 0; i < n; i++) doc[name(i)] = 0;
  return doc;
}

describe('an invalid document costs work in proportion to the answer, not to its problems', () => {
  it('95,000 unknown members: at most 100 items, suggestions computed for those listed only', () => {
    const doc = unknownMembers(95_000, (i) => `licencePlate${i}`);
    const before = { ...reportWork };
    const errs = validateEntity('trips', doc);
    expect(errs).toHaveLength(MAX_ERRORS);
    expect(errs[0]).toEqual({ type: 'invalidField', field: 'licencePlate0', message: 'unknown member of trip' });
    expect(errs[MAX_ERRORS - 1]).toMatchObject({
      type: 'invalidField',
      field: '$',
      message: expect.stringMatching(/more problems not listed/),
    });
    expect(reportWork.suggested - before.suggested).toBeLessThanOrEqual(MAX_ERRORS);
    expect(reportWork.mapped - before.mapped).toBeLessThanOrEqual(1_000);
  });

  it('300,000 wrong items in one array: the errors mapped are bounded', () => {
    const before = { ...reportWork };
    const errs = validateEntity('trips', { actions: Array.from({ length: 300_000 }, () => 1) });
    expect(errs).toHaveLength(MAX_ERRORS);
    expect(errs[0]).toEqual({ type: 'invalidField', field: 'actions[0]', message: 'must be a JSON object, got number' });
    expect(errs[MAX_ERRORS - 2]).toMatchObject({ field: `actions[${MAX_ERRORS - 2}]` });
    expect(errs[MAX_ERRORS - 1]).toEqual({
      type: 'invalidField',
      field: '$',
      message: `more problems not listed (at most ${MAX_ERRORS} items are reported)`,
    });
    expect(reportWork.mapped - before.mapped).toBeLessThanOrEqual(1_000);
  });

  it('a few hundred problems are still counted exactly', () => {
    const errs = validateEntity('vehicles', { fuels: Array.from({ length: 300 }, () => ({ fuelType: 'Diesel' })) });
    expect(errs).toHaveLength(MAX_ERRORS);
    expect(errs[MAX_ERRORS - 1]).toEqual({
      type: 'invalidField',
      field: '$',
      message: `201 more problems not listed (at most ${MAX_ERRORS} items are reported)`,
    });
  });

  it('a merge patch without its discriminator is not validated once per sub-kind', () => {
    const members = Object.fromEntries(Array.from({ length: 50_000 }, (_, i) => [`u${i}`, 0]));
    const before = { ...reportWork };
    const errs = validatePatch('actions', members); // 12 sub-kinds, none knows these members
    expect(errs).toHaveLength(MAX_ERRORS);
    expect(errs[0]).toEqual({ type: 'invalidField', field: 'u0', message: 'unknown member of load' });
    expect(reportWork.tried - before.tried).toBeLessThanOrEqual(1);
    // the closest sub-kind is still the one with the fewest problems
    expect(validatePatch('actions', { from: { associationType: 'reference', uuid: UUID, entityType: 'location' }, u: 1 })).toEqual([
      { type: 'invalidField', field: 'u', message: 'unknown member of move' },
    ]);
  });

  it('a suggestion is only looked for among names of a plausible length', () => {
    const before = { ...reportWork };
    const errs = validateEntity('vehicles', { [`licencePlate${'x'.repeat(100_000)}`]: 1, licencePlate: 'X' });
    expect(errs).toHaveLength(2);
    expect(errs[1]).toEqual({
      type: 'invalidField',
      field: 'licencePlate',
      message: "unknown member of vehicle; did you mean 'licensePlate'?",
    });
    expect(reportWork.compared - before.compared).toBeLessThan(100);
  });
});

describe('the answer never echoes more than a little of the document', () => {
  const long = 'a'.repeat(100_000);

  it('an unknown member named 100 KB is shortened in field, and the message says so', () => {
    const errs = validateEntity('trips', { [long]: 1 });
    expect(errs).toHaveLength(1);
    const [e] = errs as [{ type: string; field: string; message: string }];
    expect(e.type).toBe('invalidField');
    expect(e.field.startsWith(`["${'a'.repeat(60)}`)).toBe(true);
    expect(e.field.length).toBeLessThan(100);
    expect(e.message).toMatch(/^unknown member of trip.*shortened/);
    expect(size(errs)).toBeLessThan(300);
  });

  it('a long name inside a path is shortened for every item that passes through it', () => {
    const attrs = { [long]: Object.fromEntries(Array.from({ length: 150 }, (_, i) => [`n${i}`, Infinity])) };
    const doc = { externalAttributes: attrs };
    const errs = validateEntity('trips', doc);
    expect(errs).toHaveLength(MAX_ERRORS);
    expect(size(errs)).toBeLessThan(size(doc));
    expect(size(errs)).toBeLessThan(32 * 1024);
  });

  it('a 100 KB entityType is not echoed whole', () => {
    const errs = validateEntity('trips', { entityType: long });
    expect(errs).toHaveLength(1);
    expect(size(errs)).toBeLessThan(400);
    expect(validatePatch('trips', { entityType: long }).map((e) => size(e))[0]).toBeLessThan(400);
  });

  it('a string value of 100 KB is described by its first characters', () => {
    const errs = validateEntity('trips', { status: long });
    expect(size(errs)).toBeLessThan(700);
  });

  it('even a deep path of long names keeps each item and the answer bounded', () => {
    let v: Record<string, unknown> = Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`x${i}`, -Infinity]));
    for (let i = 0; i < 60; i++) v = { [`${'n'.repeat(200)}${i}`]: v };
    const errs = validateEntity('trips', { externalAttributes: { a: v } });
    expect(errs.length).toBeLessThanOrEqual(MAX_ERRORS);
    for (const e of errs) if ('field' in e) expect(e.field.length).toBeLessThanOrEqual(1_000);
    expect(size(errs)).toBeLessThanOrEqual(32 * 1024);
    expect(errs[errs.length - 1]).toMatchObject({ field: '$', message: expect.stringMatching(/more problems not listed/) });
  });
});

describe('every number is finite', () => {
  const FINITE = /^must be a finite number; the number given is out of range/;

  it('1e400 at a latitude is refused at that member', () => {
    const doc = JSON.parse('{"geoReference":{"type":"latLonPointGeoReference","lat":1e400,"lon":5}}') as unknown;
    expect(validateEntity('locations', doc)).toEqual([
      { type: 'invalidField', field: 'geoReference.lat', message: expect.stringMatching(FINITE) },
    ]);
  });

  it('deep inside a trip, negative too, and at an integer member', () => {
    const doc = clone(trip) as unknown as { actions: { entity: Record<string, unknown> }[] };
    const stop = doc.actions[0]!.entity;
    (stop.location as { entity: { geoReference: Record<string, unknown> } }).entity.geoReference.lon = -Infinity;
    stop.sequenceNr = Infinity;
    expect(validateEntity('trips', doc)).toEqual([
      {
        type: 'invalidField',
        field: 'actions[0].entity.sequenceNr',
        message: expect.stringMatching(/^must be a finite integer; the number given is out of range/),
      },
      { type: 'invalidField', field: 'actions[0].entity.location.entity.geoReference.lon', message: expect.stringMatching(FINITE) },
    ]);
  });

  it('inside externalAttributes (any JSON value), at the exact path', () => {
    const doc = JSON.parse('{"externalAttributes":{"ok":[1,"x",{"y":2}],"a":{"b":[0,-1e999]},"odd.name":1e400}}') as unknown;
    expect(validateEntity('trips', doc)).toEqual([
      { type: 'invalidField', field: 'externalAttributes.a.b[1]', message: expect.stringMatching(FINITE) },
      { type: 'invalidField', field: 'externalAttributes["odd.name"]', message: expect.stringMatching(FINITE) },
    ]);
    expect(validateEntity('trips', { externalAttributes: { n: NaN } })).toEqual([
      { type: 'invalidField', field: 'externalAttributes.n', message: 'must be a finite number; got NaN' },
    ]);
  });

  it('in the entity of an updateEvent and in a merge patch', () => {
    const event = JSON.parse(
      `{"eventType":"updateEvent","entity":{"entityType":"location","id":"${UUID}","geoReference":{"type":"latLonPointGeoReference","lat":1e400},"externalAttributes":{"x":-1e400}}}`,
    ) as unknown;
    expect(validateEntity('events', event)).toEqual([
      { type: 'invalidField', field: 'entity.geoReference.lat', message: expect.stringMatching(FINITE) },
      { type: 'invalidField', field: 'entity.externalAttributes.x', message: expect.stringMatching(FINITE) },
    ]);
    expect(validatePatch('vehicles', { emptyWeight: { value: Infinity } })).toEqual([
      { type: 'invalidField', field: 'emptyWeight.value', message: expect.stringMatching(FINITE) },
    ]);
  });

  it('a PUT and a bulk item (checkDocument) are refused', () => {
    const doc = JSON.parse(
      '{"eventType":"locationUpdateEvent","geoReference":{"type":"latLonPointGeoReference","lat":52,"lon":1e400}}',
    ) as unknown;
    expect(checked('events', doc)).toEqual([{ type: 'invalidField', field: 'geoReference.lon', message: expect.stringMatching(FINITE) }]);
  });
});

describe('latitudes and longitudes are in range', () => {
  const lat = (v: number) => `must be a latitude in degrees, from -90 to 90; got ${v}`;
  const lon = (v: number) => `must be a longitude in degrees, from -180 to 180; got ${v}`;

  it('the bounds themselves are valid', () => {
    for (const [a, o] of [
      [90, 180],
      [-90, -180],
      [0, 0],
    ] as const)
      expect(validateEntity('locations', { geoReference: point(a, o) })).toEqual([]);
  });

  it('a point outside is refused at the member', () => {
    expect(validateEntity('locations', { geoReference: point(90.5, 5) })).toEqual([
      { type: 'invalidField', field: 'geoReference.lat', message: lat(90.5) },
    ]);
    expect(validateEntity('locations', { geoReference: point(-91, -180.25) })).toEqual([
      { type: 'invalidField', field: 'geoReference.lat', message: lat(-91) },
      { type: 'invalidField', field: 'geoReference.lon', message: lon(-180.25) },
    ]);
  });

  it('in the points of a latLonArrayGeoReference', () => {
    const geoReference = {
      type: 'latLonArrayGeoReference',
      points: [
        { lat: 1, lon: 2 },
        { lat: 3, lon: 181 },
      ],
    };
    expect(validateEntity('routes', { geoReference })).toEqual([
      { type: 'invalidField', field: 'geoReference.points[1].lon', message: lon(181) },
    ]);
  });

  it('in GeoJSON positions ([longitude, latitude, altitude?])', () => {
    const feature = (geometry: unknown) => ({ geoReference: { type: 'Feature', geometry } });
    expect(validateEntity('routes', feature({ type: 'Point', coordinates: [179, -89, 12000] }))).toEqual([]);
    expect(validateEntity('routes', feature({ type: 'Point', coordinates: [200, 10] }))).toEqual([
      { type: 'invalidField', field: 'geoReference.geometry.coordinates[0]', message: lon(200) },
    ]);
    expect(
      validateEntity(
        'routes',
        feature({
          type: 'LineString',
          coordinates: [
            [5, 52],
            [6, 95],
          ],
        }),
      ),
    ).toEqual([{ type: 'invalidField', field: 'geoReference.geometry.coordinates[1][1]', message: lat(95) }]);
    expect(
      validateEntity(
        'routes',
        feature({
          type: 'MultiPolygon',
          coordinates: [
            [
              [
                [5, 52],
                [-181, 0],
                [5, 52],
              ],
            ],
          ],
        }),
      ),
    ).toEqual([{ type: 'invalidField', field: 'geoReference.geometry.coordinates[0][0][1][0]', message: lon(-181) }]);
  });

  it('in the entity of an updateEvent, in a merge patch and in a bulk item', () => {
    expect(
      validateEntity('events', { eventType: 'updateEvent', entity: { entityType: 'location', id: UUID, geoReference: point(91, 0) } }),
    ).toEqual([{ type: 'invalidField', field: 'entity.geoReference.lat', message: lat(91) }]);
    expect(validatePatch('locations', { geoReference: { lon: -200 } })).toEqual([
      { type: 'invalidField', field: 'geoReference.lon', message: lon(-200) },
    ]);
    expect(checked('events', { eventType: 'locationUpdateEvent', geoReference: point(-90.001, 0) })).toEqual([
      { type: 'invalidField', field: 'geoReference.lat', message: lat(-90.001) },
    ]);
  });
});
