/**
 * The model's semantics over HTTP: inline entities kept on their own, updateEvent, association
 * events, lifecycles, deletes, and tenant scoping of all of it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consignment, depot, driver, ids, sensor, trip, vehicle } from '../../../test/fixtures/documents.js';
import { auth, json, startService, target, type TestService } from './helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc.close());

const put = async (kind: string, body: unknown, token?: string) => {
  const res = await svc.app.inject({
    method: 'PUT',
    url: `/api/v5/${kind}`,
    headers: { ...json, ...auth(token) },
    payload: JSON.stringify(body),
  });
  return { status: res.statusCode, body: res.json() };
};
const get = async (kind: string, id: string, token?: string, query = '') => {
  const res = await svc.app.inject({ method: 'GET', url: `/api/v5/${kind}/${id}${query}`, headers: auth(token) });
  return { status: res.statusCode, body: res.statusCode === 200 ? res.json() : undefined };
};
const del = async (kind: string, id: string) =>
  (await svc.app.inject({ method: 'DELETE', url: `/api/v5/${kind}/${id}`, headers: auth() })).statusCode;
const fresh = (prefix: string, n: number) => `${prefix}-0000-4000-8000-${String(n).padStart(12, '0')}`;
const ref = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
const update = (id: string, entity: Record<string, unknown>) => ({ eventType: 'updateEvent', id, lifecycle: 'actual', entity });

describe('inline entities', () => {
  it('are each kept as an entity of their own kind, for the tenant that wrote them', async () => {
    expect((await put('trips', trip)).status).toBe(200);
    expect((await get('trips', ids.trip)).body).toEqual(trip);
    expect((await get('vehicles', ids.vehicle)).body).toEqual(vehicle);
    expect((await get('actors', ids.driver)).body).toEqual(driver);
    expect((await get('locations', ids.depot)).body).toEqual(depot);
    expect((await get('locations', ids.customer)).status).toBe(200);
    const stop = (await get('actions', ids.stopLoad)).body;
    expect(stop).toEqual(trip.actions[0]!.entity);
    expect(stop.lifecycle).toBe('planned');
    for (const [kind, id] of [
      ['vehicles', ids.vehicle],
      ['actors', ids.driver],
      ['locations', ids.depot],
      ['actions', ids.stopLoad],
    ] as const) {
      expect((await get(kind, id, 'writer-token-globex')).status).toBe(404);
    }
  });

  it('are kept at any depth: goods and actors inside a consignment', async () => {
    await put('consignments', consignment);
    expect((await get('goods', ids.goods)).body).toEqual(consignment.goods[0]!.entity);
    expect((await get('actors', ids.carrier)).status).toBe(200);
  });

  it('without an id live only inside their parent', async () => {
    const id = fresh('a1000000', 1);
    const doc = {
      entityType: 'trip',
      id,
      vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', licensePlate: 'NO-ID-1' } },
    };
    expect((await put('trips', doc)).status).toBe(200);
    expect((await get('trips', id)).body).toEqual(doc);
  });

  it('the newer copy wins: lastModified first, then arrival order; the parent shows the winner', async () => {
    const vid = fresh('a2000000', 1);
    const v = (name: string, lastModified?: string) => ({
      entityType: 'vehicle',
      id: vid,
      name,
      ...(lastModified ? { lastModified } : {}),
    });
    const holder = (n: number, veh: unknown) => ({
      entityType: 'trip',
      id: fresh('a2000000', 10 + n),
      vehicle: { associationType: 'inline', entity: veh },
    });
    await put('trips', holder(1, v('newest', '2026-11-20T10:00:00Z')));
    await put('trips', holder(2, v('older', '2026-11-19T10:00:00Z')));
    expect((await get('vehicles', vid)).body.name).toBe('newest');
    expect((await get('trips', fresh('a2000000', 12))).body.vehicle.entity.name).toBe('newest');
    await put('trips', holder(3, v('later still', '2026-11-21T10:00:00Z')));
    expect((await get('vehicles', vid)).body.name).toBe('later still');
    // Holders of the vehicle show its current version.
    expect((await get('trips', fresh('a2000000', 11))).body.vehicle.entity.name).toBe('later still');

    const wid = fresh('a2000000', 2);
    await put('trips', holder(4, { entityType: 'vehicle', id: wid, name: 'first' }));
    await put('trips', holder(5, { entityType: 'vehicle', id: wid, name: 'second' }));
    expect((await get('vehicles', wid)).body.name).toBe('second');
  });

  it('a PUT of the entity itself always replaces it, and reaches the documents that hold it', async () => {
    await put('trips', trip);
    await put('vehicles', { ...vehicle, licensePlate: 'NEW-PLATE' });
    expect((await get('vehicles', ids.vehicle)).body.licensePlate).toBe('NEW-PLATE');
    expect((await get('trips', ids.trip)).body.vehicle.entity.licensePlate).toBe('NEW-PLATE');
    await put('vehicles', vehicle);
  });
});

describe('updateEvent', () => {
  it('changes only the fields it gives; null removes a field; nested objects merge; arrays are replaced', async () => {
    const cid = fresh('b1000000', 1);
    await put('consignments', { ...consignment, id: cid, goods: undefined, actors: undefined });
    const before = (await get('consignments', cid)).body;
    const res = await put(
      'events',
      update(fresh('b1000000', 2), { entityType: 'consignment', id: cid, status: 'completed', description: null }),
    );
    expect(res.status).toBe(200);
    const after = (await get('consignments', cid)).body;
    expect(after.status).toBe('completed');
    expect(after).not.toHaveProperty('description');
    expect({ ...after, status: before.status, description: before.description }).toEqual(before);
    // The update event itself stays retrievable.
    expect((await get('events', fresh('b1000000', 2))).body.eventType).toBe('updateEvent');

    const vid = fresh('b1000000', 3);
    await put('vehicles', { entityType: 'vehicle', id: vid, emptyWeight: { value: 7000, unit: 'kg' }, fuels: [{ fuelType: 'diesel' }] });
    await put(
      'events',
      update(fresh('b1000000', 4), { entityType: 'vehicle', id: vid, emptyWeight: { value: 7100 }, fuels: [{ fuelType: 'hvo' }] }),
    );
    const v = (await get('vehicles', vid)).body;
    expect(v.emptyWeight).toEqual({ value: 7100, unit: 'kg' });
    expect(v.fuels).toEqual([{ fuelType: 'hvo' }]);
  });

  it('an update that would make the entity invalid: precise 400, nothing changed', async () => {
    const lid = fresh('b2000000', 1);
    const loc = { ...depot, id: lid };
    await put('locations', loc);
    const bad = await put('events', update(fresh('b2000000', 2), { entityType: 'location', id: lid, geoReference: null }));
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual([
      expect.objectContaining({ type: 'missingField', field: expect.stringMatching(/^entity\.(entity\.)?geoReference$/) }),
    ]);
    const badValue = await put('events', update(fresh('b2000000', 3), { entityType: 'location', id: lid, type: 'moon base' }));
    expect(badValue.status).toBe(400);
    expect(badValue.body[0]).toMatchObject({ type: 'invalidField', field: expect.stringMatching(/type$/) });
    expect((await get('locations', lid)).body).toEqual(loc);
    expect((await get('events', fresh('b2000000', 2))).status).toBe(404);
  });

  it('reaches the documents that hold the entity inline', async () => {
    await put('trips', trip);
    await put('events', update(fresh('b3000000', 1), { entityType: 'location', id: ids.depot, name: 'Depot Utrecht-Noord' }));
    expect((await get('locations', ids.depot)).body.name).toBe('Depot Utrecht-Noord');
    expect((await get('actions', ids.stopLoad)).body.location.entity.name).toBe('Depot Utrecht-Noord');
    expect((await get('trips', ids.trip)).body.actions[0].entity.location.entity.name).toBe('Depot Utrecht-Noord');
    await put('locations', depot);
  });

  it('an update whose target is not known yet waits for it', async () => {
    const cid = fresh('b4000000', 1);
    expect((await put('events', update(fresh('b4000000', 2), { entityType: 'consignment', id: cid, status: 'inTransit' }))).status).toBe(
      200,
    );
    expect((await get('consignments', cid)).status).toBe(404);
    await put('consignments', { entityType: 'consignment', id: cid, status: 'confirmed', name: 'late arrival' });
    expect((await get('consignments', cid)).body).toEqual({
      entityType: 'consignment',
      id: cid,
      status: 'inTransit',
      name: 'late arrival',
    });
  });

  it('a waiting update that would be invalid when its target arrives is dropped', async () => {
    const lid = fresh('b5000000', 1);
    expect((await put('events', update(fresh('b5000000', 2), { entityType: 'location', id: lid, geoReference: null }))).status).toBe(200);
    const loc = { ...depot, id: lid };
    await put('locations', loc);
    expect((await get('locations', lid)).body).toEqual(loc);
    // The drop is counted by the process that runs the entity worker (here, in the embedded run).
    if (target() === 'embedded') {
      const metrics = await svc.app.inject({ method: 'GET', url: '/metrics' });
      expect(metrics.body).toMatch(/otm_dropped_effects_total\{reason="invalidResult"\} [1-9]/);
    }
  });

  it('is applied in the order accepted', async () => {
    const cid = fresh('b6000000', 1);
    await put('consignments', { entityType: 'consignment', id: cid, status: 'draft' });
    const order = ['requested', 'confirmed', 'inTransit', 'completed', 'closed'];
    for (const [i, status] of order.entries())
      await put('events', update(fresh('b6000000', 10 + i), { entityType: 'consignment', id: cid, status }));
    expect((await get('consignments', cid)).body.status).toBe('closed');
  });

  it("is tenant-scoped: it never touches another tenant's entity", async () => {
    const cid = fresh('b7000000', 1);
    await put('consignments', { entityType: 'consignment', id: cid, status: 'draft' });
    await put('events', update(fresh('b7000000', 2), { entityType: 'consignment', id: cid, status: 'cancelled' }), 'writer-token-globex');
    expect((await get('consignments', cid)).body.status).toBe('draft');
  });
});

describe('association events', () => {
  const assoc = (eventType: string, id: string, entity1: unknown, entity2: unknown) => ({
    eventType,
    id,
    lifecycle: 'actual',
    entity1,
    entity2,
  });

  it("trip + vehicle sets the trip's vehicle; removing it takes it away", async () => {
    const tid = fresh('c1000000', 1);
    const vid = fresh('c1000000', 2);
    await put('trips', { entityType: 'trip', id: tid, name: 'no vehicle yet' });
    const created = await put(
      'events',
      assoc('associationCreatedEvent', fresh('c1000000', 3), ref('trip', tid), {
        associationType: 'inline',
        entity: { entityType: 'vehicle', id: vid, licensePlate: 'XX-1' },
      }),
    );
    expect(created.status).toBe(200);
    expect((await get('trips', tid)).body.vehicle).toEqual({
      associationType: 'inline',
      entity: { entityType: 'vehicle', id: vid, licensePlate: 'XX-1' },
    });
    // Inline entity2 is kept on its own; the event stays retrievable.
    expect((await get('vehicles', vid)).body.licensePlate).toBe('XX-1');
    expect((await get('events', fresh('c1000000', 3))).body.eventType).toBe('associationCreatedEvent');
    await put('events', assoc('associationRemovedEvent', fresh('c1000000', 4), ref('trip', tid), ref('vehicle', vid)));
    expect((await get('trips', tid)).body).toEqual({ entityType: 'trip', id: tid, name: 'no vehicle yet' });
  });

  it('vehicle + sensor adds to the sensors once; trip + actor adds to the actors', async () => {
    const vid = fresh('c2000000', 1);
    await put('vehicles', { entityType: 'vehicle', id: vid });
    for (const n of [2, 3])
      await put('events', assoc('associationCreatedEvent', fresh('c2000000', n), ref('vehicle', vid), ref('sensor', ids.sensor)));
    expect((await get('vehicles', vid)).body.sensors).toEqual([ref('sensor', ids.sensor)]);
    await put('sensors', sensor);
    const tid = fresh('c2000000', 4);
    await put('trips', { entityType: 'trip', id: tid, actors: [{ associationType: 'reference', entityType: 'actor', uuid: ids.carrier }] });
    await put(
      'events',
      assoc('associationCreatedEvent', fresh('c2000000', 5), ref('trip', tid), { associationType: 'inline', entity: driver }),
    );
    expect((await get('trips', tid)).body.actors).toEqual([
      { associationType: 'reference', entityType: 'actor', uuid: ids.carrier },
      { associationType: 'inline', entity: driver },
    ]);
    await put('events', assoc('associationRemovedEvent', fresh('c2000000', 6), ref('trip', tid), ref('actor', ids.carrier)));
    expect((await get('trips', tid)).body.actors).toEqual([{ associationType: 'inline', entity: driver }]);
  });

  it('a pair that no member can hold: precise 400', async () => {
    const res = await put(
      'events',
      assoc('associationCreatedEvent', fresh('c3000000', 1), ref('sensor', ids.sensor), ref('trip', ids.trip)),
    );
    expect(res.status).toBe(400);
    expect(res.body).toEqual([expect.objectContaining({ type: 'invalidField', field: 'entity2' })]);
  });

  describe('entity1 named by an attributeRestriction', () => {
    const restriction = (entityType: string, externalAttributes: Record<string, unknown>) => ({
      associationType: 'attributeRestriction',
      entityType,
      restriction: { externalAttributes },
    });

    it('is applied to the entity whose external attributes match, not to one of another tenant', async () => {
      const tid = fresh('c5000000', 1);
      const other = fresh('c5000000', 2);
      await put('trips', { entityType: 'trip', id: tid, externalAttributes: { orderNo: 'R-1', depot: 'ams' } });
      await put('trips', { entityType: 'trip', id: other, externalAttributes: { orderNo: 'R-1' } }, 'writer-token-globex');
      const res = await put(
        'events',
        assoc(
          'associationCreatedEvent',
          fresh('c5000000', 3),
          restriction('trip', { orderNo: 'R-1', depot: 'ams' }),
          ref('vehicle', ids.vehicle),
        ),
      );
      expect(res.status).toBe(200);
      expect((await get('trips', tid)).body.vehicle).toEqual(ref('vehicle', ids.vehicle));
      expect((await get('trips', other, 'writer-token-globex')).body.vehicle).toBeUndefined();
    });

    it('waits until an entity with all the attributes arrives', async () => {
      const partial = fresh('c6000000', 1);
      const tid = fresh('c6000000', 2);
      await put(
        'events',
        assoc(
          'associationCreatedEvent',
          fresh('c6000000', 3),
          restriction('trip', { orderNo: 'R-2', depot: 'rtm' }),
          ref('vehicle', ids.vehicle),
        ),
      );
      await put('trips', { entityType: 'trip', id: partial, externalAttributes: { orderNo: 'R-2', depot: 'ams' } });
      expect((await get('trips', partial)).body.vehicle).toBeUndefined();
      await put('trips', { entityType: 'trip', id: tid, externalAttributes: { orderNo: 'R-2', depot: 'rtm' } });
      expect((await get('trips', tid)).body.vehicle).toEqual(ref('vehicle', ids.vehicle));
    });

    it('is applied to every entity that matches', async () => {
      const a = fresh('c7000000', 1);
      const b = fresh('c7000000', 2);
      for (const id of [a, b]) await put('trips', { entityType: 'trip', id, externalAttributes: { convoy: 'K-7' } });
      await put(
        'events',
        assoc('associationCreatedEvent', fresh('c7000000', 3), restriction('trip', { convoy: 'K-7' }), ref('vehicle', ids.vehicle)),
      );
      expect((await get('trips', a)).body.vehicle).toEqual(ref('vehicle', ids.vehicle));
      expect((await get('trips', b)).body.vehicle).toEqual(ref('vehicle', ids.vehicle));
      await put(
        'events',
        assoc('associationRemovedEvent', fresh('c7000000', 4), restriction('trip', { convoy: 'K-7' }), ref('vehicle', ids.vehicle)),
      );
      expect((await get('trips', a)).body.vehicle).toBeUndefined();
    });

    it('a restriction that names no attribute: precise 400', async () => {
      const res = await put(
        'events',
        assoc('associationCreatedEvent', fresh('c8000000', 1), restriction('trip', {}), ref('vehicle', ids.vehicle)),
      );
      expect(res.status).toBe(400);
      expect(res.body).toEqual([expect.objectContaining({ type: 'invalidField', field: 'entity1.restriction.externalAttributes' })]);
    });
  });

  it('an association whose entity1 is not known yet waits for it', async () => {
    const tid = fresh('c4000000', 1);
    await put('events', assoc('associationCreatedEvent', fresh('c4000000', 2), ref('trip', tid), ref('vehicle', ids.vehicle)));
    await put('trips', { entityType: 'trip', id: tid });
    expect((await get('trips', tid)).body.vehicle).toEqual(ref('vehicle', ids.vehicle));
  });
});

describe('lifecycles of inline actions', () => {
  it('a stop sent again as realized is kept beside the planned one', async () => {
    await put('trips', trip);
    const realized = { ...trip.actions[0]!.entity, lifecycle: 'realized', endTime: '2026-11-23T06:42:00Z' };
    await put('actions', realized);
    expect((await get('actions', ids.stopLoad)).body.lifecycle).toBe('realized');
    expect((await get('actions', ids.stopLoad, undefined, '?lifecycle=planned')).body).toEqual(trip.actions[0]!.entity);
    // The trip still holds its planned stop.
    expect((await get('trips', ids.trip)).body.actions[0].entity.lifecycle).toBe('planned');
  });
});

describe('DELETE', () => {
  it('removes that entity only; the parent keeps its inline copy', async () => {
    const tid = fresh('d1000000', 1);
    const vid = fresh('d1000000', 2);
    const doc = { entityType: 'trip', id: tid, vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id: vid } } };
    await put('trips', doc);
    expect(await del('vehicles', vid)).toBe(204);
    expect((await get('vehicles', vid)).status).toBe(404);
    expect((await get('trips', tid)).body).toEqual(doc);
    expect(await del('trips', tid)).toBe(204);
    expect((await get('trips', tid)).status).toBe(404);
  });
});
