/**
 * The event log's batched read (store.ts `documentsOf`, segments.ts `readMany`): what `get` answers
 * for each version asked, in the order asked, read with one `pread` a run of adjacent records
 * (bounded), also across segments, generations and a compaction's move.
 */
import fs from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { del, doc, put, useTempStores, type EmbeddedStores, type EmbeddedStoreOptions } from './helpers.js';
import { RUN_GAP_BYTES, RUN_MAX_BYTES, type SegmentFiles } from '../../src/event-log/segments.js';
import type { Pos } from '../../src/event-log/index-writer.js';

const { tmp, openAt } = useTempStores();

afterEach(() => {
  vi.restoreAllMocks();
});

type Version = { key: string; lifecycleRank?: number };
const many = (s: EmbeddedStores, versions: readonly Version[], tenant = 't') => s.events.documentsOf(tenant, 'events', versions);
const text = (b: Buffer | undefined) => b?.toString('utf8');
/** What `get` answers for each, one at a time. */
const oneByOne = async (s: EmbeddedStores, versions: readonly Version[]) =>
  Promise.all(versions.map(async (v) => (await s.events.get('t', 'events', v.key, v.lifecycleRank))?.json));
const internals = (s: EmbeddedStores) =>
  s.events as unknown as { segments: SegmentFiles; writer: { lookup(k: string): Pos | undefined; flush(): Promise<void> } };
/** The lengths of the reads of segment files while `fn` runs (fs.readSync: the synchronous preads). */
async function readsOf<T>(fn: () => Promise<T>): Promise<{ result: T; reads: number[] }> {
  const reads: number[] = [];
  const real = fs.readSync;
  const spy = vi.spyOn(fs, 'readSync').mockImplementation(((fd: number, buf: Buffer, ...rest: unknown[]) => {
    const n = (real as (...a: unknown[]) => number)(fd, buf, ...rest);
    reads.push(n);
    return n;
  }) as typeof fs.readSync);
  try {
    return { result: await fn(), reads };
  } finally {
    spy.mockRestore();
  }
}

describe('event log: documents of many versions at once', () => {
  it('answers what get answers, in the order asked: ranks given or the latest, missing and deleted ones undefined, a key asked twice twice', async () => {
    const s = openAt(tmp());
    await s.events.write(Array.from({ length: 50 }, (_, i) => put(`e${i}`, doc(i), 4)));
    await s.events.write([put('e3', doc(103), 2), put('e4', doc(104), 5)]);
    await s.events.write([del('e7'), del('e9')]);
    const asked: Version[] = [
      { key: 'e10', lifecycleRank: 4 },
      { key: 'e2', lifecycleRank: 4 },
      { key: 'nope', lifecycleRank: 4 },
      { key: 'e3', lifecycleRank: 2 },
      { key: 'e3', lifecycleRank: 4 },
      { key: 'e4' }, // the latest: rank 5
      { key: 'e5', lifecycleRank: 1 }, // not that rank
      { key: 'e7', lifecycleRank: 4 }, // deleted
      { key: 'e9' }, // deleted
      { key: 'e10', lifecycleRank: 4 },
      { key: 'e49', lifecycleRank: 4 },
    ];
    const expected = [doc(10), doc(2), undefined, doc(103), doc(3), doc(104), undefined, undefined, undefined, doc(10), doc(49)];
    // Before the index commit (positions in memory), after it, and after a reopen.
    expect((await many(s, asked)).map(text)).toEqual(expected);
    await s.events.settled();
    const got = await many(s, asked);
    expect(got.map(text)).toEqual(expected);
    expect(await oneByOne(s, asked)).toEqual(expected);
    for (const b of got) if (b !== undefined) expect(Buffer.isBuffer(b)).toBe(true);
    expect(await many(s, [])).toEqual([]);
    // Under another tenant: none of them.
    expect(await many(s, asked, 'u')).toEqual(asked.map(() => undefined));
  });

  it('reads adjacent records with one pread, whatever the order asked, and answers slices of it', async () => {
    const s = openAt(tmp());
    await s.events.write(Array.from({ length: 100 }, (_, i) => put(`e${i}`, doc(i))));
    await s.events.settled();
    const asked = Array.from({ length: 100 }, (_, i) => ({ key: `e${(i * 37) % 100}`, lifecycleRank: 0 }));
    const { result, reads } = await readsOf(() => many(s, asked));
    expect(result.map(text)).toEqual(asked.map((v) => doc(Number(v.key.slice(1)))));
    expect(reads).toHaveLength(1);
    // One buffer underneath them all.
    expect(new Set(result.map((b) => b!.buffer)).size).toBe(1);
    // One at a time: a pread each.
    const single = await readsOf(() => oneByOne(s, asked));
    expect(single.reads).toHaveLength(100);
  });

  it('starts a new run past the gap bound, in another segment, and at the bound of a run, never cutting a record', async () => {
    // Documents of ~40 KB: a run of 1 MiB holds 26 of them; the 27th starts the next run, whole.
    const big = (i: number) => JSON.stringify({ id: `b${i}`, pad: String(i % 10).repeat(40_000) });
    const s = openAt(tmp());
    const n = 60;
    for (let i = 0; i < n; i += 10) await s.events.write(Array.from({ length: 10 }, (_, j) => put(`b${i + j}`, big(i + j))));
    await s.events.settled();
    const asked = Array.from({ length: n }, (_, i) => ({ key: `b${i}`, lifecycleRank: 0 }));
    const { result, reads } = await readsOf(() => many(s, asked));
    expect(result.map(text)).toEqual(asked.map((_, i) => big(i)));
    expect(reads.length).toBeGreaterThanOrEqual(Math.ceil((n * 40_000) / RUN_MAX_BYTES));
    expect(reads.length).toBeLessThan(n / 10);
    for (const r of reads) expect(r).toBeLessThanOrEqual(RUN_MAX_BYTES);

    // Every other one of small records a gap apart larger than the bound: a read each.
    const far = openAt(tmp());
    const pad = (i: number) => JSON.stringify({ id: `f${i}`, pad: 'x'.repeat(RUN_GAP_BYTES + 100) });
    await far.events.write(Array.from({ length: 20 }, (_, i) => put(`f${i}`, i % 2 === 0 ? doc(i) : pad(i))));
    const even = Array.from({ length: 10 }, (_, i) => ({ key: `f${2 * i}`, lifecycleRank: 0 }));
    const apart = await readsOf(() => many(far, even));
    expect(apart.result.map(text)).toEqual(even.map((v) => doc(Number(v.key.slice(1)))));
    expect(apart.reads).toHaveLength(10);

    // Segments of 4 KB: a run never spans two files.
    const segs = openAt(tmp(), { eventSegmentBytes: 4096 });
    for (let i = 0; i < 120; i += 6) await segs.events.write(Array.from({ length: 6 }, (_, j) => put(`e${i + j}`, doc(i + j))));
    const all = Array.from({ length: 120 }, (_, i) => ({ key: `e${119 - i}`, lifecycleRank: 0 }));
    const across = await readsOf(() => many(segs, all));
    expect(across.result.map(text)).toEqual(all.map((v) => doc(Number(v.key.slice(1)))));
    const files = new Set(all.map((v) => internals(segs).writer.lookup(`t|events|${v.key}|0`)!.seg)).size;
    expect(files).toBeGreaterThan(2);
    expect(across.reads).toHaveLength(files);
  });

  it('keeps alive only the bytes asked for: the documents of a run copied out of it together', async () => {
    const s = openAt(tmp());
    // Documents of 600 bytes between records of 3,000 not asked for: one run, most of it dropped.
    const small = (i: number) => JSON.stringify({ id: `s${i}`, pad: 's'.repeat(600 - 20 - String(i).length * 2) });
    const between = (i: number) => JSON.stringify({ id: `x${i}`, pad: 'x'.repeat(3_000) });
    await s.events.write(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? put(`s${i}`, small(i)) : put(`x${i}`, between(i)))));
    const asked = Array.from({ length: 10 }, (_, i) => ({ key: `s${2 * i}`, lifecycleRank: 0 }));
    const { result, reads } = await readsOf(() => many(s, [...asked, asked[3]!]));
    expect(result.map(text)).toEqual([...asked, asked[3]!].map((v) => small(Number(v.key.slice(1)))));
    expect(reads).toHaveLength(1);
    expect(reads[0]).toBeGreaterThan(30_000);
    const bytes = asked.reduce((a, v) => a + Buffer.byteLength(small(Number(v.key.slice(1)))), 0);
    expect(new Set(result.map((b) => b!.buffer)).size).toBe(1);
    expect(result[0]!.buffer.byteLength).toBe(bytes);
    // A position asked twice: the same bytes.
    expect(result[10]!.byteOffset).toBe(result[3]!.byteOffset);
  });

  it('readMany: bounds each run by its size and its gaps, answering each position whole (small bounds)', async () => {
    const s = openAt(tmp());
    await s.events.write(Array.from({ length: 40 }, (_, i) => put(`e${i}`, doc(i))));
    const segments = internals(s).segments;
    const positions = Array.from({ length: 40 }, (_, i) => internals(s).writer.lookup(`t|events|e${i}|0`)!);
    const len = Math.max(...positions.map((p) => p.len));
    // A run of at most 3 documents' worth of bytes: a record that would end past it starts the next run.
    for (const maxRun of [len, 2 * len + 40, 3 * len + 100]) {
      const { result, reads } = await readsOf(async () => segments.readMany(positions, maxRun));
      expect(result.map((b) => (b as Buffer).toString('utf8'))).toEqual(positions.map((_, i) => doc(i)));
      for (const r of reads) expect(r).toBeLessThanOrEqual(maxRun);
      expect(reads.length).toBeGreaterThan(1);
    }
    // No gap allowed: records are apart by their header and key, so a read each.
    const { reads } = await readsOf(async () => segments.readMany(positions, RUN_MAX_BYTES, 0));
    expect(reads).toHaveLength(40);
  });

  it('reads a document larger than the synchronous bound through the thread pool, beside the runs', async () => {
    const s = openAt(tmp());
    const huge = JSON.stringify({ id: 'huge', pad: 'h'.repeat(200_000) });
    await s.events.write([put('a', doc(1)), put('huge', huge), put('b', doc(2))]);
    const got = await many(s, [
      { key: 'b', lifecycleRank: 0 },
      { key: 'huge', lifecycleRank: 0 },
      { key: 'a', lifecycleRank: 0 },
    ]);
    expect(got.map(text)).toEqual([doc(2), huge, doc(1)]);
  });

  describe('and compaction', () => {
    // Records of ~150 bytes: 18-19 fit in a segment of 4 KB (as compaction.test.ts).
    const fixed = (i: number, v = 0) => JSON.stringify({ id: `a${i}`, v, pad: 'p'.repeat(100) });
    /** Segment 1: a0..a17, a0..a9 replaced in segment 2 (8 live records in segment 1), then 'b'. */
    const halfReplaced = async (s: EmbeddedStores) => {
      await s.events.write(Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j))));
      await s.events.write(Array.from({ length: 10 }, (_, j) => put(`a${j}`, fixed(j, 1))));
      await s.events.write([put('b', fixed(0))]);
      await s.events.settled();
    };
    const asked: Version[] = [...Array.from({ length: 18 }, (_, j) => ({ key: `a${17 - j}`, lifecycleRank: 0 })), { key: 'b' }];
    const expected = [...Array.from({ length: 18 }, (_, j) => fixed(17 - j, 17 - j < 10 ? 1 : 0)), fixed(0)];

    it('reads from the new generation after a compaction of the segment', async () => {
      const s = openAt(tmp(), { eventSegmentBytes: 4096, eventCompaction: { intervalMs: 0 } });
      await halfReplaced(s);
      expect((await many(s, asked)).map(text)).toEqual(expected);
      expect((await s.events.compact()).compacted).toEqual([1]);
      expect(internals(s).segments.genOf(1)).toBe(1);
      expect((await many(s, asked)).map(text)).toEqual(expected);
    });

    it("reads a feed entry's document where its put wrote it (replaced or deleted since: still that put's), until compaction moved it", async () => {
      const s = openAt(tmp(), { eventSegmentBytes: 4096, eventCompaction: { intervalMs: 0 } });
      await halfReplaced(s);
      await s.events.write([del('a15')]);
      await s.events.settled();
      const feed = (await s.entities.feed.read({ tenant: 't', limit: 100 })).entries;
      // Each put of the log says where it went; the first 18 are a0..a17 as first written.
      const first = feed.slice(0, 18);
      expect(first.map((e) => e.key)).toEqual(Array.from({ length: 18 }, (_, j) => `a${j}`));
      for (const e of feed) if (e.op === 'put') expect(e.logged).toBeDefined();
      const written = Array.from({ length: 18 }, (_, j) => fixed(j));
      const { result, reads } = await readsOf(() => many(s, first));
      expect(result.map(text)).toEqual(written);
      // One pread for them all, and no lookup: the index is not asked.
      expect(reads).toHaveLength(1);
      const lookup = vi.spyOn(internals(s).writer, 'lookup');
      await many(s, first);
      expect(lookup).not.toHaveBeenCalled();
      lookup.mockRestore();
      // Compaction copies what it keeps to generation 1 and removes generation 0: the entries that
      // named it are read as stored now (the latest version, none for the deleted one).
      expect((await s.events.compact()).compacted).toEqual([1]);
      const now = Array.from({ length: 18 }, (_, j) => (j === 15 ? undefined : fixed(j, j < 10 ? 1 : 0)));
      expect((await many(s, first)).map(text)).toEqual(now);
    });

    it('reads from both generations while the index moves between them, a write during the move winning over the copy', async () => {
      const seen: Array<Array<string | undefined>> = [];
      const gens: Array<Set<number>> = [];
      let steps = 0;
      const opts: EmbeddedStoreOptions = {
        eventSegmentBytes: 4096,
        eventCompaction: {
          intervalMs: 0,
          moveChunk: 3,
          onStep: async (step: string) => {
            if (step !== 'moved') return;
            // Between two chunks of the move: some positions name generation 1, the others generation 0.
            const inSegment1 = asked.map((v) => internals(s).writer.lookup(`t|events|${v.key}|0`)!).filter((p) => p.seg === 1);
            gens.push(new Set(inSegment1.map((p) => p.gen)));
            seen.push((await many(s, asked)).map(text));
            if (steps++ === 0) await s.events.write([put('a16', fixed(16, 9))]);
          },
        },
      };
      const s: EmbeddedStores = openAt(tmp(), opts);
      await halfReplaced(s);
      // The first batch of positions read, then the compaction runs to its end between reads.
      const compacting = s.events.compact();
      expect((await many(s, asked)).map(text)).toEqual(expected);
      expect((await compacting).compacted).toEqual([1]);
      expect(seen).toHaveLength(3);
      // Positions into segment 1 named both of its generations while the batch was read.
      expect([...gens[0]!].sort()).toEqual([0, 1]);
      const after = expected.map((e, j) => (asked[j]!.key === 'a16' ? fixed(16, 9) : e));
      expect(seen[0]).toEqual(expected);
      for (const got of seen.slice(1)) expect(got).toEqual(after);
      expect((await many(s, asked)).map(text)).toEqual(after);
    });
  });
});
