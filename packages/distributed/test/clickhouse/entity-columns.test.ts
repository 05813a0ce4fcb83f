/** The rows of otm_entities made from the entity export's changes (no I/O). */
import { describe, expect, it } from 'vitest';
import { storageKey, type EntityChange } from '@otm/core';
import { ENTITY_COLUMNS, entityRows, linkedEntities, tsvLine } from '../../src/index.js';
import { consignment, ids, loadAction, trip } from '../../../../test/fixtures/documents.js';

const put = (kind: EntityChange['kind'], doc: Record<string, unknown>, rank = 0, version = 17n): EntityChange => ({
  tenant: 'acme',
  op: 'put',
  kind,
  key: storageKey(doc.id as string),
  lifecycleRank: rank,
  at: 1_700_000_000_123,
  version,
  json: JSON.stringify(doc),
});

describe('entityRows', () => {
  it('a trip: typed columns, and every entity it names at any depth, once each, without itself', () => {
    const upper = '0A1B2C3D-0000-4000-8000-00000000000A';
    const doc = {
      ...trip,
      externalIdentifiers: [{ id: 'TRIP-1' }, { id: 'TRIP-1' }],
      actions: [
        ...trip.actions,
        // an inline load naming its consignment by reference, a referenced action, one named twice
        { associationType: 'inline', entity: loadAction },
        { associationType: 'reference', entityType: 'action', uuid: upper },
        { associationType: 'reference', entityType: 'action', uuid: upper.toLowerCase() },
        { associationType: 'attributeRestriction', entityType: 'action', attributeRestriction: { name: 'x', value: 'y' } },
      ],
      contextEvents: [{ associationType: 'reference', entityType: 'trip', uuid: ids.trip }],
    };
    const [row, ...rest] = entityRows(put('trips', doc));
    expect(rest).toEqual([]);
    expect(row).toMatchObject({
      tenant: 'acme',
      kind: 'trips',
      entity_id: ids.trip,
      lifecycle_rank: 0,
      lifecycle: '',
      subtype: '',
      name: 'Utrecht - Zwolle',
      status: 'inTransit',
      external_ids: ['TRIP-1'],
      vehicle_ids: [ids.vehicle],
      actor_ids: [ids.driver],
      changed_at: 1_700_000_000_123,
      version: '17',
      deleted: 0,
      doc: JSON.stringify(doc),
    });
    const linked = row!.linked_kinds.map((k, i) => `${k} ${row!.linked_ids[i]}`);
    expect(linked).toEqual([
      `vehicles ${ids.vehicle}`,
      `actors ${ids.driver}`,
      `actions ${ids.stopLoad}`,
      `locations ${ids.depot}`,
      `actions ${ids.stopUnload}`,
      `locations ${ids.customer}`,
      `actions ${ids.load}`,
      `consignments ${ids.consignment}`,
      `actions ${upper.toLowerCase()}`,
    ]);
    expect(Object.keys(row!).sort()).toEqual([...ENTITY_COLUMNS].sort());
  });

  it('an action in a lifecycle: its rank, lifecycle and actionType, and what it names', () => {
    const action = { ...loadAction, trip: { associationType: 'reference', entityType: 'trip', uuid: ids.trip } };
    const [row] = entityRows(put('actions', action, 2));
    expect(row).toMatchObject({ kind: 'actions', lifecycle_rank: 2, lifecycle: 'planned', subtype: 'load', name: '', status: '' });
    expect(row!.linked_kinds).toEqual(['consignments', 'trips']);
    expect(row!.linked_ids).toEqual([ids.consignment, ids.trip]);
  });

  it('ids that are no UUIDs are named by their storage keys, as entity_id is', () => {
    const doc = {
      ...consignment,
      id: 'order-4711',
      goods: [{ associationType: 'reference', entityType: 'goods', uuid: 'https://x.example/goods/G1' }],
    };
    const [row] = entityRows(put('consignments', doc));
    expect(row!.entity_id).toBe(storageKey('order-4711'));
    expect(row!.linked_ids).toEqual([storageKey('https://x.example/goods/G1'), ids.carrier]);
    expect(row!.actor_ids).toEqual([ids.carrier]);
  });

  it('a delete: a tombstone for every lifecycle rank, without a document', () => {
    const rows = entityRows({
      tenant: 'acme',
      op: 'delete',
      kind: 'trips',
      key: ids.trip,
      lifecycleRank: 0,
      at: 5_000,
      version: 2n ** 63n,
    });
    expect(rows.map((r) => r.lifecycle_rank)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const r of rows) {
      expect(r).toMatchObject({
        entity_id: ids.trip,
        deleted: 1,
        doc: '',
        version: '9223372036854775808',
        changed_at: 5_000,
        linked_ids: [],
      });
    }
  });

  it('a document that is no JSON object keeps its text, without columns', () => {
    const [row] = entityRows({ ...put('trips', trip), json: '[1]' });
    expect(row).toMatchObject({ doc: '[1]', name: '', linked_ids: [], deleted: 0 });
  });

  it('linkedEntities says "" for an association that names no kind', () => {
    expect(linkedEntities('trips', 'x', { a: { associationType: 'reference', uuid: 'A0000000-0000-4000-8000-000000000001' } })).toEqual({
      kinds: [''],
      ids: ['a0000000-0000-4000-8000-000000000001'],
    });
  });
});

describe('arrays in TabSeparated rows', () => {
  it('quotes each string and escapes quotes, backslashes and separators once', () => {
    const row = { a: ['x', "it's", 'back\\slash', 'tab\there', 'nl\n'], b: [] as string[], c: 'plain' };
    expect(tsvLine(row, ['a', 'b', 'c'])).toBe("['x','it\\'s','back\\\\slash','tab\\there','nl\\n']\t[]\tplain\n");
  });
});
