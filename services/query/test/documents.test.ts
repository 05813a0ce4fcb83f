/**
 * `Finder.documents` (find.ts) with an event store that reads many documents at once
 * (`documentsOf`, the embedded event log) and with one that does not (ClickHouse): the same answers
 * as `Finder.version` one at a time, the entity store asked first, entries `want` leaves out not
 * read, the events read together in one call, as bytes.
 */
import { describe, expect, it } from 'vitest';
import { changeItem, type ChangeFeed, type FeedEntry, type StoredDocument } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { Finder, type FindDeps, type ManyDocumentsReader } from '../src/find.js';

type Versions = Map<string, string>;
const id = (kind: string, key: string, rank: number) => `${kind}|${key}|${rank}`;

/** A reader of versions in memory (the highest rank when none is asked for), counting its reads. */
function reader(versions: Versions, asBytes: boolean) {
  const calls = { get: 0, many: 0, manyKeys: 0 };
  const get = (_tenant: string, kind: KindSegment, key: string, rank?: number): Promise<StoredDocument | undefined> => {
    calls.get++;
    for (const r of rank === undefined ? [5, 4, 3, 2, 1, 0] : [rank]) {
      const json = versions.get(id(kind, key, r));
      if (json !== undefined)
        return Promise.resolve({ kind, key, lifecycleRank: r, json, ...(asBytes ? { bytes: Buffer.from(json) } : {}) });
    }
    return Promise.resolve(undefined);
  };
  return { calls, get };
}

function finder(entityVersions: Versions, eventVersions: Versions, batched: boolean) {
  const entities = reader(entityVersions, false);
  const events = reader(eventVersions, true);
  const documentsOf: ManyDocumentsReader['documentsOf'] = async (tenant, kind, versions) => {
    events.calls.many++;
    events.calls.manyKeys += versions.length;
    const got = await Promise.all(versions.map((v) => events.get(tenant, kind, v.key, v.lifecycleRank)));
    events.calls.get -= versions.length;
    return got.map((d) => d?.bytes);
  };
  const unused = () => {
    throw new Error('not used here');
  };
  const deps = {
    entities: { get: entities.get, list: unused, feed: {} as ChangeFeed, positions: { positions: unused } },
    events: { get: events.get, list: unused, track: unused, ...(batched ? { documentsOf } : {}) },
  } as unknown as FindDeps;
  return { finder: new Finder(deps), entities: entities.calls, events: events.calls };
}

const entry = (cursor: number, kind: KindSegment, key: string, more: Partial<FeedEntry> = {}): FeedEntry => ({
  cursor: String(cursor),
  at: 1,
  op: 'put',
  kind,
  key,
  lifecycleRank: 0,
  ...more,
});

describe('Finder.documents', () => {
  const entityVersions: Versions = new Map([
    [id('trips', 'T', 0), '{"id":"T"}'],
    // An event kept with the entities (an update event), and one id in both stores: the entity store's wins, as `version` has it.
    [id('events', 'U', 0), '{"id":"U","eventType":"updateEvent"}'],
    [id('events', 'both', 4), '{"id":"both","from":"entities"}'],
  ]);
  const eventVersions: Versions = new Map([
    ...Array.from({ length: 20 }, (_, i): [string, string] => [id('events', `e${i}`, 4), `{"id":"e${i}","n":${i}}`]),
    [id('events', 'both', 4), '{"id":"both","from":"events"}'],
    [id('events', 'r', 2), '{"id":"r","rank":2}'],
    [id('events', 'r', 5), '{"id":"r","rank":5}'],
  ]);
  const entries: FeedEntry[] = [
    entry(1, 'trips', 'T'),
    ...Array.from({ length: 20 }, (_, i) => entry(2 + i, 'events', `e${(i * 7) % 20}`, { lifecycleRank: 4 })),
    entry(30, 'events', 'U'),
    entry(31, 'events', 'both', { lifecycleRank: 4 }),
    entry(32, 'events', 'r', { lifecycleRank: 2 }),
    entry(33, 'events', 'r', { lifecycleRank: 3 }), // not stored at that rank
    entry(34, 'events', 'gone', { lifecycleRank: 4 }), // deleted since
    entry(35, 'trips', 'gone'),
    entry(36, 'events', 'e1', { op: 'delete', lifecycleRank: undefined }),
    entry(37, 'vehicles', 'V', { doc: '{"id":"V","kept":"by the feed"}' }),
    entry(38, 'events', 'e2', { lifecycleRank: 4, doc: Buffer.from('{"id":"e2","kept":true}') }),
  ];
  const text = (d: string | Buffer | undefined) => (d === undefined ? undefined : typeof d === 'string' ? d : d.toString('utf8'));

  it('answers what version answers for each entry, in order, reading the events the entity store lacks in one call', async () => {
    const one = finder(entityVersions, eventVersions, false);
    const reference = await Promise.all(
      entries.map(async (e) =>
        e.op === 'delete' ? undefined : e.doc !== undefined ? e.doc : (await one.finder.version('t', e.kind, e.key, e.lifecycleRank))?.json,
      ),
    );
    expect(reference.slice(21, 28).map(text)).toEqual([
      '{"id":"U","eventType":"updateEvent"}',
      '{"id":"both","from":"entities"}',
      '{"id":"r","rank":2}',
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    for (const batched of [false, true]) {
      const f = finder(entityVersions, eventVersions, batched);
      const got = await f.finder.documents('t', entries);
      expect(got.map(text), `batched ${batched}`).toEqual(reference.map(text));
      if (batched) {
        // Every put without its document asked of the entity store first; the events it lacks read together.
        expect(f.entities.get).toBe(27);
        expect(f.events).toEqual({ get: 0, many: 1, manyKeys: 23 });
        // Bytes as the event store read them: items made of them as of text.
        for (const [i, d] of got.entries()) {
          const e = entries[i]!;
          const fromEvents = e.kind === 'events' && e.doc === undefined && !entityVersions.has(id('events', e.key, e.lifecycleRank ?? 0));
          if (d !== undefined && fromEvents) expect(Buffer.isBuffer(d)).toBe(true);
          expect(changeItem(entries[i]!, d).toString('utf8')).toBe(changeItem(entries[i]!, text(d)).toString('utf8'));
        }
      }
    }
  });

  it('reads a put the event log wrote (logged) from the log alone, with its place: the entity store is not asked, its version does not win', async () => {
    const f = finder(entityVersions, eventVersions, true);
    const asked: Array<{ key: string; logged?: unknown }> = [];
    const deps = (f.finder as unknown as { deps: { events: ManyDocumentsReader } }).deps;
    const inner = deps.events.documentsOf.bind(deps.events);
    deps.events.documentsOf = (tenant, kind, versions) => {
      asked.push(...versions.map((v) => ({ key: v.key, logged: v.logged })));
      return inner(tenant, kind, versions);
    };
    const place = { seg: 1, gen: 0, off: 100, len: 30 };
    const logged = [
      entry(1, 'events', 'both', { lifecycleRank: 4, logged: place }),
      entry(2, 'events', 'e5', { lifecycleRank: 4, logged: { ...place, off: 200 } }),
      entry(3, 'trips', 'T'),
    ];
    const got = await f.finder.documents('t', logged);
    // The event store's version of 'both' (the one the log wrote), not the entity store's.
    expect(got.map(text)).toEqual(['{"id":"both","from":"events"}', '{"id":"e5","n":5}', '{"id":"T"}']);
    expect(f.entities.get).toBe(1);
    expect(f.events).toEqual({ get: 0, many: 1, manyKeys: 2 });
    expect(asked).toEqual([
      { key: 'both', logged: place },
      { key: 'e5', logged: { ...place, off: 200 } },
    ]);
  });

  it('reads nothing for the entries want leaves out (their document as the feed keeps it, if any), nor for deletes', async () => {
    const want = (e: FeedEntry) => e.key === 'e3' || e.key === 'T' || e.key === 'V';
    const f = finder(entityVersions, eventVersions, true);
    const got = await f.finder.documents('t', entries, want);
    const expected = entries.map((e) =>
      e.doc !== undefined ? text(e.doc) : e.key === 'e3' ? '{"id":"e3","n":3}' : e.key === 'T' ? '{"id":"T"}' : undefined,
    );
    expect(got.map(text)).toEqual(expected);
    expect(f.entities.get).toBe(2);
    expect(f.events).toEqual({ get: 0, many: 1, manyKeys: 1 });
    // Nothing to read: no call at all.
    const none = finder(entityVersions, eventVersions, true);
    expect((await none.finder.documents('t', [entry(1, 'events', 'e1', { op: 'delete', lifecycleRank: undefined })])).map(text)).toEqual([
      undefined,
    ]);
    expect(none.entities.get + none.events.many).toBe(0);
  });
});
