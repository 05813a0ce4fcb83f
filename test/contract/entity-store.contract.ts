/**
 * The contract of the EntityStore port (packages/core/src/ports.ts), run against every adapter:
 * versions by lifecycle rank with their stamps, deletes of every version, tenants apart, units of
 * work that read their own writes and commit all or nothing, holders, pending effects in order.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EntityStore, PendingEffect, StoredDocument, VersionStamp } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { openedPerTest } from './fixture.js';

export interface EntityStoreFixture {
  readonly store: EntityStore;
  /** A second store on the same data (another process, or the same data reopened). */
  reopen(): Promise<EntityStore>;
  close(): Promise<void>;
}

const doc = (
  kind: KindSegment,
  key: string,
  rank: number,
  body: Record<string, unknown>,
  stamp: VersionStamp = { modified: 1, acceptedAt: 2 },
) => ({ kind, key, lifecycleRank: rank, json: JSON.stringify(body), stamp }) satisfies StoredDocument & { stamp: VersionStamp };
const body = (d: StoredDocument | undefined) => (d ? (JSON.parse(d.json) as Record<string, unknown>) : undefined);

export function entityStoreContract(name: string, factory: () => Promise<EntityStoreFixture>): void {
  describe(`EntityStore contract: ${name}`, () => {
    const open = openedPerTest(factory);

    it('keeps every lifecycle version with its stamp and answers the latest unless asked', async () => {
      const { store } = await open();
      const k = randomUUID();
      await store.unit(async (tx) => {
        tx.put('t1', doc('actions', k, 2, { v: 'planned' }, { modified: 10, acceptedAt: 20 }));
        tx.put('t1', doc('actions', k, 5, { v: 'realized' }, { modified: 11, acceptedAt: 21 }));
        tx.put('t1', doc('actions', k, 0, { v: 'none' }));
      });
      const latest = await store.get('t1', 'actions', k);
      expect(latest).toMatchObject({ kind: 'actions', key: k, lifecycleRank: 5, stamp: { modified: 11, acceptedAt: 21 } });
      expect(body(latest)).toEqual({ v: 'realized' });
      expect(body(await store.get('t1', 'actions', k, 2))).toEqual({ v: 'planned' });
      expect((await store.get('t1', 'actions', k, 2))?.stamp).toEqual({ modified: 10, acceptedAt: 20 });
      expect(await store.get('t1', 'actions', k, 3)).toBeUndefined();
      expect(await store.get('t1', 'actions', randomUUID())).toBeUndefined();
      // replacing a version
      await store.unit(async (tx) => tx.put('t1', doc('actions', k, 5, { v: 'realized again' })));
      expect(body(await store.get('t1', 'actions', k))).toEqual({ v: 'realized again' });
    });

    it('keeps the json byte for byte', async () => {
      const { store } = await open();
      const k = randomUUID();
      const json = '{"name":"O\'Brien \\\\ \\"q\\" \\u00e9\\n","a":[1,2.5,null]}';
      await store.unit(async (tx) =>
        tx.put('t1', { kind: 'trips', key: k, lifecycleRank: 0, json, stamp: { modified: 0, acceptedAt: 1 } }),
      );
      expect((await store.get('t1', 'trips', k))?.json).toBe(json);
    });

    it('deletes every lifecycle version; keeps tenants, kinds and keys sharing a prefix apart', async () => {
      const { store } = await open();
      const k = randomUUID();
      await store.unit(async (tx) => {
        tx.put('t', doc('trips', k, 1, { a: 1 }));
        tx.put('t', doc('trips', k, 4, { a: 4 }));
        tx.put('t2', doc('trips', k, 0, { b: 1 }));
        tx.put('t', doc('trips', `${k}0`, 0, { c: 1 }));
        tx.put('t', doc('vehicles', k, 0, { d: 1 }));
      });
      await store.unit(async (tx) => tx.delete('t', 'trips', k));
      expect(await store.get('t', 'trips', k)).toBeUndefined();
      expect(await store.get('t', 'trips', k, 1)).toBeUndefined();
      expect(body(await store.get('t2', 'trips', k))).toEqual({ b: 1 });
      expect(body(await store.get('t', 'trips', `${k}0`))).toEqual({ c: 1 });
      expect(body(await store.get('t', 'vehicles', k))).toEqual({ d: 1 });
      expect(await store.get('t3', 'trips', `${k}0`)).toBeUndefined();
    });

    it("a unit reads its own writes through to the store's data", async () => {
      const { store } = await open();
      const k = randomUUID();
      await store.unit(async (tx) => {
        tx.put('t', doc('trips', k, 2, { stored: 2 }));
        tx.put('t', doc('trips', k, 4, { stored: 4 }));
      });
      const result = await store.unit(async (tx) => {
        expect(body(await tx.get('t', 'trips', k))).toEqual({ stored: 4 });
        tx.put('t', doc('trips', k, 3, { own: 3 }));
        expect(body(await tx.get('t', 'trips', k))).toEqual({ stored: 4 }); // a higher stored rank still wins
        expect(body(await tx.get('t', 'trips', k, 3))).toEqual({ own: 3 });
        tx.put('t', doc('trips', k, 5, { own: 5 }));
        expect(body(await tx.get('t', 'trips', k))).toEqual({ own: 5 });
        expect(body(await tx.get('t', 'trips', k, 2))).toEqual({ stored: 2 });
        tx.delete('t', 'trips', k);
        expect(await tx.get('t', 'trips', k)).toBeUndefined();
        expect(await tx.get('t', 'trips', k, 2)).toBeUndefined();
        tx.put('t', doc('trips', k, 1, { after: 1 }));
        expect(body(await tx.get('t', 'trips', k))).toEqual({ after: 1 });
        expect(await store.get('t', 'trips', k, 5)).toBeUndefined(); // not visible outside before commit
        return 'done';
      });
      expect(result).toBe('done');
      expect(body(await store.get('t', 'trips', k))).toEqual({ after: 1 });
      expect(await store.get('t', 'trips', k, 2)).toBeUndefined();
      expect(await store.get('t', 'trips', k, 4)).toBeUndefined();
      expect(await store.get('t', 'trips', k, 3)).toBeUndefined();
    });

    it('a unit whose work throws writes nothing', async () => {
      const { store } = await open();
      const k = randomUUID();
      const child = { kind: 'locations' as const, key: randomUUID() };
      await store.unit(async (tx) => tx.put('t', doc('trips', k, 0, { before: true })));
      await expect(
        store.unit(async (tx) => {
          tx.put('t', doc('trips', k, 0, { before: false }));
          tx.put('t', doc('trips', randomUUID(), 0, {}));
          tx.delete('t', 'trips', k);
          tx.addHolder('t', child, { kind: 'trips', key: k, lifecycleRank: 0 });
          tx.addPending('t', 'trips', k, { acceptedAt: 1, eventKey: 'e', event: {} });
          throw new Error('boom');
        }),
      ).rejects.toThrow('boom');
      expect(body(await store.get('t', 'trips', k))).toEqual({ before: true });
      await store.unit(async (tx) => {
        expect(await tx.holders('t', child.kind, child.key)).toEqual([]);
        expect(await tx.pending('t', 'trips', k)).toEqual([]);
      });
    });

    it('holders: added, listed, removed, per child and tenant, with overlay', async () => {
      const { store } = await open();
      const child = { kind: 'locations' as const, key: randomUUID() };
      const h1 = { kind: 'trips' as const, key: randomUUID(), lifecycleRank: 0 };
      const h2 = { kind: 'actions' as const, key: randomUUID(), lifecycleRank: 3 };
      await store.unit(async (tx) => {
        tx.addHolder('t', child, h1);
        tx.addHolder('t', child, h2);
        tx.addHolder('t', child, h2); // twice: once
        expect(await tx.holders('t', child.kind, child.key)).toHaveLength(2);
      });
      await store.unit(async (tx) => {
        const sort = (l: { key: string }[]) => [...l].sort((a, b) => a.key.localeCompare(b.key));
        expect(sort(await tx.holders('t', child.kind, child.key))).toEqual(sort([h1, h2]));
        expect(await tx.holders('t2', child.kind, child.key)).toEqual([]);
        tx.removeHolder('t', child, h1);
        expect(await tx.holders('t', child.kind, child.key)).toEqual([h2]);
      });
      await store.unit(async (tx) => expect(await tx.holders('t', child.kind, child.key)).toEqual([h2]));
    });

    it('pending effects come back in acceptance order, then event key; removal is exact', async () => {
      const { store } = await open();
      const k = randomUUID();
      const e = (acceptedAt: number, eventKey: string): PendingEffect => ({
        acceptedAt,
        eventKey,
        event: { eventType: 'updateEvent', n: `${acceptedAt}${eventKey}` },
      });
      await store.unit(async (tx) => {
        tx.addPending('t', 'trips', k, e(30, 'a'));
        tx.addPending('t', 'trips', k, e(1_700_000_000_000, 'z'));
        tx.addPending('t', 'trips', k, e(20, 'b'));
      });
      await store.unit(async (tx) => {
        tx.addPending('t', 'trips', k, e(20, 'a'));
        tx.addPending('t', 'trips', k, e(5, 'x'));
        expect((await tx.pending('t', 'trips', k)).map((p) => `${p.acceptedAt}${p.eventKey}`)).toEqual([
          '5x',
          '20a',
          '20b',
          '30a',
          '1700000000000z',
        ]);
      });
      await store.unit(async (tx) => {
        const list = await tx.pending('t', 'trips', k);
        expect(list.map((p) => p.event.n)).toEqual(['5x', '20a', '20b', '30a', '1700000000000z']);
        tx.removePending('t', 'trips', k, e(20, 'a'));
        tx.removePending('t', 'trips', k, e(5, 'x'));
        expect((await tx.pending('t', 'trips', k)).map((p) => `${p.acceptedAt}${p.eventKey}`)).toEqual(['20b', '30a', '1700000000000z']);
        expect(await tx.pending('t2', 'trips', k)).toEqual([]);
      });
      await store.unit(async (tx) => expect(await tx.pending('t', 'trips', k)).toHaveLength(3));
    });

    it('what a unit committed is there for another store on the same data', async () => {
      const f = await open();
      const k = randomUUID();
      await f.store.unit(async (tx) => tx.put('t', doc('trips', k, 3, { durable: true })));
      const again = await f.reopen();
      expect(body(await again.get('t', 'trips', k))).toEqual({ durable: true });
    });

    it('a read after a unit resolved sees its writes, also when the entity was read just before and during the commit', async () => {
      const { store } = await open();
      const keys = Array.from({ length: 20 }, () => randomUUID());
      await store.unit(async (tx) => keys.forEach((k) => tx.put('t', doc('trips', k, 0, { v: 1 }))));
      for (let round = 2; round <= 6; round++) {
        // Read every entity (an adapter may keep what it read) before the unit and while it commits.
        for (const k of keys) expect(body(await store.get('t', 'trips', k))).toEqual({ v: round - 1 });
        const committing = store.unit(async (tx) => {
          for (const k of keys) {
            if (round === 4) tx.delete('t', 'trips', k);
            else tx.put('t', doc('trips', k, round === 5 ? 0 : round % 2, { v: round }));
          }
        });
        let reads = 0;
        let done = false;
        void committing.then(
          () => (done = true),
          () => (done = true),
        );
        while (!done) {
          await Promise.all(keys.map((k) => store.get('t', 'trips', k)));
          reads++;
          await new Promise((resolve) => setImmediate(resolve)); // let the commit's I/O in
        }
        await committing;
        expect(reads).toBeGreaterThan(0);
        for (const k of keys) {
          if (round === 4) expect(await store.get('t', 'trips', k)).toBeUndefined();
          else expect(body(await store.get('t', 'trips', k))).toEqual({ v: round });
        }
        if (round === 4) await store.unit(async (tx) => keys.forEach((k) => tx.put('t', doc('trips', k, 0, { v: 4 }))));
      }
    });

    it("the feed's head: a read after it gives exactly the changes made since, of that tenant", async () => {
      const { store } = await open();
      const tenant = `head-${randomUUID().slice(0, 8)}`;
      // An empty feed has a head too, and a read after it is not expired.
      const empty = await store.feed.head(tenant);
      expect((await store.feed.read({ tenant, after: empty, limit: 10 })).entries).toEqual([]);
      const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
      await store.unit(async (tx) => tx.put(tenant, doc('trips', a, 0, { a: 1 })));
      const afterA = await store.feed.head(tenant);
      expect(afterA).not.toBe(empty);
      expect(await store.feed.head(tenant)).toBe(afterA);
      // Another tenant's changes move only its own head.
      await store.unit(async (tx) => tx.put(`${tenant}-other`, doc('trips', randomUUID(), 0, { other: true })));
      expect(await store.feed.head(tenant)).toBe(afterA);
      await store.unit(async (tx) => {
        tx.put(tenant, doc('vehicles', b, 0, { b: 1 }));
        tx.delete(tenant, 'trips', a);
      });
      await store.unit(async (tx) => tx.put(tenant, doc('trips', c, 0, { c: 1 })));
      const since = await store.feed.read({ tenant, after: afterA, limit: 10 });
      expect(since.entries.map((e) => `${e.op} ${e.kind} ${e.key}`)).toEqual([`put vehicles ${b}`, `delete trips ${a}`, `put trips ${c}`]);
      // The head is the newest change: its cursor.
      expect(await store.feed.head(tenant)).toBe(since.entries[2]!.cursor);
      expect((await store.feed.read({ tenant, after: await store.feed.head(tenant), limit: 10 })).entries).toEqual([]);
      // From the start, the first change is the one after the empty feed's head.
      expect((await store.feed.read({ tenant, after: empty, limit: 1 })).entries[0]).toMatchObject({ op: 'put', key: a });
    });

    it('is ready', async () => {
      const { store } = await open();
      expect(await store.ready()).toBe(true);
    });
  });
}
