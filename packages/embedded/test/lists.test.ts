/** Lists of the LMDB entity store (lists.ts): keyset order, facets, moves, and a walk while entities change. */
import { describe, expect, it } from 'vitest';
import { applyChanges, createLogger, facetsOf, TOPICS, type Envelope, type ListScan } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { useTempStores, type EmbeddedStores } from './event-log/helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

type Doc = Record<string, unknown>;

/** Puts one version of an entity in a unit of its own, listed at `at` under its facets (as apply-changes.ts does). */
async function putAt(s: EmbeddedStores, kind: KindSegment, key: string, doc: Doc, at: number, rank = 0, tenant = 't') {
  await s.entities.unit(async (tx) => {
    tx.put(tenant, { kind, key, lifecycleRank: rank, json: JSON.stringify(doc), stamp: { modified: 0, acceptedAt: at } });
    const [prev] = await tx.listRecords(tenant, [{ kind, key }]);
    tx.setListRecord(tenant, kind, key, { at, ranks: { ...prev?.ranks, [rank]: facetsOf(kind, doc) } }, prev);
  });
}

async function deleteIt(s: EmbeddedStores, kind: KindSegment, key: string, tenant = 't') {
  await s.entities.unit(async (tx) => {
    tx.delete(tenant, kind, key);
    const [prev] = await tx.listRecords(tenant, [{ kind, key }]);
    tx.setListRecord(tenant, kind, key, undefined, prev);
  });
}

const list = (s: EmbeddedStores, facet: string, more: Partial<ListScan> = {}) =>
  s.entities.list({ tenant: 't', kind: 'trips', facet, limit: 100, ...more });
const keys = async (p: Promise<Array<{ key: string }>>) => (await p).map((e) => e.key);

describe('LMDB entity store lists', () => {
  it('lists by facet in keyset order (time of last change, then key), and moves an entity when it changes', async () => {
    const s = openAt(tmp());
    await putAt(s, 'trips', 'b', { status: 'planned' }, 2000);
    await putAt(s, 'trips', 'a', { status: 'planned' }, 2000);
    await putAt(s, 'trips', 'c', { status: 'cancelled' }, 1000);
    await putAt(s, 'vehicles', 'v', { licensePlate: 'AB-12' }, 1500);
    expect(await list(s, '')).toEqual([
      { at: 1000, key: 'c' },
      { at: 2000, key: 'a' },
      { at: 2000, key: 'b' },
    ]);
    expect(await keys(list(s, 'status=planned'))).toEqual(['a', 'b']);
    expect(await keys(list(s, 'status=cancelled'))).toEqual(['c']);
    expect(await keys(s.entities.list({ tenant: 't', kind: 'vehicles', facet: 'licensePlate=AB-12', limit: 10 }))).toEqual(['v']);
    expect(await keys(s.entities.list({ tenant: 'other', kind: 'trips', facet: '', limit: 10 }))).toEqual([]);

    // 'a' changes: it leaves its old place and its old facet.
    await putAt(s, 'trips', 'a', { status: 'cancelled' }, 3000);
    expect(await list(s, '')).toEqual([
      { at: 1000, key: 'c' },
      { at: 2000, key: 'b' },
      { at: 3000, key: 'a' },
    ]);
    expect(await keys(list(s, 'status=planned'))).toEqual(['b']);
    expect(await keys(list(s, 'status=cancelled'))).toEqual(['c', 'a']);

    // A version of another rank adds its facets; the entity is listed under the union.
    await putAt(s, 'trips', 'b', { status: 'started' }, 4000, 2);
    expect(await keys(list(s, 'status=planned'))).toEqual(['b']);
    expect(await keys(list(s, 'status=started'))).toEqual(['b']);
    expect(await list(s, 'status=planned')).toEqual([{ at: 4000, key: 'b' }]);

    await deleteIt(s, 'trips', 'c');
    expect(await keys(list(s, ''))).toEqual(['a', 'b']);
    expect(await keys(list(s, 'status=cancelled'))).toEqual(['a']);
  });

  it('pages with after, since, before and limit', async () => {
    const s = openAt(tmp());
    for (let i = 0; i < 10; i++) await putAt(s, 'trips', `k${i}`, { status: 'planned' }, 1000 + (i >> 1) * 100);
    // at: k0,k1 1000; k2,k3 1100; k4,k5 1200; k6,k7 1300; k8,k9 1400
    expect(await keys(list(s, '', { limit: 3 }))).toEqual(['k0', 'k1', 'k2']);
    expect(await keys(list(s, '', { limit: 3, after: { at: 1100, key: 'k2' } }))).toEqual(['k3', 'k4', 'k5']);
    // After a position no entry has: strictly after it all the same.
    expect(await keys(list(s, '', { limit: 3, after: { at: 1100, key: 'k20' } }))).toEqual(['k3', 'k4', 'k5']);
    expect(await keys(list(s, '', { since: 1200 }))).toEqual(['k4', 'k5', 'k6', 'k7', 'k8', 'k9']);
    expect(await keys(list(s, '', { before: 1200 }))).toEqual(['k0', 'k1', 'k2', 'k3']);
    expect(await keys(list(s, '', { since: 1100, before: 1300, after: { at: 1100, key: 'k3' } }))).toEqual(['k4', 'k5']);
    expect(await keys(list(s, '', { since: 1300, after: { at: 1000, key: 'k0' }, limit: 1 }))).toEqual(['k6']);
    expect(await list(s, '', { since: 1300, before: 1300 })).toEqual([]);
    expect(await list(s, '', { limit: 0 })).toEqual([]);
  });

  it('keeps facets apart whatever their values hold (the separator, the escape, a prefix of another)', async () => {
    const s = openAt(tmp());
    await putAt(s, 'trips', 'a', { status: 'x|y' }, 1000);
    await putAt(s, 'trips', 'b', { status: 'x%7Cy' }, 1000);
    await putAt(s, 'trips', 'c', { status: 'x' }, 1000);
    await putAt(s, 'trips', 'd', { status: 'x|' }, 1000);
    expect(await keys(list(s, 'status=x|y'))).toEqual(['a']);
    expect(await keys(list(s, 'status=x%7Cy'))).toEqual(['b']);
    expect(await keys(list(s, 'status=x'))).toEqual(['c']);
    expect(await keys(list(s, 'status=x|'))).toEqual(['d']);
  });

  it('walks a list page by page while another writer changes entities: each entity left unchanged is seen exactly once', async () => {
    const s = openAt(tmp());
    const n = 300;
    for (let i = 0; i < n; i++) await putAt(s, 'trips', `k${String(i).padStart(3, '0')}`, { status: 'planned' }, 1000 + (i % 50));
    const changed = new Set<string>();
    const seen = new Map<string, number>();
    let at = 5000;
    let seed = 7;
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    let after: { at: number; key: string } | undefined;
    for (let page = 0; ; page++) {
      const entries = await s.entities.list({ tenant: 't', kind: 'trips', facet: 'status=planned', limit: 7, ...(after ? { after } : {}) });
      for (const e of entries) seen.set(e.key, (seen.get(e.key) ?? 0) + 1);
      if (entries.length < 7) break;
      after = entries[entries.length - 1];
      // Between pages: some entities change (moved to the end of the list, or out of it), some go.
      for (let j = 0; j < 3; j++) {
        const key = `k${String(Math.floor(rnd() * n)).padStart(3, '0')}`;
        changed.add(key);
        const r = rnd();
        if (r < 0.5) await putAt(s, 'trips', key, { status: 'planned' }, at++);
        else if (r < 0.8) await putAt(s, 'trips', key, { status: 'cancelled' }, at++);
        else await deleteIt(s, 'trips', key);
      }
      expect(page).toBeLessThan(1_000);
    }
    for (let i = 0; i < n; i++) {
      const key = `k${String(i).padStart(3, '0')}`;
      if (!changed.has(key)) expect(seen.get(key), key).toBe(1);
    }
    // And the list holds exactly what the records say.
    const final = await keys(list(s, 'status=planned', { limit: 1_000 }));
    expect(new Set(final).size).toBe(final.length);
  });

  it('lets a unit read the list records it set, and lists what apply-changes stored by every facet', async () => {
    const s = openAt(tmp());
    const vehicle = '0b8f3a3e-1111-4a4a-8888-000000000001';
    const actor = '0b8f3a3e-2222-4a4a-8888-000000000002';
    const trip = '0b8f3a3e-3333-4a4a-8888-000000000003';
    const doc = {
      id: trip,
      entityType: 'trip',
      status: 'inTransit',
      externalIdentifiers: [{ id: 'EXT-1' }],
      vehicle: { associationType: 'inline', entity: { id: vehicle, entityType: 'vehicle', licensePlate: 'ZZ-99' } },
      actors: [{ associationType: 'reference', uuid: actor, entityType: 'actor' }],
    };
    const envelope: Envelope = {
      topic: TOPICS.entities,
      key: trip,
      message: { v: 1, op: 'put', tenant: 't', kind: 'trips', key: trip, acceptedAt: 1, doc },
    };
    await s.entities.unit((tx) => applyChanges(tx, [envelope], { logger: createLogger('silent') }));
    for (const f of ['', 'status=inTransit', 'externalId=EXT-1', `vehicle=${vehicle}`, `actor=${actor}`]) {
      expect(await keys(list(s, f)), f).toEqual([trip]);
    }
    expect(await keys(s.entities.list({ tenant: 't', kind: 'vehicles', facet: 'licensePlate=ZZ-99', limit: 10 }))).toEqual([vehicle]);

    await s.entities.unit(async (tx) => {
      const [before] = await tx.listRecords('t', [{ kind: 'trips', key: trip }]);
      expect(before?.ranks[0]).toContain('status=inTransit');
      tx.setListRecord('t', 'trips', trip, { at: 5, ranks: { 0: [''] } }, before);
      expect(
        await tx.listRecords('t', [
          { kind: 'trips', key: trip },
          { kind: 'trips', key: 'none' },
        ]),
      ).toEqual([{ at: 5, ranks: { 0: [''] } }, undefined]);
      tx.setListRecord('t', 'trips', trip, undefined, { at: 5, ranks: { 0: [''] } });
      expect(await tx.listRecords('t', [{ kind: 'trips', key: trip }])).toEqual([undefined]);
    });
    expect(await list(s, '')).toEqual([]);
    expect(await list(s, 'status=inTransit')).toEqual([]);

    const del: Envelope = {
      topic: TOPICS.entities,
      key: vehicle,
      message: { v: 1, op: 'delete', tenant: 't', kind: 'vehicles', key: vehicle, acceptedAt: 2 },
    };
    await s.entities.unit((tx) => applyChanges(tx, [del], { logger: createLogger('silent') }));
    expect(await s.entities.list({ tenant: 't', kind: 'vehicles', facet: '', limit: 10 })).toEqual([]);
  });

  it('writes nothing of a unit LMDB refuses: neither its documents nor their list entries', async () => {
    const s = openAt(tmp());
    await expect(
      s.entities.unit(async (tx) => {
        tx.put('t', { kind: 'trips', key: 'fine', lifecycleRank: 0, json: '{}', stamp: { modified: 0, acceptedAt: 1 } });
        tx.setListRecord('t', 'trips', 'fine', { at: 1, ranks: { 0: [''] } }, undefined);
        tx.put('t', { kind: 'trips', key: 'k'.repeat(3000), lifecycleRank: 0, json: '{}', stamp: { modified: 0, acceptedAt: 1 } });
      }),
    ).rejects.toMatchObject({ adapter: 'lmdb', retryable: false });
    expect(await s.entities.get('t', 'trips', 'fine')).toBeUndefined();
    expect(await list(s, '')).toEqual([]);
    expect((await s.entities.feed.read({ tenant: 't', limit: 10 })).entries).toEqual([]);
  });

  it('keeps the lists across a reopen', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await putAt(s, 'trips', 'a', { status: 'planned' }, 1000);
    await putAt(s, 'trips', 'b', { status: 'planned' }, 900);
    await closeIt(s);
    const again = openAt(dir);
    expect(await keys(list(again, 'status=planned'))).toEqual(['b', 'a']);
  });
});
