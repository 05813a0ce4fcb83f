/**
 * The contract of the shared reading of the feed (packages/core/src/shared-feed.ts), which the
 * stream and the dispatcher both read through, run against every source it reads: what a reader
 * gets is what reading alone gives, `GET /api/v5/changes`'s items in the feed's order, each once,
 * however many readers read together and wherever they join; a reader of some kinds gets every
 * change of those kinds; the stream's reader (every change, the documents of some kinds) gets those
 * documents; changes stored while the readers read come in the next reads.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SHARED_FEED_OPTIONS, SharedFeed, changeItem, type FeedReader, type FeedSource, type SharedChange } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { openedPerTest } from './fixture.js';

/** A change to store: a put of `doc`, or a delete when it has none. */
export interface FeedWrite {
  readonly kind: KindSegment;
  readonly key: string;
  readonly doc?: Record<string, unknown>;
}

export interface SharedFeedFixture {
  readonly source: FeedSource;
  /** Stores the changes in the tenant's feed, in order. */
  readonly write: (tenant: string, changes: readonly FeedWrite[]) => Promise<void>;
  close(): Promise<void>;
}

const KINDS: readonly KindSegment[] = ['vehicles', 'trips', 'actors'];

/** `n` changes of three kinds, every seventh a delete of the change before it. */
function changes(n: number): FeedWrite[] {
  const out: FeedWrite[] = [];
  for (let i = 0; i < n; i++) {
    const kind = KINDS[i % 3]!;
    const prev = out[i - 1];
    if (i % 7 === 6 && prev?.doc !== undefined) out.push({ kind: prev.kind, key: prev.key });
    else out.push({ kind, key: randomUUID(), doc: { id: `${kind}-${i}`, name: `é ${i}` } });
  }
  return out;
}

/** What reading alone gives after `after`: each change's item as `GET /api/v5/changes` makes it. */
async function alone(source: FeedSource, tenant: string, after: string): Promise<string[]> {
  const items: string[] = [];
  for (let at = after; ;) {
    const page = await source.feed.read({ tenant, after: at, limit: 50 });
    const docs = await source.documents(tenant, page.entries);
    page.entries.forEach((e, i) => items.push(changeItem(e, docs[i]).toString('utf8')));
    if (page.next === undefined || page.entries.length < 50) return items;
    at = page.next;
  }
}

/** Everything `r` reads after `after` up to the feed's end, the changes of `kinds` (undefined: all). */
async function readOn(r: FeedReader, after: string, kinds?: ReadonlySet<KindSegment>): Promise<SharedChange[]> {
  const out: SharedChange[] = [];
  for (let at = after, more = true; more;) {
    const slice = await r.read(at);
    for (const c of slice.changes) if (kinds === undefined || kinds.has(c.entry.kind)) out.push(c);
    more = slice.more && slice.next !== at;
    if (slice.next !== undefined) at = slice.next;
  }
  return out;
}

const text = (cs: readonly SharedChange[]) => cs.map((c) => c.item().toString('utf8'));

export function sharedFeedContract(name: string, factory: () => Promise<SharedFeedFixture>): void {
  describe(`shared feed reading contract: ${name}`, () => {
    const open = openedPerTest(factory);
    const options = { ...DEFAULT_SHARED_FEED_OPTIONS, pageSize: 8 };

    it('gives readers in step, and one that joins inside a page, what reading alone gives, each page read once', async () => {
      const { source, write } = await open();
      const tenant = `t-${randomUUID()}`;
      const start = await source.feed.head(tenant);
      await write(tenant, changes(40));
      await write(`${tenant}-other`, changes(5));
      const expected = await alone(source, tenant, start);
      expect(expected).toHaveLength(40);
      const feed = new SharedFeed(source, options);
      const readers = [0, 1, 2].map(() => feed.join(tenant, undefined));
      const got = await Promise.all(readers.map((r) => readOn(r, start)));
      for (const g of got) expect(text(g)).toEqual(expected);
      // Five full pages once for the three; the look at the end (nothing kept there) at most once each.
      expect(feed.reads).toBeLessThanOrEqual(8);
      // A reader whose cursor is the fifth change: the rest.
      const fifth = got[0]![4]!.entry.cursor;
      expect(text(await readOn(feed.join(tenant, undefined), fifth))).toEqual(expected.slice(5));
      expect(text(await readOn(feed.join(tenant, undefined), fifth))).toEqual(text(await readAlone(feed, tenant, fifth)));
    });

    it("gives a reader of some kinds every change of those kinds, and the stream's reader the documents of its kinds", async () => {
      const { source, write } = await open();
      const tenant = `t-${randomUUID()}`;
      const start = await source.feed.head(tenant);
      await write(tenant, changes(30));
      const all = await alone(source, tenant, start);
      const feed = new SharedFeed(source, options);
      const trips = new Set<KindSegment>(['trips']);
      const ofTrips = await readOn(feed.join(tenant, trips), start, trips);
      expect(text(ofTrips)).toEqual(all.filter((item) => item.includes('"kind":"trips"')));
      // Every change, the documents of vehicles: those are there, in the feed's order.
      const vehicles = new Set<KindSegment>(['vehicles']);
      const stream = feed.join(tenant, undefined, () => vehicles);
      const every = await readOn(stream, start);
      expect(every.map((c) => c.entry.cursor)).toEqual(all.map((item) => (JSON.parse(item) as { cursor: string }).cursor));
      const ofVehicles = every.filter((c) => c.entry.kind === 'vehicles');
      expect(text(ofVehicles)).toEqual(all.filter((item) => item.includes('"kind":"vehicles"')));
    });

    it('gives the changes stored while the readers read in their next reads, once, in order', async () => {
      const { source, write } = await open();
      const tenant = `t-${randomUUID()}`;
      const start = await source.feed.head(tenant);
      const feed = new SharedFeed(source, options);
      const readers = [feed.join(tenant, undefined), feed.join(tenant, new Set(['vehicles', 'trips', 'actors']))];
      const got: SharedChange[][] = [[], []];
      const at: string[] = [start, start];
      for (let round = 0; round < 5; round++) {
        const writing = write(tenant, changes(7));
        await Promise.all(
          readers.map(async (r, i) => {
            const slice = await r.read(at[i]);
            got[i]!.push(...slice.changes);
            if (slice.next !== undefined) at[i] = slice.next;
          }),
        );
        await writing;
      }
      for (const [i, r] of readers.entries()) got[i]!.push(...(await readOn(r, at[i]!)));
      const expected = await alone(source, tenant, start);
      expect(expected).toHaveLength(35);
      for (const g of got) expect(text(g)).toEqual(expected);
    });
  });
}

/** Reads on alone (`readAlone`: neither shared nor kept) after `after`. */
async function readAlone(feed: SharedFeed, tenant: string, after: string): Promise<SharedChange[]> {
  const out: SharedChange[] = [];
  for (let at = after, more = true; more;) {
    const slice = await feed.readAlone(tenant, at, undefined);
    out.push(...slice.changes);
    more = slice.more;
    if (slice.next !== undefined) at = slice.next;
  }
  return out;
}
