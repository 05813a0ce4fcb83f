import { describe, expect, it } from 'vitest';
import { validateEntity, validatePatch } from '../src/index.js';

const UUID = '50824123-0924-4563-ac1e-ca0e37487823';
const FUELS =
  "'petrol', 'diesel', 'electricity', 'hydrogen', 'lng', 'bioLng', 'cng', 'bioCng', 'adBlue', 'ethanol', 'hvo', 'fame', 'other'";
const STATUS = "'draft', 'requested', 'rejected', 'confirmed', 'inTransit', 'completed', 'closed', 'cancelled', 'accepted', 'modified'";

describe('validatePatch', () => {
  it('nothing is required', () => {
    expect(validatePatch('trips', {})).toEqual([]);
    expect(validatePatch('locations', { name: 'x' })).toEqual([]); // geoReference is required on a location
    expect(validatePatch('consignments', { status: 'completed' })).toEqual([]);
    expect(validatePatch('constraints', { enforceability: 'preference' })).toEqual([]); // value is required on a constraint
  });

  it('null removes a member, at any depth through objects', () => {
    expect(validatePatch('vehicles', { licensePlate: null, fuel: null, length: null, externalAttributes: { a: null } })).toEqual([]);
    expect(validatePatch('vehicles', { length: { unit: null } })).toEqual([]);
    expect(validatePatch('trips', { vehicle: null, actions: null, status: null, transportMode: null })).toEqual([]);
    expect(validatePatch('trips', { vehicle: { entity: { licensePlate: null } } })).toEqual([]);
  });

  it('identity members cannot be removed', () => {
    expect(validatePatch('trips', { id: null })).toEqual([{ type: 'invalidField', field: 'id', message: 'must be a string, got null' }]);
    expect(validatePatch('trips', { entityType: null })).toEqual([
      { type: 'invalidField', field: 'entityType', message: "must be 'trip', got null" },
    ]);
    expect(validatePatch('actions', { actionType: null })[0]).toMatchObject({ type: 'invalidField', field: 'actionType' });
  });

  it('array items are whole values (validated as usual, nulls are not removals there)', () => {
    expect(validatePatch('trips', { actions: [null] })).toEqual([
      { type: 'invalidField', field: 'actions[0]', message: 'must be a JSON object, got null' },
    ]);
    expect(validatePatch('trips', { actions: [{ associationType: 'inline', entity: { remark: 'x' } }] })).toEqual([
      {
        type: 'missingField',
        field: 'actions[0].entity.actionType',
        message: expect.stringContaining("missing required member 'actionType' of action") as string,
      },
    ]);
  });

  it('unknown members rejected with suggestions; types, enums and formats checked', () => {
    expect(validatePatch('vehicles', { licencePlate: 'AB' })).toEqual([
      { type: 'invalidField', field: 'licencePlate', message: "unknown member of vehicle; did you mean 'licensePlate'?" },
    ]);
    expect(validatePatch('vehicles', { licencePlate: null })).toEqual([
      { type: 'invalidField', field: 'licencePlate', message: "unknown member of vehicle; did you mean 'licensePlate'?" },
    ]);
    expect(validatePatch('consignments', { status: 'finished' })).toEqual([
      { type: 'invalidField', field: 'status', message: `must be one of: ${STATUS}; got "finished"` },
    ]);
    expect(validatePatch('trips', { transportMode: 'car' })).toEqual([
      {
        type: 'invalidField',
        field: 'transportMode',
        message: "must be one of: 'maritime', 'road', 'rail', 'air', 'inlandWaterway'; got \"car\"",
      },
    ]);
    expect(validatePatch('trips', { vehicle: { entity: { fuel: 'Diesel' } } })).toEqual([
      { type: 'invalidField', field: 'vehicle.entity.fuel', message: `must be one of: ${FUELS}; got "Diesel"` },
    ]);
    expect(validatePatch('trips', { name: 5 })).toEqual([
      { type: 'invalidField', field: 'name', message: 'must be a string or null, got number' },
    ]);
    expect(validatePatch('trips', { creationDate: 'yesterday' })[0]).toMatchObject({ type: 'invalidField', field: 'creationDate' });
    expect(validatePatch('trips', { entityType: 'vehicle' })).toEqual([
      {
        type: 'invalidField',
        field: 'entityType',
        message: "entityType 'vehicle' does not match the kind of the patched entity: trips expects 'trip'",
      },
    ]);
  });

  it('discriminator present: dispatched to that sub-kind', () => {
    expect(validatePatch('actions', { actionType: 'load', consignment: null })).toEqual([]);
    expect(validatePatch('actions', { actionType: 'stop', consignment: null })).toEqual([
      { type: 'invalidField', field: 'consignment', message: 'unknown member of stop' },
    ]);
    expect(validatePatch('goods', { type: 'items', quantity: 3 })).toEqual([]);
    expect(validatePatch('events', { eventType: 'weighEvent', lifecycle: 'nope' })[0]).toMatchObject({ field: 'lifecycle' });
  });

  it('discriminator absent: the patch must fit at least one sub-kind', () => {
    expect(validatePatch('actions', { from: null, remark: 'x' })).toEqual([]); // only move has `from`
    expect(validatePatch('actions', { lifecycle: 'realized' })).toEqual([]);
    expect(validatePatch('goods', { containedGoods: null })).toEqual([]); // transportEquipment only
    expect(validatePatch('actors', { firstName: 'Ann' })).toEqual([]); // person
    expect(validatePatch('actions', { remark: 3 })).toEqual([
      { type: 'invalidField', field: 'remark', message: 'must be a string or null, got number' },
    ]);
    expect(validatePatch('goods', { licencePlate: 'x' })).toEqual([
      { type: 'invalidField', field: 'licencePlate', message: 'unknown member of items' },
    ]);
  });

  it('non-object patches', () => {
    expect(validatePatch('trips', [])).toEqual([
      { type: 'invalidField', field: '$', message: 'a merge patch must be one JSON object (a trip), got an array' },
    ]);
    expect(validatePatch('trips', null)[0]).toMatchObject({ field: '$' });
    expect(validatePatch('trips', undefined)).toEqual([{ type: 'invalidJson', message: 'no JSON document' }]);
    expect(validatePatch('nope' as 'trips', {})[0]).toMatchObject({ field: '$' });
  });
});

describe('updateEvent: the entity is a patch of the entity it names', () => {
  const upd = (entity: unknown) => ({ eventType: 'updateEvent', lifecycle: 'actual', entity });

  it('only changed data + id + entityType', () => {
    expect(validateEntity('events', upd({ entityType: 'consignment', id: UUID, status: 'completed' }))).toEqual([]);
    expect(validateEntity('events', upd({ entityType: 'location', id: UUID, name: 'Dock 4' }))).toEqual([]); // no geoReference
    expect(validateEntity('events', upd({ entityType: 'vehicle', id: UUID, licensePlate: null, fuel: null }))).toEqual([]);
    expect(validateEntity('events', upd({ entityType: 'load', id: UUID, lifecycle: 'realized' }))).toEqual([]);
    expect(validateEntity('events', upd({ entityType: 'goods', id: UUID, quantity: 2 }))).toEqual([]);
    expect(validateEntity('events', upd({ entityType: 'weigh', id: 'urn:x:1', consignment: null }))).toEqual([]);
    expect(
      validateEntity('events', {
        entityType: 'event',
        ...upd({ entityType: 'trip', id: UUID, vehicle: { entity: { licensePlate: 'X' } } }),
      }),
    ).toEqual([]);
  });

  it('one precise error per bad member', () => {
    expect(validateEntity('events', upd({ entityType: 'consignment', id: UUID, status: 'finished' }))).toEqual([
      { type: 'invalidField', field: 'entity.status', message: `must be one of: ${STATUS}; got "finished"` },
    ]);
    expect(validateEntity('events', upd({ entityType: 'vehicle', id: UUID, licencePlate: 'AB' }))).toEqual([
      { type: 'invalidField', field: 'entity.licencePlate', message: "unknown member of vehicle; did you mean 'licensePlate'?" },
    ]);
    expect(validateEntity('events', upd({ entityType: 'trip', id: UUID, vehicle: { entity: { fuel: 'Diesel' } } }))).toEqual([
      { type: 'invalidField', field: 'entity.vehicle.entity.fuel', message: `must be one of: ${FUELS}; got "Diesel"` },
    ]);
  });

  it('the target must be named: id and entityType required, not removable', () => {
    expect(validateEntity('events', upd({ entityType: 'consignment', status: 'completed' }))).toEqual([
      { type: 'missingField', field: 'entity.id', message: "missing required member 'id' of entity" },
    ]);
    expect(validateEntity('events', upd({ id: UUID, status: 'completed' }))).toEqual([
      expect.objectContaining({ type: 'missingField', field: 'entity.entityType' }),
    ]);
    expect(validateEntity('events', upd({ entityType: 'consignment', id: null }))).toEqual([
      { type: 'invalidField', field: 'entity.id', message: 'must be a string, got null' },
    ]);
    expect(validateEntity('events', upd({ entityType: 'truck', id: UUID }))[0]).toMatchObject({
      type: 'invalidField',
      field: 'entity.entityType',
    });
    expect(validateEntity('events', upd(null))[0]).toMatchObject({ type: 'invalidField', field: 'entity' });
    expect(validateEntity('events', { eventType: 'updateEvent' })).toEqual([
      { type: 'missingField', field: 'entity', message: "missing required member 'entity' of updateEvent" },
    ]);
  });
});
