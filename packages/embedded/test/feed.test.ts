/** The change feed of the embedded stores (feed.ts): order across entity units and telemetry writes, kinds, cursors, retention. */
import { describe, expect, it } from 'vitest';
import { OtmServiceError, type DocumentWrite, type FeedEntry, type FeedRead } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { useTempStores, type EmbeddedStores } from './event-log/helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

const stamp = { modified: 0, acceptedAt: 1 };
const putEntity = (s: EmbeddedStores, kind: KindSegment, key: string, json: string, tenant = 't') =>
  s.entities.unit(async (tx) => tx.put(tenant, { kind, key, lifecycleRank: 0, json, stamp }));
const deleteEntity = (s: EmbeddedStores, kind: KindSegment, key: string) => s.entities.unit(async (tx) => tx.delete('t', kind, key));
const event = (key: string, json = `{"id":"${key}","eventType":"sensorUpdateEvent"}`, rank = 0): DocumentWrite => ({
  op: 'put',
  tenant: 't',
  doc: { kind: 'events', key, lifecycleRank: rank, json, stamp: { modified: 0, acceptedAt: 1 } },
});
/** Waits until the event log's index commit (which writes its feed entries) is done. */
const indexed = (s: EmbeddedStores) => (s.events as unknown as { writer: { flush(): Promise<void> } }).writer.flush();

/** Every entry of the feed, read in pages of `limit`. */
async function readAll(s: EmbeddedStores, q: Omit<FeedRead, 'limit' | 'after'> = { tenant: 't' }, limit = 3): Promise<FeedEntry[]> {
  const out: FeedEntry[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await s.entities.feed.read({ ...q, limit, ...(after === undefined ? {} : { after }) });
    out.push(...page.entries);
    if (page.next === undefined) return out;
    after = page.next;
  }
}
const brief = (e: FeedEntry) => `${e.op} ${e.kind} ${e.key}`;
const error = async (p: Promise<unknown>) =>
  (await p.then(
    () => undefined,
    (e: unknown) => e,
  )) as OtmServiceError;

describe('embedded change feed', () => {
  it('gives every change of entity units and telemetry writes once, in the order they were applied', async () => {
    const s = openAt(tmp());
    await putEntity(s, 'trips', 'a', '{"id":"a"}');
    await s.events.write([event('e1'), event('e2')]);
    await indexed(s);
    await deleteEntity(s, 'trips', 'a');
    await s.events.write([{ op: 'delete', tenant: 't', kind: 'events', key: 'e1' }]);
    await indexed(s);
    await s.entities.unit(async (tx) => {
      tx.put('t', { kind: 'actions', key: 'x', lifecycleRank: 2, json: '{"id":"x","lifecycle":"planned"}', stamp });
      tx.put('t', { kind: 'vehicles', key: 'v', lifecycleRank: 0, json: '{"id":"v"}', stamp });
    });
    await putEntity(s, 'trips', 'other-tenant', '{}', 'u');

    const all = await readAll(s);
    expect(all.map(brief)).toEqual([
      'put trips a',
      'put events e1',
      'put events e2',
      'delete trips a',
      'delete events e1',
      'put actions x',
      'put vehicles v',
    ]);
    const seqs = all.map((e) => Number(e.cursor));
    for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBeGreaterThan(seqs[i - 1]!);
    // The entity store's puts carry their document; telemetry puts and deletes none.
    expect(all[0]).toMatchObject({ op: 'put', kind: 'trips', key: 'a', lifecycleRank: 0, doc: '{"id":"a"}' });
    expect(all[1]!.doc).toBeUndefined();
    expect(all[1]!.lifecycleRank).toBe(0);
    expect(all[3]!.doc).toBeUndefined();
    expect(all[3]!.lifecycleRank).toBeUndefined();
    expect(all[5]).toMatchObject({ lifecycleRank: 2, doc: '{"id":"x","lifecycle":"planned"}' });
    for (const e of all) expect(e.at).toBeGreaterThan(Date.now() - 60_000);
    // The other tenant's feed is its own.
    expect((await readAll(s, { tenant: 'u' })).map(brief)).toEqual(['put trips other-tenant']);
    // Resuming after any entry gives what follows it.
    const page = await s.entities.feed.read({ tenant: 't', after: all[2]!.cursor, limit: 2 });
    expect(page.entries.map(brief)).toEqual(['delete trips a', 'delete events e1']);
    expect(page.next).toBe(all[4]!.cursor);
    // At the end: nothing, and no next.
    expect(await s.entities.feed.read({ tenant: 't', after: all[6]!.cursor, limit: 5 })).toEqual({ entries: [] });
  });

  it('numbers changes in commit order when units and event writes run at the same time', async () => {
    const s = openAt(tmp());
    const work: Promise<unknown>[] = [];
    for (let i = 0; i < 40; i++) {
      work.push(putEntity(s, 'trips', `t${i}`, `{"n":${i}}`));
      work.push(s.events.write([event(`e${i}`)]));
    }
    await Promise.all(work);
    await indexed(s);
    const all = await readAll(s, { tenant: 't' }, 7);
    expect(all).toHaveLength(80);
    expect(new Set(all.map(brief)).size).toBe(80);
    const seqs = all.map((e) => Number(e.cursor));
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
    // Units commit in the order they were made.
    const trips = all.filter((e) => e.kind === 'trips').map((e) => e.key);
    expect(trips).toEqual(Array.from({ length: 40 }, (_, i) => `t${i}`));
  });

  it('filters by kind, and goes on through long runs of other kinds (next: the last entry looked at)', async () => {
    const s = openAt(tmp());
    await s.events.write(Array.from({ length: 100 }, (_, i) => event(`e${i}`)));
    await indexed(s);
    await putEntity(s, 'trips', 'late', '{}');
    const first = await s.entities.feed.read({ tenant: 't', kinds: new Set(['trips']), limit: 2 });
    // 2 asked for: at most 40 looked at, none of them a trip.
    expect(first.entries).toEqual([]);
    expect(first.next).toBe('40');
    const trips = await readAll(s, { tenant: 't', kinds: new Set(['trips']) }, 2);
    expect(trips.map(brief)).toEqual(['put trips late']);
    const both = await readAll(s, { tenant: 't', kinds: new Set(['trips', 'events']) }, 50);
    expect(both).toHaveLength(101);
  });

  it('refuses a cursor it did not give with invalidDocument (400) naming the cursor', async () => {
    const s = openAt(tmp());
    for (const after of ['abc', '', '-1', '1.5', '12345678901234567', ' 1']) {
      const e = await error(s.entities.feed.read({ tenant: 't', after, limit: 1 }));
      expect(e, after).toBeInstanceOf(OtmServiceError);
      expect(e.status).toBe(400);
      expect(e.items).toEqual([expect.objectContaining({ type: 'invalidField', field: 'cursor' })]);
    }
    expect(await s.entities.feed.read({ tenant: 't', after: '0000000000000000', limit: 1 })).toEqual({ entries: [] });
  });

  it('removes entries older than the retention; a cursor before them is expired (410), and numbers never go back', async () => {
    const dir = tmp();
    const s = openAt(dir, { feedRetentionMs: 60_000 });
    await putEntity(s, 'trips', 'a', '{}');
    await putEntity(s, 'trips', 'b', '{}');
    await putEntity(s, 'trips', 'a', '{}', 'u');
    const [a, b] = await readAll(s);
    // Nothing is old enough yet.
    expect(await s.sweepFeed()).toBe(0);
    // A minute and more later: everything goes.
    expect(await s.sweepFeed(Date.now() + 61_000)).toBe(3);
    expect((await s.entities.feed.read({ tenant: 't', limit: 5 })).entries).toEqual([]);
    const expired = await error(s.entities.feed.read({ tenant: 't', after: a!.cursor, limit: 5 }));
    expect(expired).toMatchObject({ status: 410, code: 'cursorExpired' });
    // A cursor at the last change removed misses nothing: not expired.
    expect(await s.entities.feed.read({ tenant: 't', after: b!.cursor, limit: 5 })).toEqual({ entries: [] });
    // The head of a feed retention emptied is that change (a read after it is not expired).
    expect(await s.entities.feed.head('t')).toBe(b!.cursor);
    expect(await s.entities.feed.head('v')).toBe('0');
    // The other tenant's floor is its own.
    expect(await s.entities.feed.read({ tenant: 'v', after: '1', limit: 5 })).toEqual({ entries: [] });

    await closeIt(s);
    // Reopened with everything removed: numbers go on from where they were.
    const again = openAt(dir, { feedRetentionMs: 60_000 });
    await putEntity(again, 'trips', 'c', '{}');
    const [c] = (await again.entities.feed.read({ tenant: 't', after: b!.cursor, limit: 5 })).entries;
    expect(c).toMatchObject({ key: 'c' });
    expect(Number(c!.cursor)).toBeGreaterThan(3);
    expect((await again.entities.feed.read({ tenant: 't', limit: 5 })).entries.map(brief)).toEqual(['put trips c']);
  });

  it('removes only what is older than the retention, oldest first', async () => {
    const s = openAt(tmp(), { feedRetentionMs: 60_000 });
    for (let i = 0; i < 5; i++) await putEntity(s, 'trips', `old${i}`, '{}');
    const cutoff = Date.now();
    await new Promise((r) => setTimeout(r, 5));
    for (let i = 0; i < 3; i++) await putEntity(s, 'trips', `new${i}`, '{}');
    const before = await readAll(s);
    expect(await s.sweepFeed(cutoff + 60_001)).toBe(5);
    expect((await readAll(s)).map((e) => e.key)).toEqual(['new0', 'new1', 'new2']);
    await expect(s.entities.feed.read({ tenant: 't', after: before[3]!.cursor, limit: 1 })).rejects.toMatchObject({ status: 410 });
    expect((await s.entities.feed.read({ tenant: 't', after: before[4]!.cursor, limit: 1 })).entries.map((e) => e.key)).toEqual(['new0']);
  });

  it('keeps the feed across a reopen and numbers on from the largest', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await putEntity(s, 'trips', 'a', '{}');
    await s.events.write([event('e1')]);
    await closeIt(s);
    const again = openAt(dir);
    await putEntity(again, 'trips', 'b', '{}');
    const all = await readAll(again);
    expect(all.map(brief)).toEqual(['put trips a', 'put events e1', 'put trips b']);
    expect(all.map((e) => e.cursor)).toEqual(['1', '2', '3']);
  });

  it('beside another entity store: the event log records no feed entries; the telemetry side effects do, in one transaction', async () => {
    const s = openAt(tmp(), { telemetryEffects: false });
    expect(s.events.keepsTelemetryEffects).toBe(false);
    await s.events.write([event('e1')]);
    await indexed(s);
    expect((await s.entities.feed.read({ tenant: 't', limit: 5 })).entries).toEqual([]);
    await s.entities.telemetry.appendFeed([
      { tenant: 't', kind: 'events', key: 'e1', lifecycleRank: 3, op: 'put' },
      { tenant: 't', kind: 'events', key: 'e0', lifecycleRank: 0, op: 'delete' },
    ]);
    const all = await readAll(s);
    expect(all.map(brief)).toEqual(['put events e1', 'delete events e0']);
    expect(all[0]).toMatchObject({ lifecycleRank: 3 });
    expect(all[0]!.doc).toBeUndefined();
    // Lists of events are the event log's own, kept either way.
    expect(await s.events.list({ tenant: 't', kind: 'events', facet: 'eventType=sensorUpdateEvent', limit: 5 })).toEqual([
      { at: 1, key: 'e1' },
    ]);
  });

  it("stores the event log's changes of one index commit as one entry a tenant; reads resume inside it, in order", async () => {
    const s = openAt(tmp());
    await putEntity(s, 'trips', 'before', '{}');
    const mixed: DocumentWrite[] = [];
    for (let i = 0; i < 10; i++) mixed.push(event(`e${i}`), { ...event(`u${i}`), tenant: 'u' });
    mixed.push({ op: 'delete', tenant: 't', kind: 'events', key: 'e3' }, event('e3b', undefined, 4));
    await s.events.write(mixed);
    await indexed(s);
    await putEntity(s, 'trips', 'after', '{}');
    // One LMDB entry for each tenant's changes of that commit, between the units' own.
    const root = (s.events as unknown as { opts: { root: { openDB(o: object): { getKeys(o: object): Iterable<string> } } } }).opts.root;
    const keys = [...root.openDB({ name: 'feed', encoding: 'string' }).getKeys({ start: 't|', end: 't|~' })];
    expect(keys).toHaveLength(3);
    expect([...root.openDB({ name: 'feed', encoding: 'string' }).getKeys({ start: 'u|', end: 'u|~' })]).toHaveLength(1);

    const all = await readAll(s, { tenant: 't' }, 3);
    expect(all.map(brief)).toEqual([
      'put trips before',
      ...Array.from({ length: 10 }, (_, i) => `put events e${i}`),
      'delete events e3',
      'put events e3b',
      'put trips after',
    ]);
    // Numbered one after the other (the other tenant's changes of the commit have the next numbers),
    // each with its own cursor, rank and time.
    const seqs = all.map((e) => Number(e.cursor));
    for (let i = 1; i < 13; i++) expect(seqs[i]).toBe(seqs[i - 1]! + 1);
    expect(seqs[13]).toBe(seqs[12]! + 11);
    expect(all[11]).toEqual({ cursor: all[11]!.cursor, at: all[1]!.at, op: 'delete', kind: 'events', key: 'e3' });
    // A put keeps where the log wrote its document: the index's position of that version.
    const lookup = (k: string) => (s.events as unknown as { writer: { lookup(k: string): unknown } }).writer.lookup(k);
    expect(all[12]).toEqual({
      cursor: all[12]!.cursor,
      at: all[1]!.at,
      op: 'put',
      kind: 'events',
      key: 'e3b',
      lifecycleRank: 4,
      logged: { ...(lookup('t|events|e3b|4') as object) },
    });
    for (let i = 1; i <= 10; i++) {
      // e3 is deleted since (the index forgot it): its put still says where it was written.
      if (i === 4)
        expect(all[i]!.logged).toEqual({
          seg: 1,
          gen: 0,
          off: expect.any(Number) as number,
          len: Buffer.byteLength('{"id":"e3","eventType":"sensorUpdateEvent"}'),
        });
      else expect(all[i]!.logged).toEqual({ ...(lookup(`t|events|e${i - 1}|0`) as object) });
    }
    // Resuming after any change gives what follows it, also from inside the entry.
    for (const i of [0, 1, 5, 10, 11, 12]) {
      const page = await s.entities.feed.read({ tenant: 't', after: all[i]!.cursor, limit: 2 });
      expect(page.entries.map(brief), `after ${i}`).toEqual(all.slice(i + 1, i + 3).map(brief));
      expect(page.next).toBe(all[Math.min(i + 2, all.length - 1)]!.cursor);
    }
    // Kinds are filtered inside it (the test above: at most 20 changes looked at for each asked for).
    const trips = await s.entities.feed.read({ tenant: 't', kinds: new Set(['trips']), after: all[0]!.cursor, limit: 1 });
    expect(trips.entries.map(brief)).toEqual(['put trips after']);
    // The other tenant's entry holds its changes only, numbered among the others.
    expect((await readAll(s, { tenant: 'u' })).map(brief)).toEqual(Array.from({ length: 10 }, (_, i) => `put events u${i}`));
    expect(await s.entities.feed.head('t')).toBe(all.at(-1)!.cursor);
  });

  it('reads blocks written without places in the log (puts as `p` lines) as puts to look up', async () => {
    const s = openAt(tmp());
    const root = (s.events as unknown as { opts: { root: { openDB(o: object): { putSync(k: string, v: string): void } } } }).opts.root;
    root
      .openDB({ name: 'feed', encoding: 'string' })
      .putSync('t|0000000000000003', '@1700000000000 3\np0events|x\nd0events|y\nq4a.0.1z.b:events|z');
    const all = await readAll(s);
    expect(all).toEqual([
      { cursor: '1', at: 1700000000000, op: 'put', kind: 'events', key: 'x', lifecycleRank: 0 },
      { cursor: '2', at: 1700000000000, op: 'delete', kind: 'events', key: 'y' },
      {
        cursor: '3',
        at: 1700000000000,
        op: 'put',
        kind: 'events',
        key: 'z',
        lifecycleRank: 4,
        logged: { seg: 10, gen: 0, off: 71, len: 11 },
      },
    ]);
  });

  it('keeps a change whose key a block cannot hold as an entry of its own, in its place', async () => {
    const s = openAt(tmp());
    await s.events.write([event('a'), event('b\nc'), event('d')]);
    await indexed(s);
    const all = await readAll(s);
    expect(all.map((e) => e.key)).toEqual(['a', 'b\nc', 'd']);
    expect(all.map((e) => e.cursor)).toEqual(['1', '2', '3']);
  });

  it("removes a commit's changes together when they are older than the retention, counting each", async () => {
    const dir = tmp();
    const s = openAt(dir, { feedRetentionMs: 60_000 });
    await s.events.write(Array.from({ length: 5 }, (_, i) => event(`e${i}`)));
    await indexed(s);
    const cutoff = Date.now();
    await new Promise((r) => setTimeout(r, 5));
    await s.events.write([event('late')]);
    await indexed(s);
    const before = await readAll(s);
    expect(await s.sweepFeed(cutoff + 60_001)).toBe(5);
    expect((await readAll(s)).map((e) => e.key)).toEqual(['late']);
    // A cursor inside what was removed is expired; at its last change, not.
    await expect(s.entities.feed.read({ tenant: 't', after: before[3]!.cursor, limit: 1 })).rejects.toMatchObject({ status: 410 });
    expect((await s.entities.feed.read({ tenant: 't', after: before[4]!.cursor, limit: 1 })).entries.map((e) => e.key)).toEqual(['late']);
    await closeIt(s);
    // Numbers go on from the largest after a reopen.
    const again = openAt(dir, { feedRetentionMs: 60_000 });
    await putEntity(again, 'trips', 'x', '{}');
    expect((await readAll(again)).map((e) => e.cursor)).toEqual(['6', '7']);
  });
});
