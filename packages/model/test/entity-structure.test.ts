import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  associationTable,
  associationTarget,
  holdingMember,
  inlineEntities,
  kindOfEntityType,
  KINDS,
  validateEntity,
  type AssociationRow,
  type KindSegment,
} from '../src/index.js';
import { MODEL } from '../src/model-data.js';

interface Example {
  name: string;
  kind: KindSegment | null;
  valid: boolean;
  document: unknown;
}
const examples = JSON.parse(readFileSync(new URL('./fixtures/model-examples.json', import.meta.url), 'utf8')) as Example[];
const typicalTrip = JSON.parse(readFileSync(new URL('./fixtures/typical-trip.json', import.meta.url), 'utf8')) as Record<string, unknown>;

const UUID = '50824123-0924-4563-ac1e-ca0e37487823';
const UUID2 = 'b9bb914d-845e-46f2-91ff-31fa4bac2fbe';
const point = { type: 'latLonPointGeoReference', lat: 52.1, lon: 5.4 };
const ref = (entityType: string) => ({ associationType: 'reference', uuid: UUID, entityType });
const summary = (kind: KindSegment, doc: unknown) => inlineEntities(kind, doc).map((e) => `${e.kind} ${e.path.join('.')}`);

/** Oracle independent of the schemas: `entity` of every inline association, items of every contextEvents. */
function oracle(doc: unknown): string[] {
  const out: string[] = [];
  const visit = (v: unknown, path: Array<string | number>, updateEntity: boolean): void => {
    if (Array.isArray(v)) {
      v.forEach((x, i) => visit(x, [...path, i], false));
      return;
    }
    if (v === null || typeof v !== 'object' || updateEntity) return;
    const o = v as Record<string, unknown>;
    for (const [k, c] of Object.entries(o)) {
      if (k === 'entity' && o.associationType === 'inline') out.push([...path, k].join('.'));
      if (k === 'contextEvents' && Array.isArray(c)) c.forEach((_, i) => out.push([...path, k, i].join('.')));
      visit(c, [...path, k], k === 'entity' && o.eventType === 'updateEvent');
    }
  };
  visit(doc, [], false);
  return out;
}

describe('inlineEntities', () => {
  it('typical trip: exact kinds and paths, parents before children, in document order', () => {
    const r = inlineEntities('trips', typicalTrip);
    expect(r.map((e) => [e.kind, e.path])).toEqual([
      ['vehicles', ['vehicle', 'entity']],
      ['actors', ['actors', 0, 'entity']],
      ['actions', ['actions', 0, 'entity']],
      ['locations', ['actions', 0, 'entity', 'location', 'entity']],
      ['actions', ['actions', 0, 'entity', 'actions', 0, 'entity']],
      ['actions', ['actions', 1, 'entity']],
      ['actions', ['actions', 2, 'entity']],
      ['locations', ['actions', 2, 'entity', 'location', 'entity']],
      ['constraints', ['actions', 2, 'entity', 'constraint', 'entity']],
      ['actions', ['actions', 2, 'entity', 'actions', 0, 'entity']],
      ['constraints', ['constraint', 'entity']],
    ]);
    // the same objects as inside the document
    const vehicle = (typicalTrip.vehicle as { entity: unknown }).entity;
    expect(r[0]?.entity).toBe(vehicle);
  });

  it('model examples: the paths of every inline association entity and context event', () => {
    for (const e of examples) {
      if (!e.kind) continue;
      expect(
        inlineEntities(e.kind, e.document).map((x) => x.path.join('.')),
        e.name,
      ).toEqual(oracle(e.document));
    }
    expect(oracle(typicalTrip)).toEqual(inlineEntities('trips', typicalTrip).map((x) => x.path.join('.')));
  });

  it('model examples: exact kinds', () => {
    const byName = (n: string) => examples.find((x) => x.name === n) as Example;
    const s = (n: string) => summary(byName(n).kind as KindSegment, byName(n).document);
    expect(s('stop')).toEqual([
      'actions actions.0.entity',
      'actions actions.1.entity',
      'constraints actions.1.entity.constraint.entity',
      'actions actions.2.entity',
      'constraints actions.2.entity.constraint.entity',
      'actions actions.3.entity',
    ]);
    expect(s('move')).toEqual(['locations from.entity', 'locations to.entity', 'routes route.entity']);
    expect(s('attachTransportEquipment')).toEqual(['vehicles vehicle.entity', 'goods transportEquipment.entity']);
    expect(s('transportOrder')).toEqual(['consignments consignments.0.entity', 'consignments consignments.1.entity']);
    expect(s('locationUpdateEvent')).toEqual(['vehicles vehicle.entity', 'actors actors.0.entity', 'actors actors.1.entity']);
    expect(s('associationCreatedEvent')).toEqual(['vehicles entity2.entity']);
    expect(s('items')).toEqual(['constraints constraint.entity']);
    expect(s('sensor')).toEqual(['actors actors.0.entity']);
    expect(s('trip')).toEqual([]);
  });

  it('contextEvents items are entities (events); an updateEvent entity is a patch, not descended into', () => {
    const doc = {
      entityType: 'trip',
      contextEvents: [
        {
          eventType: 'locationUpdateEvent',
          geoReference: point,
          vehicle: { associationType: 'inline', entity: { id: UUID2, licensePlate: 'AB' } },
        },
        {
          eventType: 'updateEvent',
          entity: { entityType: 'trip', id: UUID, vehicle: { associationType: 'inline', entity: { id: UUID2, licensePlate: 'XY' } } },
        },
      ],
      vehicle: {
        associationType: 'inline',
        entity: { id: UUID2, contextEvents: [{ eventType: 'startEngineEvent', geoReference: point }] },
      },
    };
    expect(validateEntity('trips', doc)).toEqual([]);
    expect(summary('trips', doc)).toEqual([
      'events contextEvents.0',
      'vehicles contextEvents.0.vehicle.entity',
      'events contextEvents.1',
      'vehicles vehicle.entity',
      'events vehicle.entity.contextEvents.0',
    ]);
    const upd = {
      eventType: 'updateEvent',
      entity: { entityType: 'trip', id: UUID, actions: [{ associationType: 'inline', entity: { actionType: 'stop' } }] },
    };
    expect(validateEntity('events', upd)).toEqual([]);
    expect(inlineEntities('events', upd)).toEqual([]);
  });

  it('nested constraints: entities inside constraint values (and/not, routeEntityConstraint)', () => {
    const route = {
      entityType: 'route',
      id: UUID2,
      geoReference: point,
      constraint: {
        associationType: 'inline',
        entity: { value: { type: 'speedConstraint', constraintType: 'maximum', maximum: { value: 80, unit: 'km/h' } } },
      },
    };
    const doc = {
      value: {
        type: 'andConstraint',
        and: [
          { type: 'notConstraint', not: { type: 'routeEntityConstraint', route: { associationType: 'inline', entity: route } } },
          { type: 'routeEntityConstraint', route: ref('route') },
        ],
      },
    };
    expect(validateEntity('constraints', doc)).toEqual([]);
    expect(summary('constraints', doc)).toEqual([
      'routes value.and.0.not.route.entity',
      'constraints value.and.0.not.route.entity.constraint.entity',
    ]);
  });

  it('association entity1/entity2, locationUpdateEvent references, sub-locations, goods', () => {
    const ev = {
      eventType: 'associationCreatedEvent',
      entity1: { associationType: 'inline', entity: { entityType: 'load', id: UUID, actionType: 'load' } },
      entity2: { associationType: 'inline', entity: { entityType: 'goods', type: 'items', id: UUID2 } },
    };
    expect(validateEntity('events', ev)).toEqual([]);
    expect(summary('events', ev)).toEqual(['actions entity1.entity', 'goods entity2.entity']);
    const loc = {
      geoReference: point,
      subLocations: [
        {
          associationType: 'inline',
          entity: { geoReference: point, subLocations: [{ associationType: 'inline', entity: { geoReference: point } }] },
        },
      ],
    };
    expect(validateEntity('locations', loc)).toEqual([]);
    expect(summary('locations', loc)).toEqual(['locations subLocations.0.entity', 'locations subLocations.0.entity.subLocations.0.entity']);
  });

  it('never throws, skips what does not match the schemas', () => {
    for (const d of [
      undefined,
      null,
      1,
      'x',
      [],
      {},
      { actions: 5 },
      { actions: [null, 1, { associationType: 'inline', entity: 3 }] },
      { vehicle: { associationType: 'other', entity: {} } },
    ]) {
      expect(() => inlineEntities('trips', d)).not.toThrow();
    }
    expect(inlineEntities('trips', { actions: [{ associationType: 'inline', entity: { actionType: 'nope' } }] })).toEqual([]);
    expect(inlineEntities('nope' as KindSegment, typicalTrip)).toEqual([]);
  });
});

describe('kindOfEntityType', () => {
  it('maps every value of the reference entityType enum', () => {
    const values = MODEL.schemas.reference?.properties?.entityType?.enum as string[];
    const got = Object.fromEntries(values.map((v) => [v, kindOfEntityType(v)]));
    expect(got).toEqual({
      actor: 'actors',
      constraint: 'constraints',
      location: 'locations',
      sensor: 'sensors',
      trip: 'trips',
      vehicle: 'vehicles',
      transportOrder: 'transportOrders',
      consignment: 'consignments',
      goods: 'goods',
      items: 'goods',
      transportEquipment: 'goods',
      load: 'actions',
      unload: 'actions',
      handOver: 'actions',
      attachTransportEquipment: 'actions',
      detachTransportEquipment: 'actions',
      document: 'documents',
      route: 'routes',
      stop: 'actions',
      move: 'actions',
      genericAction: 'actions',
      associationCreated: 'events',
      associationRemoved: 'events',
      updateEvent: 'events',
      locationUpdate: 'events',
      sensorUpdate: 'events',
      startWaiting: 'events',
      stopWaiting: 'events',
      startMoving: 'events',
      stopMoving: 'events',
      startEngine: 'events',
      stopEngine: 'events',
      weigh: 'actions',
    });
  });

  it('generic values, eventTypes, the other actions, unknown values', () => {
    expect(kindOfEntityType('event')).toBe('events');
    expect(kindOfEntityType('action')).toBe('actions');
    expect(kindOfEntityType('weighEvent')).toBe('events');
    expect(kindOfEntityType('locationUpdateEvent')).toBe('events');
    expect(kindOfEntityType('refuel')).toBe('actions');
    expect(kindOfEntityType('break')).toBe('actions');
    expect(kindOfEntityType('person')).toBeUndefined();
    expect(kindOfEntityType('__proto__')).toBeUndefined();
    expect(kindOfEntityType(5 as unknown as string)).toBeUndefined();
    for (const k of KINDS) expect(kindOfEntityType(k.entityType)).toBe(k.segment);
  });
});

describe('associationTarget', () => {
  it('inline, reference, attributeRestriction', () => {
    expect(associationTarget({ associationType: 'inline', entity: { entityType: 'vehicle', id: UUID } })).toEqual({
      kind: 'vehicles',
      id: UUID,
      inline: true,
    });
    expect(associationTarget({ associationType: 'inline', entity: { actionType: 'stop', id: UUID } })).toEqual({
      kind: 'actions',
      id: UUID,
      inline: true,
    });
    expect(associationTarget({ associationType: 'inline', entity: { eventType: 'weighEvent' } })).toEqual({
      kind: 'events',
      id: undefined,
      inline: true,
    });
    expect(associationTarget({ associationType: 'inline', entity: { type: 'items', id: UUID } })).toEqual({
      kind: 'goods',
      id: UUID,
      inline: true,
    });
    expect(associationTarget({ associationType: 'inline', entity: { geoReference: point } })).toEqual({
      kind: undefined,
      id: undefined,
      inline: true,
    });
    expect(associationTarget(ref('locationUpdate'))).toEqual({ kind: 'events', id: UUID, inline: false });
    expect(associationTarget(ref('items'))).toEqual({ kind: 'goods', id: UUID, inline: false });
    expect(
      associationTarget({ associationType: 'attributeRestriction', entityType: 'trip', restriction: { externalAttributes: { a: 'b' } } }),
    ).toEqual({ kind: 'trips', id: undefined, inline: false });
    expect(associationTarget({ entityType: 'trip' })).toBeUndefined();
    expect(associationTarget(null)).toBeUndefined();
  });
});

describe('holdingMember', () => {
  it('the cases of the brief', () => {
    expect(holdingMember('trips', {}, 'vehicles')).toEqual({ member: 'vehicle', many: false });
    expect(holdingMember('vehicles', {}, 'sensors')).toEqual({ member: 'sensors', many: true });
    expect(holdingMember('trips', {}, 'actors')).toEqual({ member: 'actors', many: true });
    expect(holdingMember('trips', {}, 'actions')).toEqual({ member: 'actions', many: true });
    expect(holdingMember('consignments', {}, 'goods')).toEqual({ member: 'goods', many: true });
    expect(holdingMember('consignments', {}, 'consignments')).toEqual({ member: 'relatedConsignments', many: true });
    expect(holdingMember('locations', {}, 'locations')).toEqual({ member: 'subLocations', many: true });
    expect(holdingMember('sensors', {}, 'trips')).toBeUndefined();
  });

  it('sub-kinds from the discriminator (or an entityType naming one), common members otherwise', () => {
    expect(holdingMember('actions', { actionType: 'load' }, 'goods')).toEqual({ member: 'transportEquipment', many: false });
    expect(holdingMember('actions', { actionType: 'load' }, 'consignments')).toEqual({ member: 'consignment', many: false });
    expect(holdingMember('actions', { entityType: 'load' }, 'consignments')).toEqual({ member: 'consignment', many: false });
    expect(holdingMember('actions', { actionType: 'stop' }, 'consignments')).toBeUndefined();
    expect(holdingMember('actions', { actionType: 'stop' }, 'actions')).toEqual({ member: 'actions', many: true });
    expect(holdingMember('actions', { actionType: 'move' }, 'locations')).toEqual({ member: 'from', many: false });
    expect(holdingMember('actions', { actionType: 'weigh' }, 'consignments')).toEqual({ member: 'consignment', many: false });
    expect(holdingMember('actions', {}, 'constraints')).toEqual({ member: 'constraint', many: false });
    expect(holdingMember('actions', undefined, 'locations')).toBeUndefined(); // move has from/to, no location
    expect(holdingMember('events', { eventType: 'sensorUpdateEvent' }, 'sensors')).toEqual({ member: 'sensor', many: false });
    expect(holdingMember('events', { eventType: 'locationUpdateEvent' }, 'trips')).toEqual({ member: 'references', many: true });
    expect(holdingMember('events', { eventType: 'associationCreatedEvent' }, 'trips')).toBeUndefined();
    expect(holdingMember('goods', { type: 'transportEquipment' }, 'goods')).toEqual({ member: 'containedGoods', many: true });
    expect(holdingMember('goods', { type: 'items' }, 'goods')).toBeUndefined();
    expect(holdingMember('actors', {}, 'locations')).toEqual({ member: 'locations', many: true });
    expect(holdingMember('actors', { type: 'company' }, 'actors')).toEqual({ member: 'actors', many: true });
    expect(holdingMember('actors', { type: 'person' }, 'actors')).toBeUndefined();
    expect(holdingMember('transportOrders', {}, 'consignments')).toEqual({ member: 'consignments', many: true });
    expect(holdingMember('documents', {}, 'actors')).toEqual({ member: 'creator', many: false });
    expect(holdingMember('trips', {}, 'nope' as KindSegment)).toBeUndefined();
  });

  it('every table row is reachable and consistent', () => {
    const rows = associationTable();
    expect(rows.length).toBeGreaterThan(100);
    for (const r of rows) {
      const disc = KINDS.find((k) => k.segment === r.kind)?.discriminator;
      const doc = r.subKind !== null && disc ? { [disc]: r.subKind } : {};
      for (const h of r.holds) {
        const m = holdingMember(r.kind, doc, h);
        expect(m, `${r.kind}/${r.subKind}/${h}`).toBeDefined();
        expect(
          rows.some(
            (x) => x.kind === r.kind && x.subKind === r.subKind && x.member === m?.member && x.many === m?.many && x.holds.includes(h),
          ),
        ).toBe(true);
      }
    }
  });
});

// ------------------------------------------------------------------------------------------------
// The association table in README.md is generated from associationTable() (OTM_UPDATE_README=1 rewrites it)
// ------------------------------------------------------------------------------------------------

function tableMarkdown(rows: AssociationRow[]): string {
  const lines = ['| kind | sub-kinds | member | many | holds |', '|---|---|---|---|---|'];
  for (const k of KINDS) {
    const own = rows.filter((r) => r.kind === k.segment);
    const subKinds = [...new Set(own.map((r) => r.subKind))];
    const allSubKinds = k.discriminator ? Object.keys(MODEL.schemas[k.schema]?.discriminator?.mapping ?? {}) : [];
    const groups = new Map<string, { member: string; many: boolean; holds: KindSegment[]; subs: Array<string | null> }>();
    for (const r of own) {
      const key = `${r.member}|${r.many}|${r.holds.join(',')}`;
      const g = groups.get(key) ?? { member: r.member, many: r.many, holds: r.holds, subs: [] };
      g.subs.push(r.subKind);
      groups.set(key, g);
    }
    for (const g of groups.values()) {
      const all = g.subs.length === subKinds.length && (allSubKinds.length === 0 || allSubKinds.every((s) => g.subs.includes(s)));
      const subs = !k.discriminator ? '' : all ? 'all' : g.subs.map((s) => s ?? '(plain)').join(', ');
      lines.push(
        `| ${k.segment} | ${subs} | \`${g.member}\` | ${g.many ? 'yes' : ''} | ${g.holds.length >= 12 ? 'any kind but events (the `entity` union)' : g.holds.join(', ')} |`,
      );
    }
  }
  return lines.join('\n');
}

describe('README', () => {
  it('association table is the generated one', () => {
    const url = new URL('../README.md', import.meta.url);
    const readme = readFileSync(url, 'utf8');
    const start = '<!-- association-table:start (generated by test/entity-structure.test.ts) -->\n';
    const end = '\n<!-- association-table:end -->';
    const i = readme.indexOf(start);
    const j = readme.indexOf(end);
    const table = tableMarkdown(associationTable());
    if (process.env.OTM_UPDATE_README === '1' && i >= 0 && j > i) {
      writeFileSync(url, readme.slice(0, i + start.length) + table + readme.slice(j));
      return;
    }
    expect(i, 'README markers').toBeGreaterThanOrEqual(0);
    expect(readme.slice(i + start.length, j)).toBe(table);
  });
});
