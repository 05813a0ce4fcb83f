/**
 * The shared reading of a tenant's feed (shared-feed.ts) against a feed in memory:
 * each page read once for the readers that come by, readers that join inside a page, kinds, what
 * is kept and dropped, failures, reading ahead. What every reader gets is what it would read alone.
 */
import { describe, expect, it } from 'vitest';
import type { KindSegment } from '@otm/model';
import { MemorySource, eventKey, locationOf, tripKey, vehicleKey } from '../../../test/fixtures/memory-feed.js';
import {
  DEFAULT_SHARED_FEED_OPTIONS,
  ErrorCode,
  SharedChange,
  SharedFeed,
  changeFacts,
  changeItem,
  parseChangeDocument,
  type FeedEntry,
  type FeedReader,
} from '../src/index.js';

/** A tenant's feed of `n` changes: vehicles, trips (some deleted), location events. */
function fill(source: MemorySource, tenant: string, n: number, from = 0): void {
  for (let i = from; i < from + n; i++) {
    if (i % 10 === 0) source.append(tenant, 'vehicles', vehicleKey(i % 7), { id: vehicleKey(i % 7), name: `v${i}` });
    else if (i % 10 === 1) source.append(tenant, 'trips', tripKey(i), undefined, i % 20 === 1 ? 'delete' : 'put');
    else source.append(tenant, 'events', eventKey(i), locationOf(i, i % 7));
  }
}

/** Everything a reader reads after `after` up to the feed's end, by reading on. */
async function readAll(r: FeedReader, after: string | undefined, kinds?: ReadonlySet<KindSegment>): Promise<FeedEntry[]> {
  const out: FeedEntry[] = [];
  for (let at = after, more = true; more;) {
    const slice = await r.read(at);
    for (const c of slice.changes) if (kinds === undefined || kinds.has(c.entry.kind)) out.push(c.entry);
    more = slice.more && slice.next !== at;
    if (slice.next !== undefined) at = slice.next;
  }
  return out;
}

const options = { ...DEFAULT_SHARED_FEED_OPTIONS, pageSize: 10 };

describe('SharedFeed', () => {
  it('reads each page once for readers in step, keeps it until all took it, and makes items and facts once', async () => {
    const source = new MemorySource();
    fill(source, 't', 95);
    fill(source, 'other', 30);
    const feed = new SharedFeed(source, options);
    const readers = Array.from({ length: 20 }, () => feed.join('t', undefined));
    const got = await Promise.all(readers.map((r) => readAll(r, undefined)));
    for (const g of got) expect(g.map((e) => e.cursor)).toEqual(source.of('t').map((e) => e.cursor));
    // 10 pages (the last one not full) and one read at the end that found nothing, shared while under way.
    expect(source.reads).toBeLessThanOrEqual(12);
    expect(source.documentEntries).toBe(95);
    expect(feed.kept.size).toBe(0);
    expect(feed.keptBytes).toBe(0);

    // Items and facts: as GET /api/v5/changes and the filters make them; the same object for every reader.
    const a = await feed.join('t', undefined).read('40');
    const b = await feed.join('t', undefined).read('40');
    const c = a.changes.find((x) => x.entry.kind === 'events')!;
    expect(b.changes).toContain(c);
    // Every kind of item: a put kept with its entry (a string), one read (bytes), with and without a lifecycle, a delete.
    for (const x of [...a.changes, ...(await feed.join('t', undefined).read(undefined)).changes]) {
      expect(x.item().toString('utf8')).toBe(changeItem(x.entry, x.doc).toString('utf8'));
      expect(x.itemLength()).toBe(x.item().length);
    }
    const unicode = new SharedChange(
      { cursor: '7', at: 1, op: 'put', kind: 'vehicles', key: 'é"\\', lifecycleRank: 0 },
      '{"name":"Zürich ✓"}',
    );
    expect(unicode.item().equals(changeItem(unicode.entry, unicode.doc))).toBe(true);
    // Ids and cursors that are their own JSON, and those that are not (quoted or escaped by JSON.stringify).
    for (const [cursor, key] of [
      ['1700000000000-3', 'urn:otm:vehicle:7 ~ {x}'],
      ['12', 'tab\there'],
      ['12', 'del\u007f'],
      ['12', 'nul\u0000'],
      ['"q"', 'plain'],
      ['12', '\u2028line'],
    ]) {
      const x = new SharedChange({ cursor: cursor!, at: 1, op: 'put', kind: 'events', key: key!, lifecycleRank: 3 }, Buffer.from('{}'));
      expect(x.item().equals(changeItem(x.entry, x.doc)), `${cursor} ${key}`).toBe(true);
      expect(x.itemLength()).toBe(x.item().length);
    }
    expect(c.facts()).toEqual(changeFacts('events', c.entry.key, parseChangeDocument(c.doc)));
    expect(c.facts()).toBe(c.facts());
    for (const r of readers) r.close(feed);
  });

  it('gives a reader whose cursor is inside a page kept the rest of that page, then the next pages: one reading again', async () => {
    const source = new MemorySource();
    fill(source, 't', 60);
    const feed = new SharedFeed(source, options);
    const ahead = feed.join('t', undefined);
    const behind = feed.join('t', undefined);
    const late = feed.join('t', undefined);
    await ahead.read(undefined); // 1..10
    await ahead.read('10'); // 11..20
    const reads = source.reads;
    // Inside the first page: its rest, from memory.
    const first = await behind.read('4');
    expect(first.changes.map((c) => c.entry.cursor)).toEqual(['5', '6', '7', '8', '9', '10']);
    expect(first.next).toBe('10');
    expect(first.more).toBe(true);
    expect((await behind.read('10')).changes.map((c) => c.entry.cursor)[0]).toBe('11');
    expect(source.reads).toBe(reads);
    // The first page: taken by two of three readers, still kept; by the third, dropped.
    expect(feed.kept.size).toBe(2);
    expect((await late.read('9')).changes.map((c) => c.entry.cursor)).toEqual(['10']);
    expect(feed.kept.size).toBe(1);
    // The last change of a page: the next read goes on after it (read once more from the feed, or kept).
    expect((await late.read('20')).changes[0]!.entry.cursor).toBe('21');
    // A cursor no page kept holds: read from the feed.
    expect((await late.read('33')).changes[0]!.entry.cursor).toBe('34');
    expect(source.reads).toBe(reads + 2);
    for (const r of [ahead, behind, late]) r.close(feed);
    expect(feed.size).toBe(0);
  });

  it("reads the kinds the tenant's readers take; a page of fewer kinds is not given to a reader of more", async () => {
    const source = new MemorySource();
    fill(source, 't', 100);
    const feed = new SharedFeed(source, options);
    const trips = feed.join('t', new Set(['trips']));
    const tripsOnly = await readAll(trips, undefined, new Set(['trips']));
    expect(tripsOnly.map((e) => e.cursor)).toEqual(
      source
        .of('t')
        .filter((e) => e.kind === 'trips')
        .map((e) => e.cursor),
    );
    expect(source.readKinds.every((k) => k?.join() === 'trips')).toBe(true);
    // A reader of every kind comes: reads take every kind; the trips reader skips the others.
    const all = feed.join('t', undefined);
    source.readKinds.length = 0;
    const [everything, again] = await Promise.all([readAll(all, undefined), readAll(trips, undefined, new Set(['trips']))]);
    expect(everything).toHaveLength(100);
    expect(again.map((e) => e.cursor)).toEqual(tripsOnly.map((e) => e.cursor));
    expect(source.readKinds.every((k) => k === undefined)).toBe(true);
    // A page of trips only, kept: not for a reader of events.
    all.close(feed);
    const t2 = feed.join('t', new Set(['trips']));
    await t2.read('50');
    const events = feed.join('t', new Set(['events']));
    const slice = await events.read('50');
    expect(slice.changes.some((c) => c.entry.kind === 'events')).toBe(true);
    for (const r of [trips, t2, events]) r.close(feed);
  });

  it('keeps at most maxBytes of pages (the least recently used go), and pages no older than maxAgeMs', async () => {
    const source = new MemorySource();
    fill(source, 't', 200);
    const feed = new SharedFeed(source, { ...options, maxBytes: 8_000 });
    const a = feed.join('t', undefined);
    const b = feed.join('t', undefined);
    const got = await readAll(a, undefined);
    expect(got).toHaveLength(200);
    expect(feed.keptBytes).toBeLessThanOrEqual(8_000);
    expect(feed.kept.size).toBeGreaterThan(0);
    // The one behind gets everything all the same, reading again what was dropped.
    expect((await readAll(b, undefined)).map((e) => e.cursor)).toEqual(got.map((e) => e.cursor));
    a.close(feed);
    b.close(feed);
    expect(feed.keptBytes).toBe(0);

    const young = new SharedFeed(source, { ...options, maxAgeMs: 20 });
    const c = young.join('t', undefined);
    const d = young.join('t', undefined);
    await c.read(undefined);
    await new Promise((r) => setTimeout(r, 30));
    const reads = source.reads;
    await d.read(undefined);
    expect(source.reads).toBe(reads + 1);
    c.close(young);
    d.close(young);
  });

  it('shares a read under way, a read ahead included; a failure reaches every reader waiting, and the next read tries again', async () => {
    const source = new MemorySource();
    fill(source, 't', 30);
    const feed = new SharedFeed(source, options);
    const a = feed.join('t', undefined);
    const b = feed.join('t', undefined);
    a.prefetch('10');
    const [x, y] = await Promise.all([a.read('10'), b.read('10')]);
    expect(source.reads).toBe(1);
    expect(x.changes).toBe(y.changes);
    // Retention removed what comes after the cursor: both are told so.
    source.floor = 25;
    const both = await Promise.allSettled([a.read('20'), b.read('20')]);
    expect(source.reads).toBe(2);
    for (const r of both) expect(r).toMatchObject({ status: 'rejected', reason: { code: ErrorCode.cursorExpired } });
    source.floor = 0;
    expect((await a.read('20')).changes).toHaveLength(10);
    // A read ahead that fails is not kept: the reader reads again and is told.
    source.floor = 31;
    const reads = source.reads;
    b.prefetch('30');
    await new Promise((r) => setTimeout(r, 10));
    await expect(b.read('30')).rejects.toMatchObject({ code: ErrorCode.cursorExpired });
    expect(source.reads).toBe(reads + 2);
    a.close(feed);
    b.close(feed);
  });

  it("reads the documents of the kinds its readers need; a reader's that came while they were read, too", async () => {
    const source = new MemorySource();
    fill(source, 't', 30);
    let gate: (() => void) | undefined;
    const asked: string[][] = [];
    const read = source.documents;
    // Documents of the entries `want` takes only (as Finder reads them); the first call held until `gate` opens.
    source.documents = async (tenant, entries, want?: (e: FeedEntry) => boolean) => {
      const taken = want === undefined ? entries : entries.filter(want);
      asked.push([...new Set(taken.map((e) => e.kind))].sort());
      if (asked.length === 1) await new Promise<void>((resolve) => (gate = resolve));
      const docs = await read(tenant, taken);
      return entries.map((e) => (taken.includes(e) ? docs[taken.indexOf(e)] : undefined));
    };
    const feed = new SharedFeed(source, options);
    let kinds: ReadonlySet<KindSegment> = new Set(['vehicles']);
    const stream = feed.join('t', undefined, () => kinds);
    const reading = stream.read(undefined);
    while (gate === undefined) await new Promise((r) => setImmediate(r));
    // A stream of events came while the documents were read: theirs are read before the page is given.
    kinds = new Set(['vehicles', 'events']);
    gate();
    const slice = await reading;
    expect(asked).toEqual([['vehicles'], ['events']]);
    expect(slice.changes).toHaveLength(10);
    for (const c of slice.changes) expect(c.doc !== undefined).toBe(c.entry.op === 'put' && c.entry.kind !== 'trips');
    expect(source.reads).toBe(1);
    stream.close(feed);
  });
});
