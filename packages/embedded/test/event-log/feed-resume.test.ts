/**
 * Reads of the change feed that resume inside a block of the event log's changes (feed.ts: a read
 * that stopped inside a block marks where, and the tenant's next read goes on from there): the same
 * answers as reading the block from its start, for readers one after the other, apart, by kinds,
 * of many tenants, and once retention removed the block.
 */
import { describe, expect, it } from 'vitest';
import type { DocumentWrite, FeedEntry, FeedRead } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { useTempStores, type EmbeddedStores } from './helpers.js';

const { tmp, openAt } = useTempStores();

const event = (key: string, tenant = 't', rank = 0): DocumentWrite => ({
  op: 'put',
  tenant,
  doc: { kind: 'events', key, lifecycleRank: rank, json: `{"id":"${key}"}`, stamp: { modified: 0, acceptedAt: 1 } },
});
const indexed = (s: EmbeddedStores) => s.events.settled();
const read = (s: EmbeddedStores, q: FeedRead) => s.entities.feed.read(q);

/** Every change after `after`, in pages of `limit`. */
async function pages(s: EmbeddedStores, limit: number, after?: string, tenant = 't', kinds?: ReadonlySet<KindSegment>) {
  const out: FeedEntry[] = [];
  for (;;) {
    const page = await read(s, { tenant, limit, ...(after === undefined ? {} : { after }), ...(kinds ? { kinds } : {}) });
    out.push(...page.entries);
    if (page.next === undefined || page.next === after) return out;
    after = page.next;
  }
}

describe('change feed: reads resuming inside a block', () => {
  /** One block of 500 changes (one index commit), with deletes and ranks, between two entity changes. */
  const filled = async () => {
    const s = openAt(tmp());
    await s.entities.unit(async (tx) =>
      tx.put('t', { kind: 'trips', key: 'before', lifecycleRank: 0, json: '{}', stamp: { modified: 0, acceptedAt: 1 } }),
    );
    const writes: DocumentWrite[] = [];
    for (let i = 0; i < 500; i++) {
      writes.push(i % 50 === 7 ? { op: 'delete', tenant: 't', kind: 'events', key: `e${i - 1}` } : event(`e${i}`, 't', i % 6));
    }
    await s.events.write(writes);
    await indexed(s);
    await s.entities.unit(async (tx) =>
      tx.put('t', { kind: 'trips', key: 'after', lifecycleRank: 0, json: '{}', stamp: { modified: 0, acceptedAt: 1 } }),
    );
    // The reference: the whole feed in one read.
    const all = (await read(s, { tenant: 't', limit: 10_000 })).entries;
    expect(all).toHaveLength(502);
    return { s, all };
  };

  it('pages of any size give the same changes, cursors, ranks and times as one read', async () => {
    const { s, all } = await filled();
    for (const limit of [1, 7, 100, 499]) expect(await pages(s, limit)).toEqual(all);
  });

  it('readers apart, interleaved (the mark of one is not where the other is), each get what follows their cursor', async () => {
    const { s, all } = await filled();
    const cursors = [0, 3, 250, 120, 479, 2, 400, 401, 130];
    for (let round = 0; round < 3; round++) {
      for (const i of cursors) {
        const at = i + round * 10;
        const page = await read(s, { tenant: 't', after: all[at]!.cursor, limit: 13 });
        expect(page.entries, `after ${at}`).toEqual(all.slice(at + 1, at + 14));
        expect(page.next).toBe(all[Math.min(at + 13, all.length - 1)]!.cursor);
      }
    }
    // From the start (no cursor), and from a cursor inside the block after reads further on.
    expect((await read(s, { tenant: 't', limit: 5 })).entries).toEqual(all.slice(0, 5));
    expect((await read(s, { tenant: 't', after: all[1]!.cursor, limit: 5 })).entries).toEqual(all.slice(2, 7));
  });

  it('filters kinds from a mark, and goes on past the block', async () => {
    const { s, all } = await filled();
    const trips = new Set<KindSegment>(['trips']);
    const events = new Set<KindSegment>(['events']);
    // A read of events stops inside the block; one of trips after it goes on from its mark to the end.
    const first = await read(s, { tenant: 't', kinds: events, after: all[0]!.cursor, limit: 10 });
    expect(first.entries).toEqual(all.slice(1, 11));
    const rest = await pages(s, 1, first.next, 't', trips);
    expect(rest.map((e) => e.key)).toEqual(['after']);
    expect(await pages(s, 33, all[0]!.cursor, 't', events)).toEqual(all.slice(1, 501));
  });

  it('keeps marks of many tenants apart', async () => {
    const s = openAt(tmp());
    const tenants = Array.from({ length: 40 }, (_, i) => `tenant-${i}`);
    await s.events.write(tenants.flatMap((t) => Array.from({ length: 30 }, (_, i) => event(`${t}-e${i}`, t))));
    await indexed(s);
    const refs = new Map<string, FeedEntry[]>();
    for (const t of tenants) refs.set(t, (await read(s, { tenant: t, limit: 100 })).entries);
    // Every tenant's reader one page at a time, in turn.
    const got = new Map<string, FeedEntry[]>(tenants.map((t) => [t, []]));
    const next = new Map<string, string | undefined>();
    for (let step = 0; step < 8; step++) {
      for (const t of tenants) {
        const after = next.get(t);
        const page = await read(s, { tenant: t, limit: 4, ...(after === undefined ? {} : { after }) });
        got.get(t)!.push(...page.entries);
        next.set(t, page.next ?? after);
      }
    }
    for (const t of tenants) expect(got.get(t)).toEqual(refs.get(t));
  });

  it('a cursor inside a marked block that retention removed is expired (410)', async () => {
    const s = openAt(tmp(), { feedRetentionMs: 60_000 });
    await s.events.write(Array.from({ length: 50 }, (_, i) => event(`e${i}`)));
    await indexed(s);
    const cutoff = Date.now();
    await new Promise((r) => setTimeout(r, 5));
    await s.events.write([event('late')]);
    await indexed(s);
    const first = await read(s, { tenant: 't', limit: 10 });
    expect(first.entries).toHaveLength(10);
    expect(await s.sweepFeed(cutoff + 60_001)).toBe(50);
    await expect(read(s, { tenant: 't', after: first.next, limit: 10 })).rejects.toMatchObject({ status: 410 });
    expect((await read(s, { tenant: 't', limit: 10 })).entries.map((e) => e.key)).toEqual(['late']);
  });
});

describe('change feed: entries of their own (the entity store’s changes)', () => {
  it('reads back every key, rank, time and document as written, keys that need escaping included', async () => {
    const s = openAt(tmp());
    const keys = ['plain', 'q"uote', 'back\\slash', 'x","rank":7,"y":"', 'line\nbreak', 'tab\tand\u0001', 'zürich 🚚', '\ud800lone', ''];
    const stamp = { modified: 0, acceptedAt: 1 };
    for (const [i, key] of keys.entries()) {
      await s.entities.unit(async (tx) =>
        tx.put('t', { kind: 'trips', key, lifecycleRank: i % 6, json: `{"id":${JSON.stringify(key)},"n":"a\nb"}`, stamp }),
      );
    }
    await s.entities.unit(async (tx) => tx.delete('t', 'trips', 'q"uote'));
    const got = await pages(s, 4);
    expect(got.map((e) => [e.op, e.kind, e.key, e.lifecycleRank, e.doc])).toEqual([
      ...keys.map((key, i) => ['put', 'trips', key, i % 6, `{"id":${JSON.stringify(key)},"n":"a\nb"}`]),
      ['delete', 'trips', 'q"uote', undefined, undefined],
    ]);
    for (const e of got) {
      expect(Number.isFinite(e.at)).toBe(true);
      expect('lifecycleRank' in e).toBe(e.op === 'put');
      expect('doc' in e).toBe(e.op === 'put');
    }
  });
});
