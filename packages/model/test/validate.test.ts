import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ACTION_TYPES, EVENT_TYPES, KINDS, MAX_ERRORS, detectKind, isKindSegment, validateEntity, type Trip } from '../src/index.js';

const typicalTrip = JSON.parse(readFileSync(new URL('./fixtures/typical-trip.json', import.meta.url), 'utf8')) as Trip;
const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;

const UUID = '50824123-0924-4563-ac1e-ca0e37487823';
const ref = (entityType: string) => ({ associationType: 'reference', uuid: UUID, entityType });
const point = { type: 'latLonPointGeoReference', lat: 52.1, lon: 5.4 };
const FUELS =
  "'petrol', 'diesel', 'electricity', 'hydrogen', 'lng', 'bioLng', 'cng', 'bioCng', 'adBlue', 'ethanol', 'hvo', 'fame', 'other'";

describe('kinds', () => {
  it('has 13 kinds with the model schemas', () => {
    expect(KINDS.map((k) => k.segment)).toEqual([
      'vehicles',
      'routes',
      'sensors',
      'locations',
      'actors',
      'consignments',
      'trips',
      'events',
      'actions',
      'goods',
      'documents',
      'transportOrders',
      'constraints',
    ]);
    expect(KINDS.find((k) => k.segment === 'events')).toEqual({
      segment: 'events',
      entityType: 'event',
      label: 'Event',
      discriminator: 'eventType',
      schema: 'event',
    });
    expect(KINDS.find((k) => k.segment === 'goods')?.schema).toBe('goods');
    expect(isKindSegment('trips')).toBe(true);
    expect(isKindSegment('trip')).toBe(false);
    expect(isKindSegment('__proto__')).toBe(false);
  });

  it('detectKind', () => {
    expect(detectKind({ entityType: 'trip' })).toBe('trips');
    expect(detectKind({ entityType: 'transportOrder' })).toBe('transportOrders');
    expect(detectKind({ eventType: 'weighEvent' })).toBe('events');
    expect(detectKind({ actionType: 'weigh' })).toBe('actions');
    expect(detectKind({ type: 'transportEquipment' })).toBe('goods');
    expect(detectKind({ type: 'person' })).toBe('actors');
    expect(detectKind({ value: { type: 'andConstraint', and: [] } })).toBe('constraints');
    expect(detectKind({ content: { contentType: 'link', uri: 'https://x' } })).toBe('documents');
    expect(detectKind({ name: 'x' })).toBeUndefined();
    expect(detectKind([])).toBeUndefined();
    expect(detectKind(null)).toBeUndefined();
  });
});

describe('valid documents', () => {
  it('a typical trip (own fixture) is valid', () => {
    expect(validateEntity('trips', typicalTrip)).toEqual([]);
  });

  it('externalAttributes accept any JSON value, including __proto__ keys', () => {
    const doc = JSON.parse(
      '{"externalAttributes":{"s":"x","n":1,"b":true,"z":null,"a":[1,{"x":2}],"o":{"deep":{"x":[]}},"__proto__":{"polluted":1},"constructor":"c"}}',
    ) as unknown;
    expect(validateEntity('trips', doc)).toEqual([]);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('deprecated fields and values are accepted', () => {
    expect(
      validateEntity('vehicles', {
        fuel: 'diesel',
        otherFuelType: 'x',
        averageFuelConsumption: { value: 30, unit: 'l/100km' },
        emissionStandard: 'euro5',
      }),
    ).toEqual([]);
    expect(validateEntity('routes', { geoReference: point, geoReferences: point })).toEqual([]);
    expect(validateEntity('trips', { status: 'accepted' })).toEqual([]);
    expect(validateEntity('consignments', { status: 'modified' })).toEqual([]);
    expect(validateEntity('constraints', { value: { type: 'routeConstraint', route: point } })).toEqual([]);
    expect(validateEntity('constraints', { value: { type: 'startDateTimeConstraint', startDateTime: '2024-01-01T00:00:00Z' } })).toEqual(
      [],
    );
    expect(validateEntity('constraints', { value: { type: 'endDateTimeConstraint', endDateTime: '2024-01-01T00:00:00Z' } })).toEqual([]);
  });

  it('actor plain, person and company', () => {
    expect(validateEntity('actors', { name: 'plain' })).toEqual([]);
    expect(
      validateEntity('actors', {
        entityType: 'actor',
        type: 'person',
        firstName: 'A',
        lastName: 'B',
        languages: ['nl'],
        contactDetails: [{ type: 'email', value: 'a@b.c' }],
      }),
    ).toEqual([]);
    expect(
      validateEntity('actors', {
        type: 'company',
        coc: '1',
        vat: 'NL1',
        actors: [{ associationType: 'inline', entity: { type: 'person', firstName: 'C' } }],
      }),
    ).toEqual([]);
    // person members on a plain actor, company members on a person
    expect(validateEntity('actors', { firstName: 'A' })).toEqual([
      { type: 'invalidField', field: 'firstName', message: 'unknown member of actor' },
    ]);
    expect(validateEntity('actors', { type: 'person', coc: '1' })).toEqual([
      { type: 'invalidField', field: 'coc', message: 'unknown member of actor (person)' },
    ]);
  });

  it('a consignment (the model has no example) with goods, documents and related consignments', () => {
    expect(
      validateEntity('consignments', {
        entityType: 'consignment',
        status: 'confirmed',
        type: 'frozen',
        remark: 'r',
        goods: [{ associationType: 'inline', entity: { type: 'items', quantity: 2 } }, ref('goods')],
        transportOrder: ref('transportOrder'),
        documents: [{ associationType: 'inline', entity: { content: { contentType: 'link', uri: 'https://example.org/cmr.pdf' } } }],
        actors: [{ associationType: 'reference', uuid: UUID, entityType: 'actor', roles: ['shipper'] }],
        relatedConsignments: [{ associationType: 'inline', relation: 'split', entity: { status: 'draft' } }],
      }),
    ).toEqual([]);
  });

  it('goods: items and transportEquipment', () => {
    expect(validateEntity('goods', { type: 'items', entityType: 'goods', quantity: 3, grossWeight: { value: 10, unit: 'kg' } })).toEqual(
      [],
    );
    expect(
      validateEntity('goods', {
        type: 'transportEquipment',
        equipmentType: 'trailer',
        licensePlate: 'X',
        containedGoods: [{ associationType: 'inline', entity: { type: 'items' } }],
      }),
    ).toEqual([]);
  });

  const minimalEvents: Record<string, Record<string, unknown>> = {
    associationCreatedEvent: {
      entity1: ref('trip'),
      entity2: { associationType: 'inline', entity: { entityType: 'vehicle', licensePlate: 'X' } },
    },
    associationRemovedEvent: { entity1: ref('trip'), entity2: ref('vehicle') },
    emissionEvent: { amount: { value: 1.5, unit: 'kg' } },
    fuelConsumedEvent: { amount: { value: 20, unit: 'l' }, fuel: 'diesel' },
    locationUpdateEvent: { geoReference: point, references: [ref('trip')] },
    sensorUpdateEvent: { value: { value: -20, unit: 'C' }, sensor: ref('sensor') },
    startEngineEvent: { geoReference: point },
    startMovingEvent: { geoReference: point },
    startWaitingEvent: { geoReference: point },
    stopEngineEvent: { geoReference: point },
    stopMovingEvent: { geoReference: point },
    updateEvent: { entity: { entityType: 'trip', id: UUID, status: 'completed' } },
    weighEvent: { weighingResult: { weighingType: 'tare', weight: { value: 7000, unit: 'kg' } } },
  };
  it('covers all 13 eventTypes', () => {
    expect(Object.keys(minimalEvents).sort()).toEqual([...EVENT_TYPES].sort());
  });
  for (const [eventType, body] of Object.entries(minimalEvents)) {
    it(`event ${eventType}: minimal document is valid, without its required members it is not`, () => {
      expect(validateEntity('events', { eventType, lifecycle: 'actual', ...body })).toEqual([]);
      const missing = validateEntity('events', { eventType });
      expect(missing.length).toBeGreaterThan(0);
      expect(missing.every((e) => e.type === 'missingField')).toBe(true);
    });
  }

  it('updateEvent entity may be any kind incl. the weigh action (missing from the model mapping)', () => {
    expect(
      validateEntity('events', {
        eventType: 'updateEvent',
        entity: { entityType: 'weigh', id: UUID, lifecycle: 'realized', vehicle: ref('vehicle') },
      }),
    ).toEqual([]);
    expect(
      validateEntity('events', { eventType: 'updateEvent', entity: { entityType: 'load', id: UUID, actionType: 'load', remark: 'x' } }),
    ).toEqual([]);
    expect(validateEntity('events', { eventType: 'updateEvent', entity: { entityType: 'goods', id: UUID, type: 'items' } })).toEqual([]);
    expect(
      validateEntity('events', { eventType: 'updateEvent', entity: { entityType: 'actor', id: UUID, type: 'company', coc: '1' } }),
    ).toEqual([]);
    expect(validateEntity('events', { eventType: 'updateEvent', entity: { entityType: 'load', id: UUID, actionType: 'unload' } })).toEqual([
      { type: 'invalidField', field: 'entity.actionType', message: 'must be \'load\', got "unload"' },
    ]);
  });

  const minimalActions: Record<string, Record<string, unknown>> = {
    load: { consignment: ref('consignment') },
    unload: { transportEquipment: ref('transportEquipment') },
    stop: { location: ref('location'), actions: [{ associationType: 'inline', entity: { actionType: 'wait', reason: 'dock busy' } }] },
    move: { from: ref('location'), to: ref('location'), distance: { value: 1, unit: 'km' }, transportMode: 'road' },
    handOver: { from: ref('actor'), to: ref('actor') },
    attachTransportEquipment: {
      vehicle: ref('vehicle'),
      transportEquipment: { associationType: 'inline', entity: { type: 'transportEquipment' } },
    },
    detachTransportEquipment: { vehicle: ref('vehicle') },
    refuel: { vehicle: ref('vehicle') },
    break: { duration: 'PT45M', timeFormat: 'duration' },
    wait: { reason: 'x' },
    genericAction: { description: 'anything' },
    weigh: { vehicle: ref('vehicle'), consignment: ref('consignment') },
  };
  it('covers all 12 actionTypes', () => {
    expect(Object.keys(minimalActions).sort()).toEqual([...ACTION_TYPES].sort());
  });
  for (const [actionType, body] of Object.entries(minimalActions)) {
    it(`action ${actionType}: minimal document is valid, with entityType 'action' or '${actionType}' too`, () => {
      expect(validateEntity('actions', { actionType, sequenceNr: 1, lifecycle: 'planned', ...body })).toEqual([]);
      expect(validateEntity('actions', { actionType, entityType: 'action', ...body })).toEqual([]);
      expect(validateEntity('actions', { actionType, entityType: actionType, ...body })).toEqual([]);
    });
  }

  it('recurrence format', () => {
    const ok = [
      'FREQ=WEEKLY;BYDAY=MO,TH',
      'RRULE:FREQ=DAILY;COUNT=10',
      'FREQ=MONTHLY;BYMONTHDAY=-1;UNTIL=20251231T235959Z',
      'freq=yearly;bymonth=1,7',
    ];
    for (const r of ok)
      expect(validateEntity('actions', { actionType: 'stop', timeFormat: 'recurringDateTime', recurrence: r }), r).toEqual([]);
    const bad = [
      'WEEKLY',
      'BYDAY=MO',
      'FREQ=WEEKLY;FREQ=DAILY',
      'FREQ=DAILY;COUNT=2;UNTIL=20250101',
      'FREQ=DAILY;BYMONTH=13',
      'FREQ=HOURLY;FOO=1',
      '',
    ];
    for (const r of bad) {
      expect(validateEntity('actions', { actionType: 'stop', recurrence: r }), r).toEqual([
        { type: 'invalidField', field: 'recurrence', message: 'must be an RFC 5545 recurrence rule (e.g. FREQ=WEEKLY;BYDAY=MO,TH)' },
      ]);
    }
  });
});

describe('precise errors', () => {
  it('the Diesel trap gives exactly one error at the vehicle fuel', () => {
    const trip = { vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', fuel: 'Diesel' } } };
    expect(validateEntity('trips', trip)).toEqual([
      { type: 'invalidField', field: 'vehicle.entity.fuel', message: `must be one of: ${FUELS}; got "Diesel"` },
    ]);
  });

  it('unknown member with suggestion', () => {
    expect(validateEntity('vehicles', { licencePlate: 'AB-12-CD' })).toEqual([
      { type: 'invalidField', field: 'licencePlate', message: "unknown member of vehicle; did you mean 'licensePlate'?" },
    ]);
    expect(validateEntity('vehicles', { colour: 'red' })).toEqual([
      { type: 'invalidField', field: 'colour', message: 'unknown member of vehicle' },
    ]);
  });

  it('entityType disagreeing with the path', () => {
    expect(validateEntity('trips', { entityType: 'vehicle', licensePlate: 'X' })).toEqual([
      {
        type: 'invalidField',
        field: 'entityType',
        message: "entityType 'vehicle' does not match the kind of this path: trips expects 'trip'",
      },
    ]);
    expect(validateEntity('actions', { entityType: 'trip', actionType: 'load' })).toEqual([
      {
        type: 'invalidField',
        field: 'entityType',
        message: "entityType 'trip' does not match the kind of this path: actions expects 'action' or the actionType",
      },
    ]);
    expect(validateEntity('actions', { entityType: 'unload', actionType: 'load' })).toEqual([
      { type: 'invalidField', field: 'entityType', message: "must be one of: 'action', 'load'; got \"unload\"" },
    ]);
    expect(validateEntity('events', { entityType: 'locationUpdate', eventType: 'locationUpdateEvent', geoReference: point })).toEqual([]);
    expect(validateEntity('goods', { entityType: 'goods', type: 'items' })).toEqual([]);
    expect(validateEntity('trips', { entityType: 5 })).toEqual([
      { type: 'invalidField', field: 'entityType', message: "must be 'trip', got 5" },
    ]);
  });

  it('wrong and missing discriminators name the allowed values', () => {
    expect(validateEntity('goods', { type: 'pallet' })).toEqual([
      { type: 'invalidField', field: 'type', message: "must be one of: 'items', 'transportEquipment'; got \"pallet\"" },
    ]);
    expect(validateEntity('goods', {})).toEqual([
      { type: 'missingField', field: 'type', message: "missing required member 'type' of goods; one of: 'items', 'transportEquipment'" },
    ]);
    expect(validateEntity('actors', { type: 'robot' })).toEqual([
      { type: 'invalidField', field: 'type', message: "must be one of: 'person', 'company'; got \"robot\"" },
    ]);
    const errs = validateEntity('trips', { vehicle: { associationType: 'linked', uuid: UUID } });
    expect(errs).toEqual([
      {
        type: 'invalidField',
        field: 'vehicle.associationType',
        message: "must be one of: 'inline', 'reference', 'attributeRestriction'; got \"linked\"",
      },
    ]);
  });

  it('deep nesting inside constraints (and / or / not)', () => {
    const deep = {
      value: {
        type: 'andConstraint',
        and: [
          { type: 'orConstraint', or: [{ type: 'notConstraint', not: { type: 'speedConstraint', constraintType: 'fastest' } }] },
          { type: 'timeWindowConstraint', startTime: 'tomorrow' },
          { type: 'notConstraint', not: { type: 'andConstraint', and: [{ type: 'weightConstraint' }] } },
        ],
      },
    };
    expect(validateEntity('constraints', deep)).toEqual([
      {
        type: 'invalidField',
        field: 'value.and[0].or[0].not.constraintType',
        message: "must be one of: 'maximum', 'minimum', 'range'; got \"fastest\"",
      },
      {
        type: 'invalidField',
        field: 'value.and[1].startTime',
        message: 'must be a date-time (RFC 3339 with time zone, e.g. 2021-06-23T13:45:00Z)',
      },
      {
        type: 'missingField',
        field: 'value.and[2].not.and[0].constraintType',
        message: "missing required member 'constraintType' of weightConstraint",
      },
    ]);
    // 200 levels of not: valid, and an error at the bottom is found
    let v: Record<string, unknown> = { type: 'genericConstraint', description: 'x' };
    for (let i = 0; i < 200; i++) v = { type: 'notConstraint', not: v };
    expect(validateEntity('constraints', { value: v })).toEqual([]);
  });

  it('__proto__ and constructor members are unknown members and pollute nothing', () => {
    const doc = JSON.parse(
      '{"__proto__":{"polluted":1},"constructor":{"prototype":{"polluted":2}},"vehicle":{"associationType":"inline","entity":{"__proto__":{"polluted":3},"prototype":1}}}',
    ) as unknown;
    expect(validateEntity('trips', doc)).toEqual([
      { type: 'invalidField', field: '__proto__', message: 'unknown member of trip' },
      { type: 'invalidField', field: 'constructor', message: 'unknown member of trip' },
      { type: 'invalidField', field: 'vehicle.entity.__proto__', message: 'unknown member of vehicle' },
      { type: 'invalidField', field: 'vehicle.entity.prototype', message: 'unknown member of vehicle' },
    ]);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((Object.prototype as Record<string, unknown>).polluted).toBeUndefined();
    expect(validateEntity('__proto__' as never, {})).toEqual([
      { type: 'invalidField', field: '$', message: "unknown entity kind '__proto__'" },
    ]);
  });

  it('non-object bodies', () => {
    expect(validateEntity('trips', [])).toEqual([
      { type: 'invalidField', field: '$', message: 'the body must be one JSON object (a trip), got an array' },
    ]);
    expect(validateEntity('trips', 'trip')).toEqual([
      { type: 'invalidField', field: '$', message: 'the body must be one JSON object (a trip), got a string' },
    ]);
    expect(validateEntity('trips', null)).toEqual([
      { type: 'invalidField', field: '$', message: 'the body must be one JSON object (a trip), got null' },
    ]);
    expect(validateEntity('trips', undefined)).toEqual([{ type: 'invalidJson', message: 'no JSON document' }]);
  });

  it('never throws on cyclic or absurdly deep input', () => {
    const cyc: Record<string, unknown> = { type: 'notConstraint' };
    cyc.not = cyc;
    expect(validateEntity('constraints', { value: cyc })).toEqual([
      { type: 'invalidField', field: '$', message: 'document is nested too deeply to be validated' },
    ]);
    let v: Record<string, unknown> = { type: 'genericConstraint', description: 'x' };
    for (let i = 0; i < 100000; i++) v = { type: 'notConstraint', not: v };
    expect(validateEntity('constraints', { value: v })).toHaveLength(1);
  });

  it('caps the number of items', () => {
    const doc: Record<string, unknown> = {};
    for (let i = 0; i < 250; i++) doc[`x${i}`] = i;
    const errs = validateEntity('trips', doc);
    expect(errs).toHaveLength(MAX_ERRORS);
    expect(errs[0]).toEqual({ type: 'invalidField', field: 'x0', message: 'unknown member of trip' });
    expect(errs[MAX_ERRORS - 1]).toEqual({
      type: 'invalidField',
      field: '$',
      message: `151 more problems not listed (at most ${MAX_ERRORS} items are reported)`,
    });
  });

  it('odd member names are bracketed', () => {
    expect(validateEntity('trips', { 'odd.name': 1, vehicle: { associationType: 'inline', entity: { 'a b': 1, $x: 2 } } })).toEqual([
      { type: 'invalidField', field: '["odd.name"]', message: 'unknown member of trip' },
      { type: 'invalidField', field: 'vehicle.entity["a b"]', message: 'unknown member of vehicle' },
      { type: 'invalidField', field: 'vehicle.entity["$x"]', message: 'unknown member of vehicle' },
    ]);
  });

  // A dozen hand-written invalid documents with their exact error arrays.
  const cases: [string, Parameters<typeof validateEntity>[0], unknown, unknown[]][] = [
    [
      'route without geoReference',
      'routes',
      { name: 'r' },
      [{ type: 'missingField', field: 'geoReference', message: "missing required member 'geoReference' of route" }],
    ],
    [
      'location lat as string',
      'locations',
      { geoReference: { type: 'latLonPointGeoReference', lat: '52.1', lon: 5 } },
      [{ type: 'invalidField', field: 'geoReference.lat', message: 'must be a number, got string' }],
    ],
    [
      'sensor with bad creationDate',
      'sensors',
      { creationDate: '2024-13-01T00:00:00Z' },
      [
        {
          type: 'invalidField',
          field: 'creationDate',
          message: 'must be a date-time (RFC 3339 with time zone, e.g. 2021-06-23T13:45:00Z)',
        },
      ],
    ],
    [
      'reference with bad uuid and unknown entityType',
      'trips',
      { vehicle: { associationType: 'reference', uuid: 'abc', entityType: 'car' } },
      [
        { type: 'invalidField', field: 'vehicle.uuid', message: 'must be a UUID (e.g. 50824123-0924-4563-ac1e-ca0e37487823)' },
        {
          type: 'invalidField',
          field: 'vehicle.entityType',
          message: expect.stringMatching(/^must be one of: 'actor', 'constraint', .*; got "car"$/),
        },
      ],
    ],
    [
      'consignment goods item missing associationType',
      'consignments',
      { goods: [{ entity: { type: 'items' } }] },
      [
        {
          type: 'missingField',
          field: 'goods[0].associationType',
          message:
            "missing required member 'associationType' of consignment.goods[]; one of: 'inline', 'reference', 'attributeRestriction'",
        },
      ],
    ],
    [
      'document without content',
      'documents',
      { name: 'pod.jpg' },
      [{ type: 'missingField', field: 'content', message: "missing required member 'content' of document" }],
    ],
    [
      'document with unknown contentType',
      'documents',
      { content: { contentType: 'ftp' } },
      [{ type: 'invalidField', field: 'content.contentType', message: "must be one of: 'link', 'data'; got \"ftp\"" }],
    ],
    [
      'transport order with consignments not an array',
      'transportOrders',
      { consignments: {} },
      [{ type: 'invalidField', field: 'consignments', message: 'must be an array, got object' }],
    ],
    [
      'trip actions item with bad sequenceNr',
      'trips',
      { actions: [{ associationType: 'inline', entity: { actionType: 'stop', sequenceNr: 1.5 } }] },
      [{ type: 'invalidField', field: 'actions[0].entity.sequenceNr', message: 'must be an integer, got number' }],
    ],
    [
      'event with unknown lifecycle and missing geoReference',
      'events',
      { eventType: 'startMovingEvent', lifecycle: 'future' },
      [
        {
          type: 'invalidField',
          field: 'lifecycle',
          message: "must be one of: 'requested', 'planned', 'projected', 'actual', 'realized'; got \"future\"",
        },
        { type: 'missingField', field: 'geoReference', message: "missing required member 'geoReference' of startMovingEvent" },
      ],
    ],
    [
      'constraint value missing',
      'constraints',
      { name: 'c' },
      [{ type: 'missingField', field: 'value', message: "missing required member 'value' of constraint" }],
    ],
    [
      'vehicle fuels item with extra member and wrong type',
      'vehicles',
      { fuels: [{ fuelType: 'diesel', averageConsumtion: { value: 1, unit: 'l' } }, { fuelType: 3 }] },
      [
        {
          type: 'invalidField',
          field: 'fuels[0].averageConsumtion',
          message: "unknown member of fuel; did you mean 'averageConsumption'?",
        },
        {
          type: 'invalidField',
          field: 'fuels[1].fuelType',
          message:
            "must be one of: 'petrol', 'diesel', 'electricity', 'hydrogen', 'lng', 'bioLng', 'cng', 'bioCng', 'adBlue', 'ethanol', 'hvo', 'fame'; got 3",
        },
      ],
    ],
    [
      'actor contact detail with unknown type',
      'actors',
      { contactDetails: [{ type: 'fax', value: '1' }] },
      [
        {
          type: 'invalidField',
          field: 'contactDetails[0].type',
          message: expect.stringMatching(/^must be one of: 'phone', 'mobilePhone', 'email', .*; got "fax"$/),
        },
      ],
    ],
    [
      'typical trip with three problems',
      'trips',
      (() => {
        const t = clone(typicalTrip) as unknown as {
          actions: { entity: Record<string, unknown> }[];
          status: string;
          externalIdentifiers: unknown[];
        };
        t.status = 'done';
        t.externalIdentifiers = [{ id: 'x' }];
        (t.actions[0]?.entity.location as { entity: { geoReference: Record<string, unknown> } }).entity.geoReference.lat = 'north';
        return t;
      })(),
      [
        {
          type: 'invalidField',
          field: 'status',
          message:
            "must be one of: 'draft', 'requested', 'rejected', 'confirmed', 'inTransit', 'completed', 'closed', 'cancelled', 'accepted', 'modified'; got \"done\"",
        },
        { type: 'missingField', field: 'externalIdentifiers[0].scheme', message: "missing required member 'scheme' of externalIdentifier" },
        { type: 'invalidField', field: 'actions[0].entity.location.entity.geoReference.lat', message: 'must be a number, got string' },
      ],
    ],
  ];
  for (const [name, kind, doc, expected] of cases) {
    it(`invalid: ${name}`, () => {
      expect(validateEntity(kind, doc)).toEqual(expected);
    });
  }
});
