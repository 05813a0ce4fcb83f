/** Compaction of sealed segments: what it drops, what it keeps, and what a crash or a failed commit in the middle leaves. */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { AdapterError, type DocumentWrite } from '@otm/core';
import {
  clearIndex,
  del,
  failCommits,
  partOf,
  put,
  read,
  segments,
  useTempStores,
  value,
  type EmbeddedStores,
  type EmbeddedStoreOptions,
} from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

describe('event log compaction', () => {
  // Records of ~150 bytes (key ~14, document 125, header 11): 18-19 fit in a segment of 4 KB.
  const fixed = (i: number, v = 0) => JSON.stringify({ id: `e${i}`, v, pad: 'p'.repeat(100) });
  const manual = { eventCompaction: { intervalMs: 0 } };
  /** Segments of 4 KB, compaction only when called. */
  const small = { eventSegmentBytes: 4096, ...manual };
  /** Closes `s`, then runs `expected` on the folder reopened, and again after a full rebuild of the index. */
  const afterRestartAndRebuild = async (s: EmbeddedStores, dir: string, expected: (store: EmbeddedStores) => Promise<void>) => {
    await closeIt(s);
    const again = openAt(dir, small);
    await expected(again);
    await closeIt(again);
    await clearIndex(dir);
    await expected(openAt(dir, small));
  };
  const logBytes = (dir: string) => segments(dir).reduce((a, f) => a + fs.statSync(path.join(dir, 'events', f)).size, 0);

  it('rewrites sealed segments without replaced and deleted events; every event reads the same after, after a restart and after a full rebuild', async () => {
    const dir = tmp();
    const s = openAt(dir, small);
    for (let i = 0; i < 60; i += 10) await s.events.write(Array.from({ length: 10 }, (_, j) => put(`e${i + j}`, fixed(i + j))));
    for (let i = 0; i < 30; i += 10) await s.events.write(Array.from({ length: 10 }, (_, j) => put(`e${i + j}`, fixed(i + j, 1))));
    await s.events.write(Array.from({ length: 15 }, (_, j) => del(`e${30 + j}`)));
    await s.events.write([put('tail', fixed(999))]);
    const expected = async (store: EmbeddedStores) => {
      for (let i = 0; i < 60; i++) expect(await read(store, `e${i}`)).toBe(i < 30 ? fixed(i, 1) : i < 45 ? undefined : fixed(i));
      expect(await read(store, 'tail')).toBe(fixed(999));
    };
    await expected(s);
    const before = logBytes(dir);
    const compactions = await value('otm_event_log_compactions_total');

    const r = await s.events.compact();
    expect(r.compacted.length + r.removed.length).toBeGreaterThan(0);
    expect(r.reclaimedBytes).toBeGreaterThan(0);
    expect(logBytes(dir)).toBe(before - r.reclaimedBytes);
    expect(await value('otm_event_log_compactions_total')).toBe(compactions + r.compacted.length + r.removed.length);
    await expected(s);
    // Nothing left worth compacting: a second pass changes nothing.
    expect(await s.events.compact()).toEqual({ compacted: [], removed: [], reclaimedBytes: 0 });

    await afterRestartAndRebuild(s, dir, expected);
  });

  it('moves records of both forms, with and without the acceptance time (record.ts), to the right place of their documents', async () => {
    const dir = tmp();
    const s = openAt(dir, small);
    // Even ones with an event time of their own (plain puts), odd ones without (their records keep the acceptance time).
    const mixed = (i: number, v = 0) =>
      i % 2 === 0 ? JSON.stringify({ id: `e${i}`, creationDate: '2026-01-01T00:00:00Z', v, pad: 'p'.repeat(80) }) : fixed(i, v);
    for (let i = 0; i < 60; i += 10) await s.events.write(Array.from({ length: 10 }, (_, j) => put(`e${i + j}`, mixed(i + j))));
    await s.events.write(Array.from({ length: 40 }, (_, j) => put(`e${j}`, mixed(j, 1))));
    const expected = async (store: EmbeddedStores) => {
      for (let i = 0; i < 60; i++) expect(await read(store, `e${i}`)).toBe(mixed(i, i < 40 ? 1 : 0));
    };
    const r = await s.events.compact();
    expect(r.compacted.length + r.removed.length).toBeGreaterThan(0);
    await expected(s);
    await afterRestartAndRebuild(s, dir, expected);
  });

  it('keeps a deletion while an older segment holds the event it deletes, so that a rebuild does not bring the event back', async () => {
    const dir = tmp();
    const s = openAt(dir, small);
    await s.events.write([put('x', fixed(0)), ...Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j)))]); // segment 1, mostly live
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`b${j}`, fixed(j)))); // segment 2
    await s.events.write([del('x')]); // segment 2
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`b${j}`, fixed(j, 1)))); // segment 3: segment 2 is all dead but the deletion
    expect(segments(dir)).toEqual(['0000000001.log', '0000000002.log', '0000000003.log']);

    const r = await s.events.compact();
    expect(r.compacted).toEqual([2]);
    expect(segments(dir)).toEqual(['0000000001.log', '0000000002.1.log', '0000000003.log']);
    expect(fs.statSync(path.join(dir, 'events', '0000000002.1.log')).size).toBeLessThan(50); // the deletion alone
    expect(await read(s, 'x')).toBeUndefined();
    await closeIt(s);
    await clearIndex(dir);
    const again = openAt(dir, small);
    expect(await read(again, 'x')).toBeUndefined();
    for (let j = 0; j < 18; j++) expect(await read(again, `b${j}`)).toBe(fixed(j, 1));
    expect(await read(again, 'a5')).toBe(fixed(5));
  });

  it('removes a segment in which nothing is live, and does so on its own when given an interval', async () => {
    const dir = tmp();
    const s = openAt(dir, { eventSegmentBytes: 4096, eventCompaction: { intervalMs: 20 } });
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j))));
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j, 1))));
    await s.events.write([put('tail', fixed(1))]);
    for (let t = 0; t < 200 && segments(dir).includes('0000000001.log'); t++) await new Promise((r) => setTimeout(r, 25));
    expect(segments(dir)).toEqual(['0000000002.log']);
    for (let j = 0; j < 18; j++) expect(await read(s, `a${j}`)).toBe(fixed(j, 1));
    await closeIt(s);
    await clearIndex(dir);
    const again = openAt(dir, small);
    for (let j = 0; j < 18; j++) expect(await read(again, `a${j}`)).toBe(fixed(j, 1));
  });

  it('a write or a deletion that comes while the segment is being copied wins over the copy, also after a restart and a rebuild', async () => {
    const dir = tmp();
    let s: EmbeddedStores | undefined;
    let inFlight: Promise<string | undefined>[] = [];
    const opts = {
      eventSegmentBytes: 4096,
      eventCompaction: {
        intervalMs: 0,
        onStep: async (step: string) => {
          if (step !== 'written') return;
          // Reads that take the old generation's file, then the racing changes.
          inFlight = ['k1', 'k2', 'k3'].map((k) => read(s!, k));
          await s!.events.write([del('k1'), put('k2', fixed(2, 9))]);
          // Their index changes committed before the copy's: the copy must not undo them.
          for (let t = 0; t < 100 && (await value('otm_event_index_behind')) > 0; t++) await new Promise((r) => setTimeout(r, 5));
          expect(await value('otm_event_index_behind')).toBe(0);
        },
      },
    };
    s = openAt(dir, opts);
    await s.events.write([
      put('k1', fixed(1)),
      put('k2', fixed(2)),
      put('k3', fixed(3)),
      ...Array.from({ length: 15 }, (_, j) => put(`d${j}`, fixed(j))),
    ]);
    await s.events.write(Array.from({ length: 15 }, (_, j) => put(`d${j}`, fixed(j, 1))));
    await s.events.write([put('tail', fixed(0))]);
    expect((await s.events.compact()).compacted).toEqual([1]);
    expect(await Promise.all(inFlight)).toEqual([fixed(1), fixed(2), fixed(3)]);
    const expected = async (store: EmbeddedStores) => {
      expect(await read(store, 'k1')).toBeUndefined();
      expect(await read(store, 'k2')).toBe(fixed(2, 9));
      expect(await read(store, 'k3')).toBe(fixed(3));
      for (let j = 0; j < 15; j++) expect(await read(store, `d${j}`)).toBe(fixed(j, 1));
    };
    await expected(s);
    await afterRestartAndRebuild(s, dir, expected);
  });

  it('copies records larger than the pieces it reads and writes (1 MB)', async () => {
    const dir = tmp();
    const s = openAt(dir, small);
    const big = (c: string) => JSON.stringify({ id: c, text: c.repeat(5 * 1024 * 1024) });
    await s.events.write([put('big1', big('a')), put('big2', big('b')), put('small', fixed(1))]);
    await s.events.write([put('big1', fixed(2)), del('small')]);
    expect((await s.events.compact()).compacted).toEqual([1]);
    expect(await read(s, 'big2')).toBe(big('b'));
    expect(await read(s, 'big1')).toBe(fixed(2));
    await closeIt(s);
    await clearIndex(dir);
    const again = openAt(dir, small);
    expect(await read(again, 'big2')).toBe(big('b'));
    expect(await read(again, 'big1')).toBe(fixed(2));
    expect(await read(again, 'small')).toBeUndefined();
  });

  /** Segment 1: a0..a17, a0..a9 replaced in segment 2 (8 live records in segment 1), then 'b'. */
  const halfReplaced = async (s: EmbeddedStores) => {
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j))));
    await s.events.write(Array.from({ length: 10 }, (_, j) => put(`a${j}`, fixed(j, 1))));
    await s.events.write([put('b', fixed(0))]);
    await s.events.settled(); // indexed
  };
  const halfReplacedReads = async (store: EmbeddedStores) => {
    for (let j = 0; j < 18; j++) expect(await read(store, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
    expect(await read(store, 'b')).toBe(fixed(0));
  };

  it('when LMDB fails to commit the start of the move, it is tried again until it commits, reads going on from the old generation', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { ...small, warn: (m) => warnings.push(m) });
    await halfReplaced(s);
    const restore = failCommits(s);
    const compaction = s.events.compact();
    await vi.waitFor(() =>
      expect(warnings.join()).toMatch(/LMDB did not commit the start of segment 1's move \(MDB_MAP_FULL\); tried again in \d+ ms/),
    );
    // Meanwhile: nothing of the move is committed, every read is served from the old generation.
    for (let j = 0; j < 18; j++) expect(await read(s, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
    // A lack of room (MDB_MAP_FULL) is not a loop that a restart would cure: the part stays up.
    expect(partOf(s, 'event log compaction').status().up).toBe(true);
    restore();
    expect((await compaction).compacted).toEqual([1]);
    expect(warnings.join()).toMatch(/committed the start of segment 1's move after \d+ failed attempts/);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    for (let j = 0; j < 18; j++) expect(await read(s, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
    await closeIt(s);
    const again = openAt(dir, small);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    for (let j = 0; j < 18; j++) expect(await read(again, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
  });

  it('a step that fails for another cause than room marks compaction down until it commits', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { ...small, warn: (m) => warnings.push(m) });
    await halfReplaced(s);
    const restore = failCommits(s, new Error('MDB_BAD_TXN: Transaction must abort, has a child, or is invalid'));
    const compaction = s.events.compact();
    await vi.waitFor(() =>
      expect(partOf(s, 'event log compaction').status()).toMatchObject({ up: false, reason: expect.stringMatching(/MDB_BAD_TXN/) }),
    );
    restore();
    expect((await compaction).compacted).toEqual([1]);
    expect(partOf(s, 'event log compaction').status().up).toBe(true);
  });

  /** Segments of 4 KB, compaction only when called, the index moved 3 entries at a time; `moved` runs after each chunk. */
  const chunked = (moved: () => void | Promise<void>, warn?: (m: string) => void): EmbeddedStoreOptions => ({
    eventSegmentBytes: 4096,
    ...(warn ? { warn } : {}),
    eventCompaction: { intervalMs: 0, moveChunk: 3, onStep: (step: string) => (step === 'moved' ? moved() : undefined) },
  });

  it('moves the index to the new generation a chunk at a time, reading from both files meanwhile', async () => {
    const dir = tmp();
    const seen: string[][] = [];
    const s: EmbeddedStores = openAt(
      dir,
      chunked(async () => {
        // Between two chunks: some entries name generation 1, the others still generation 0.
        seen.push(segments(dir));
        await halfReplacedReads(s);
      }),
    );
    await halfReplaced(s);
    expect((await s.events.compact()).compacted).toEqual([1]);
    // 8 live records in chunks of 3.
    expect(seen).toHaveLength(3);
    for (const files of seen) expect(files).toEqual(['0000000001.1.log', '0000000001.log', '0000000002.log']);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    await halfReplacedReads(s);
    await afterRestartAndRebuild(s, dir, halfReplacedReads);
  });

  it('a write or a deletion between two chunks of the move wins over it, also after a restart and a rebuild', async () => {
    const dir = tmp();
    let steps = 0;
    const s: EmbeddedStores = openAt(
      dir,
      chunked(async () => {
        // After the first chunk: a10..a12 moved, a13..a17 not yet.
        if (steps++ === 0) await s.events.write([del('a16'), put('a17', fixed(17, 9))]);
      }),
    );
    await halfReplaced(s);
    expect((await s.events.compact()).compacted).toEqual([1]);
    const expected = async (store: EmbeddedStores) => {
      for (let j = 0; j < 16; j++) expect(await read(store, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
      expect(await read(store, 'a16')).toBeUndefined();
      expect(await read(store, 'a17')).toBe(fixed(17, 9));
    };
    await expected(s);
    await afterRestartAndRebuild(s, dir, expected);
  });

  it('when LMDB fails to commit a step of the move, reads go on from both generations until it is tried again and commits', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    let restore: (() => void) | undefined;
    const s: EmbeddedStores = openAt(
      dir,
      chunked(
        () => void (restore ??= failCommits(s)), // the second chunk fails
        (m) => warnings.push(m),
      ),
    );
    await halfReplaced(s);
    const compaction = s.events.compact();
    await vi.waitFor(() => expect(warnings.join()).toMatch(/LMDB did not commit a step of segment 1's move \(MDB_MAP_FULL\)/));
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000001.log', '0000000002.log']);
    await halfReplacedReads(s);
    restore!();
    expect((await compaction).compacted).toEqual([1]);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    await halfReplacedReads(s);
    await afterRestartAndRebuild(s, dir, halfReplacedReads);
  });

  it('a store closed while a step waits to be tried again: the next start finishes the move', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s: EmbeddedStores = openAt(
      dir,
      chunked(
        () => void failCommits(s), // the second chunk fails, for good
        (m) => warnings.push(m),
      ),
    );
    await halfReplaced(s);
    const compaction = s.events.compact();
    await vi.waitFor(() => expect(warnings.join()).toMatch(/a step of segment 1's move/));
    await closeIt(s);
    expect((await compaction).compacted).toEqual([]);
    const again = openAt(dir, { ...small, warn: (m) => warnings.push(m) });
    expect(warnings.join('\n')).toMatch(/finished moving segment 1's index to 0000000001\.1\.log \(5 entries\)/);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    await halfReplacedReads(again);
  });

  it('after a crash in the middle of the move, the next start finishes it', async () => {
    const dir = tmp();
    let steps = 0;
    const s = openAt(
      dir,
      chunked(() => {
        if (++steps === 2) throw new Error('crash');
      }),
    );
    await halfReplaced(s);
    await expect(s.events.compact()).rejects.toThrow('crash');
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000001.log', '0000000002.log']);
    await closeIt(s);
    const warnings: string[] = [];
    const again = openAt(dir, { ...small, warn: (m) => warnings.push(m) });
    expect(warnings.join('\n')).toMatch(/finished moving segment 1's index to 0000000001\.1\.log \(2 entries\)/);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    await halfReplacedReads(again);
    // Compacted again later: generation 2.
    await again.events.write(Array.from({ length: 8 }, (_, j) => put(`a${10 + j}`, fixed(10 + j, 2))));
    await again.events.write([put('c', fixed(0))]);
    expect((await again.events.compact()).removed).toEqual([1]);
    await closeIt(again);
    await clearIndex(dir);
    const rebuilt = openAt(dir, small);
    for (let j = 0; j < 18; j++) expect(await read(rebuilt, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 2));
  });

  it('writes, deletions and reads racing repeated compactions (seeded): every read answers the last write, also after a restart and a rebuild', async () => {
    let seed = Number(process.env.OTM_TEST_SEED ?? 20261124);
    const random = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    const dir = tmp();
    const model = new Map<string, string | undefined>();
    const keys = Array.from({ length: 30 }, (_, i) => `r${i}`);
    let written = 0;
    /**
     * Writes a batch of random puts and deletions, and reads a random key back. One change at a
     * time (those from the compaction's steps wait for the one under way): the model is then what
     * the store holds after each.
     */
    let last: Promise<void> = Promise.resolve();
    const change = (store: EmbeddedStores): Promise<void> => (last = last.then(() => changeNow(store)));
    const changeNow = async (store: EmbeddedStores) => {
      const batch: DocumentWrite[] = [];
      for (let j = 0; j < 4; j++) {
        const k = keys[Math.floor(random() * keys.length)]!;
        if (random() < 0.2) {
          batch.push(del(k));
          model.set(k, undefined);
        } else {
          const v = fixed(written++, 1);
          batch.push(put(k, v));
          model.set(k, v);
        }
      }
      await store.events.write(batch);
      const k = keys[Math.floor(random() * keys.length)]!;
      expect(await read(store, k)).toBe(model.get(k));
    };
    let inSteps = 0;
    const s: EmbeddedStores = openAt(dir, {
      eventSegmentBytes: 2048,
      eventCompaction: {
        intervalMs: 0,
        moveChunk: 2,
        // Between the copy and the move, and between chunks of the move: changes race it.
        onStep: async (step: string) => {
          if (step !== 'committed' && random() < 0.5) {
            inSteps++;
            await change(s);
          }
        },
      },
    });
    let compactions = 0;
    for (let round = 0; round < 40; round++) {
      // A compaction runs while the round's changes go on beside it too.
      const compacting = s.events.compact().then((r) => (compactions += r.compacted.length + r.removed.length));
      for (let step = 0; step < 6; step++) await change(s);
      await compacting;
    }
    expect(inSteps).toBeGreaterThan(20);
    expect(compactions).toBeGreaterThan(5);
    const expected = async (store: EmbeddedStores) => {
      for (const k of keys) expect(await read(store, k)).toBe(model.get(k));
    };
    await expected(s);
    await afterRestartAndRebuild(s, dir, expected);
  });

  it('after a crash: a new generation that was not committed is removed at start, and so is an old one that was', async () => {
    const dir = tmp();
    const crash = {
      eventSegmentBytes: 4096,
      eventCompaction: {
        intervalMs: 0,
        onStep: (step: string) => {
          if (step === 'committed') throw new Error('crash');
        },
      },
    };
    const s = openAt(dir, crash);
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j))));
    await s.events.write(Array.from({ length: 10 }, (_, j) => put(`a${j}`, fixed(j, 1))));
    await s.events.write([put('b', fixed(0))]);
    // Stopped after the commit, before the old file was removed: both generations are on disk.
    await expect(s.events.compact()).rejects.toThrow('crash');
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000001.log', '0000000002.log']);
    await closeIt(s);
    // And a generation 2 written but never committed (a stop before the commit).
    fs.writeFileSync(path.join(dir, 'events', '0000000001.2.log'), 'half written');

    const warnings: string[] = [];
    const again = openAt(dir, { ...small, warn: (m) => warnings.push(m) });
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    expect(warnings.join('\n')).toMatch(
      /removed 0000000001\.log.*\n.*removed 0000000001\.2\.log|removed 0000000001\.2\.log.*\n.*removed 0000000001\.log/,
    );
    for (let j = 0; j < 18; j++) expect(await read(again, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
    await closeIt(again);
    await clearIndex(dir);
    const rebuilt = openAt(dir, small);
    for (let j = 0; j < 18; j++) expect(await read(rebuilt, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
  });

  it('stops at a damaged record in a sealed segment with a non-retryable AdapterError, and leaves the segment as it was', async () => {
    const dir = tmp();
    const s = openAt(dir, small);
    await halfReplaced(s);
    const first = path.join(dir, 'events', '0000000001.log');
    const fd = fs.openSync(first, 'r+');
    fs.writeSync(fd, Buffer.from('garbage!'), 0, 8, 20);
    fs.closeSync(fd);
    const refused = await s.events.compact().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({
      adapter: 'event-log',
      retryable: false,
      message: expect.stringMatching(/a damaged record at byte 0; not compacted/),
    });
    expect(segments(dir)).toEqual(['0000000001.log', '0000000002.log']);
    expect(await read(s, 'a15')).toBe(fixed(15));
  });
});
