/**
 * The embedded event store's log and its recovery: what a crash can leave behind (a torn record
 * at the tail, an index behind the log), segment files, and the move of an earlier version's
 * LMDB event store into the log. The port's contract itself is test/contract/event-store.test.ts.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { open } from 'lmdb';
import { registry, type DocumentWrite } from '@otm/core';
import { openEmbeddedStores, type EmbeddedStores, type EmbeddedStoreOptions } from '../src/index.js';

const dirs: string[] = [];
const opened: EmbeddedStores[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close();
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const tmp = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-event-log-'));
  dirs.push(dir);
  return dir;
};
const openAt = (dir: string, opts: EmbeddedStoreOptions = {}) => {
  const s = openEmbeddedStores(dir, opts);
  opened.push(s);
  return s;
};
const closeIt = async (s: EmbeddedStores) => {
  opened.splice(opened.indexOf(s), 1);
  await s.close();
};
const put = (key: string, json: string, rank = 0): DocumentWrite => ({ op: 'put', tenant: 't', doc: { kind: 'events', key, lifecycleRank: rank, json } });
const doc = (i: number) => JSON.stringify({ id: `e${i}`, eventType: 'locationUpdateEvent', name: `event ${i} é ${'x'.repeat(i % 50)}` });
const segments = (dir: string) => fs.readdirSync(path.join(dir, 'events')).filter((f) => f.endsWith('.log')).sort();
const value = async (metric: string) => (await registry.getSingleMetric(metric)!.get()).values[0]!.value;
const lastSegment = (dir: string) => path.join(dir, 'events', segments(dir).at(-1)!);

describe('event log', () => {
  it('keeps the documents out of LMDB: the store file holds only the index', async () => {
    const dir = tmp();
    const s = openAt(dir);
    const big = JSON.stringify({ id: 'big', text: 'y'.repeat(200_000) });
    await s.events.write([put('big', big)]);
    expect((await s.events.get('t', 'events', 'big'))?.json).toBe(big);
    expect(fs.statSync(lastSegment(dir)).size).toBeGreaterThan(200_000);
    await closeIt(s);
    expect(fs.statSync(path.join(dir, 'store', 'otm.mdb')).size).toBeLessThan(200_000);
  });

  it('answers the stored bytes as written', async () => {
    const s = openAt(tmp());
    const json = JSON.stringify({ id: 'u', name: 'Zürich \u2028 \u0000 "q" 🚚' });
    await s.events.write([put('u', json)]);
    const got = await s.events.get('t', 'events', 'u');
    expect(got?.json).toBe(json);
    expect(got?.bytes?.equals(Buffer.from(json))).toBe(true);
  });

  it('indexes keys of any tenant so that they are found again after a reopen, each key once', async () => {
    // Tenants with 'é', with a control character, one starting below 28: lmdb's key encoding
    // escapes such characters; the index must still find each key, and only under its tenant.
    const tenants = ['t', 'acme.eu_1-2', 'café', 'a\u0003b', '\u001bx', '~'];
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write(tenants.map((tenant, i) => ({ op: 'put', tenant, doc: { kind: 'events', key: `k${i}`, lifecycleRank: 4, json: doc(i) } })));
    await closeIt(s);
    const again = openAt(dir);
    for (const [i, tenant] of tenants.entries()) {
      expect((await again.events.get(tenant, 'events', `k${i}`))?.json).toBe(doc(i));
      // Under no other tenant (a prefix of the key, or a neighbour in the key order).
      expect(await again.events.get(`${tenant}x`, 'events', `k${i}`)).toBeUndefined();
    }
    await closeIt(again);
    // The index holds each key once, as lmdb's own encoding of the string would.
    const root = open({ path: path.join(dir, 'store', 'otm.mdb'), maxDbs: 8, compression: false });
    try {
      const index = root.openDB<Buffer, string>({ name: 'event-index', encoding: 'binary' });
      expect([...index.getKeys()].sort()).toEqual(tenants.map((t, i) => `${t}|events|k${i}|4`).sort());
    } finally {
      await root.close();
    }
  });

  it('cuts a torn record off the tail at start, keeps every whole one, and goes on writing after it', async () => {
    const dir = tmp();
    const s = openAt(dir);
    for (let i = 0; i < 50; i++) await s.events.write([put(`e${i}`, doc(i))]);
    await closeIt(s);
    const file = lastSegment(dir);
    const whole = fs.statSync(file).size;
    // A record cut off by a crash: its header says 500 bytes, 20 made it to the disk.
    const torn = Buffer.alloc(28);
    torn.writeUInt32LE(500, 0);
    fs.appendFileSync(file, torn);

    const warnings: string[] = [];
    const again = openAt(dir, { warn: (m) => warnings.push(m) });
    expect(fs.statSync(file).size).toBe(whole);
    expect(warnings.join()).toMatch(/torn record.*cutting off the last 28 bytes/);
    for (let i = 0; i < 50; i++) expect((await again.events.get('t', 'events', `e${i}`))?.json).toBe(doc(i));
    await again.events.write([put('after', doc(99))]);
    await closeIt(again);
    const third = openAt(dir);
    expect((await third.events.get('t', 'events', 'after'))?.json).toBe(doc(99));
    expect((await third.events.get('t', 'events', 'e49'))?.json).toBe(doc(49));
  });

  it('cuts off a last record whose checksum does not match (a partly written body)', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write([put('a', doc(1))]);
    await s.events.write([put('b', doc(2))]);
    await closeIt(s);
    const file = lastSegment(dir);
    const size = fs.statSync(file).size;
    const bRecord = 8 + 3 + Buffer.byteLength('t|events|b|0') + Buffer.byteLength(doc(2));
    // Clear the index so that both records are replayed, then damage the last byte of 'b'.
    await clearIndex(dir);
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.from([0x00]), 0, 1, size - 1);
    fs.closeSync(fd);
    const again = openAt(dir, { warn: () => {} });
    expect(fs.statSync(file).size).toBe(size - bRecord);
    expect((await again.events.get('t', 'events', 'a'))?.json).toBe(doc(1));
    expect(await again.events.get('t', 'events', 'b')).toBeUndefined();
  });

  it('rebuilds an index that is behind the log (lost, or not yet committed at a crash), deletes included', async () => {
    const dir = tmp();
    const s = openAt(dir);
    for (let i = 0; i < 30; i++) await s.events.write([put(`e${i}`, doc(i)), put(`e${i}`, doc(i + 1000), 3)]);
    await s.events.write([{ op: 'delete', tenant: 't', kind: 'events', key: 'e7' }]);
    await s.events.write([put('e8', doc(8888), 3)]);
    await closeIt(s);
    await clearIndex(dir);

    const again = openAt(dir);
    for (let i = 0; i < 30; i++) {
      if (i === 7) {
        expect(await again.events.get('t', 'events', 'e7')).toBeUndefined();
        expect(await again.events.get('t', 'events', 'e7', 0)).toBeUndefined();
        continue;
      }
      expect((await again.events.get('t', 'events', `e${i}`, 0))?.json).toBe(doc(i));
      expect((await again.events.get('t', 'events', `e${i}`))?.json).toBe(i === 8 ? doc(8888) : doc(i + 1000));
    }
  });

  it('starts a new segment file when one is full, and reads and recovers across them', async () => {
    const dir = tmp();
    const s = openAt(dir, { eventSegmentBytes: 4096 });
    const calls: Promise<void>[] = [];
    for (let i = 0; i < 200; i++) calls.push(s.events.write([put(`e${i}`, doc(i))]));
    await Promise.all(calls);
    expect(segments(dir).length).toBeGreaterThan(5);
    for (const f of segments(dir).slice(0, -1)) expect(fs.statSync(path.join(dir, 'events', f)).size).toBeLessThanOrEqual(4096);
    for (let i = 0; i < 200; i++) expect((await s.events.get('t', 'events', `e${i}`))?.json).toBe(doc(i));
    await closeIt(s);
    await clearIndex(dir);
    const again = openAt(dir, { eventSegmentBytes: 4096 });
    for (let i = 0; i < 200; i++) expect((await again.events.get('t', 'events', `e${i}`))?.json).toBe(doc(i));
  });

  it('keeps at most the given number of segment files open, reading and writing across many', async () => {
    const dir = tmp();
    const s = openAt(dir, { eventSegmentBytes: 1024, eventMaxOpenSegments: 3 });
    const openFiles = () =>
      fs.readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(path.join(dir, 'events'));
        } catch {
          return false;
        }
      }).length;
    for (let i = 0; i < 120; i++) await s.events.write([put(`e${i}`, doc(i))]);
    expect(segments(dir).length).toBeGreaterThan(10);
    // Reads all over the log, in random order and at once, while writes go on.
    const order = Array.from({ length: 120 }, (_, i) => i).sort(() => Math.random() - 0.5);
    const reads = order.map(async (i) => expect((await s.events.get('t', 'events', `e${i}`))?.json).toBe(doc(i)));
    const writes = Array.from({ length: 30 }, (_, j) => s.events.write([put(`w${j}`, doc(j))]));
    await Promise.all([...reads, ...writes]);
    expect(openFiles()).toBeLessThanOrEqual(3);
    for (let j = 0; j < 30; j++) expect((await s.events.get('t', 'events', `w${j}`))?.json).toBe(doc(j));
  });

  it('refuses to start on a damaged record that is not at the end of the log', async () => {
    const dir = tmp();
    const s = openAt(dir, { eventSegmentBytes: 1024 });
    for (let i = 0; i < 40; i++) await s.events.write([put(`e${i}`, doc(i))]);
    await closeIt(s);
    await clearIndex(dir);
    const first = path.join(dir, 'events', segments(dir)[0]!);
    const fd = fs.openSync(first, 'r+');
    fs.writeSync(fd, Buffer.from('garbage!'), 0, 8, 20);
    fs.closeSync(fd);
    expect(() => openEmbeddedStores(dir, { eventSegmentBytes: 1024 })).toThrow(/not at the end of the log; the log is damaged/);
  });

  it('moves the events of the LMDB event store of earlier versions into the log at the first start', async () => {
    const dir = tmp();
    // The layout before 2026-11-23: the documents themselves in the LMDB database `telemetry`.
    fs.mkdirSync(path.join(dir, 'store'), { recursive: true });
    const root = open({ path: path.join(dir, 'store', 'otm.mdb'), maxDbs: 8, compression: false });
    const telemetry = root.openDB<string, string>({ name: 'telemetry', encoding: 'string' });
    for (let i = 0; i < 25_000; i++) telemetry.put(`t|events|e${i}|${i % 3 === 0 ? 5 : 0}`, doc(i));
    telemetry.put('t|events|odd|key|2', doc(77_777));
    await root.flushed;
    await root.close();

    const warnings: string[] = [];
    const s = openAt(dir, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual(['moved 25001 events from the LMDB event store of an earlier version into the event log']);
    for (const i of [0, 1, 2, 3, 12_345, 24_999]) {
      const got = await s.events.get('t', 'events', `e${i}`);
      expect(got?.json).toBe(doc(i));
      expect(got?.lifecycleRank).toBe(i % 3 === 0 ? 5 : 0);
    }
    expect((await s.events.get('t', 'events', 'odd|key', 2))?.json).toBe(doc(77_777));
    await closeIt(s);
    const quiet: string[] = [];
    const again = openAt(dir, { warn: (m) => quiet.push(m) });
    expect(quiet).toEqual([]);
    expect((await again.events.get('t', 'events', 'e24999'))?.json).toBe(doc(24_999));
  });

  it('when LMDB fails to commit the index, answered events stay readable and the next start indexes them from the log', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { warn: (m) => warnings.push(m) });
    await s.events.write([put('before', doc(1))]);
    await new Promise((r) => setTimeout(r, 50)); // 'before' is in the index and the checkpoint after it
    // From here on every LMDB commit of the index fails (a full disk under LMDB, say).
    const restore = failCommits(s);
    await s.events.write([put('during', doc(2))]);
    await new Promise((r) => setTimeout(r, 50));
    expect(warnings.join()).toMatch(/LMDB did not commit \(MDB_MAP_FULL\)/);
    expect(await value('otm_event_index_failed')).toBe(1);
    expect((await s.events.get('t', 'events', 'during'))?.json).toBe(doc(2));
    // Later index commits succeed again; the checkpoint must still not move past 'during'.
    restore();
    await s.events.write([put('after', doc(3))]);
    await closeIt(s);
    const again = openAt(dir);
    for (const [k, i] of [['before', 1], ['during', 2], ['after', 3]] as const) expect((await again.events.get('t', 'events', k))?.json).toBe(doc(i));
  });

  it('says at GET /metrics how big the log is and how it writes', async () => {
    const dir = tmp();
    const s = openAt(dir);
    const writes = await value('otm_event_log_writes_total');
    const records = await value('otm_event_log_records_total');
    await Promise.all([s.events.write([put('a', doc(1)), put('b', doc(2))]), s.events.write([put('c', doc(3))])]);
    expect(await value('otm_event_log_records_total')).toBe(records + 3);
    expect(await value('otm_event_log_writes_total')).toBeGreaterThan(writes);
    expect(await value('otm_event_log_bytes')).toBe(fs.statSync(lastSegment(dir)).size);
    await closeIt(s);
    openAt(dir);
    expect(await value('otm_event_log_bytes')).toBe(fs.statSync(lastSegment(dir)).size);
  });

  it('a closed store refuses writes and close waits for queued ones', async () => {
    const dir = tmp();
    const s = openAt(dir);
    const pending = s.events.write([put('last', doc(5))]);
    await closeIt(s);
    await pending;
    await expect(s.events.write([put('late', doc(6))])).rejects.toThrow(/closed/);
    const again = openAt(dir);
    expect((await again.events.get('t', 'events', 'last'))?.json).toBe(doc(5));
  });
});

/**
 * A small tmpfs of its own, to run out of space for real; needs root (CI runs as root here), so
 * the test says it was skipped, and why, elsewhere.
 */
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
  const del = (key: string): DocumentWrite => ({ op: 'delete', tenant: 't', kind: 'events', key });
  const logBytes = (dir: string) => segments(dir).reduce((a, f) => a + fs.statSync(path.join(dir, 'events', f)).size, 0);
  const read = async (s: EmbeddedStores, key: string) => (await s.events.get('t', 'events', key))?.json;

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
    await s.events.write([put('k1', fixed(1)), put('k2', fixed(2)), put('k3', fixed(3)), ...Array.from({ length: 15 }, (_, j) => put(`d${j}`, fixed(j)))]);
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

  it('when LMDB fails to commit the start of the move, the new generation is removed and reads go on from the old one', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { ...small, warn: (m) => warnings.push(m) });
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j))));
    await s.events.write(Array.from({ length: 10 }, (_, j) => put(`a${j}`, fixed(j, 1))));
    await s.events.write([put('b', fixed(0))]);
    await new Promise((r) => setTimeout(r, 50)); // indexed
    const restore = failCommits(s);
    expect(await s.events.compact()).toEqual({ compacted: [], removed: [], reclaimedBytes: 0 });
    restore();
    expect(warnings.join()).toMatch(/compaction stopped until the next start.*the start of segment 1's move.*MDB_MAP_FULL/);
    expect(segments(dir)).toEqual(['0000000001.log', '0000000002.log']);
    for (let j = 0; j < 18; j++) expect(await read(s, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
    // No second try in this process.
    expect(await s.events.compact()).toEqual({ compacted: [], removed: [], reclaimedBytes: 0 });
    await closeIt(s);
    const again = openAt(dir, small);
    expect(segments(dir)).toEqual(['0000000001.log', '0000000002.log']);
    for (let j = 0; j < 18; j++) expect(await read(again, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
  });

  /** Segment 1: a0..a17, a0..a9 replaced in segment 2 (8 live records in segment 1), then 'b'. */
  const halfReplaced = async (s: EmbeddedStores) => {
    await s.events.write(Array.from({ length: 18 }, (_, j) => put(`a${j}`, fixed(j))));
    await s.events.write(Array.from({ length: 10 }, (_, j) => put(`a${j}`, fixed(j, 1))));
    await s.events.write([put('b', fixed(0))]);
    await new Promise((r) => setTimeout(r, 50)); // indexed
  };
  const halfReplacedReads = async (store: EmbeddedStores) => {
    for (let j = 0; j < 18; j++) expect(await read(store, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
    expect(await read(store, 'b')).toBe(fixed(0));
  };

  /** Segments of 4 KB, compaction only when called, the index moved 3 entries at a time; `moved` runs after each chunk. */
  const chunked = (moved: () => void | Promise<void>, warn?: (m: string) => void): EmbeddedStoreOptions => ({
    eventSegmentBytes: 4096,
    ...(warn ? { warn } : {}),
    eventCompaction: { intervalMs: 0, moveChunk: 3, onStep: (step: string) => (step === 'moved' ? moved() : undefined) },
  });

  it('moves the index to the new generation a chunk at a time, reading from both files meanwhile', async () => {
    const dir = tmp();
    let s: EmbeddedStores | undefined;
    const seen: string[][] = [];
    s = openAt(
      dir,
      chunked(async () => {
        // Between two chunks: some entries name generation 1, the others still generation 0.
        seen.push(segments(dir));
        await halfReplacedReads(s!);
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
    let s: EmbeddedStores | undefined;
    let steps = 0;
    s = openAt(
      dir,
      chunked(async () => {
        // After the first chunk: a10..a12 moved, a13..a17 not yet.
        if (steps++ === 0) await s!.events.write([del('a16'), put('a17', fixed(17, 9))]);
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

  it('when LMDB fails to commit a step of the move, reads go on from both generations and the next start finishes the move', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    let restore: (() => void) | undefined;
    let s: EmbeddedStores | undefined;
    s = openAt(
      dir,
      chunked(
        () => void (restore ??= failCommits(s!)), // the second chunk fails
        (m) => warnings.push(m),
      ),
    );
    await halfReplaced(s);
    expect(await s.events.compact()).toEqual({ compacted: [], removed: [], reclaimedBytes: 0 });
    restore!();
    expect(warnings.join()).toMatch(/compaction stopped until the next start.*a step of segment 1's move.*MDB_MAP_FULL/);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000001.log', '0000000002.log']);
    await halfReplacedReads(s);
    await closeIt(s);
    const again = openAt(dir, { ...small, warn: (m) => warnings.push(m) });
    expect(warnings.join('\n')).toMatch(/finished moving segment 1's index to 0000000001\.1\.log \(5 entries\)/);
    expect(segments(dir)).toEqual(['0000000001.1.log', '0000000002.log']);
    await halfReplacedReads(again);
    await closeIt(again);
    await clearIndex(dir);
    await halfReplacedReads(openAt(dir, small));
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
    let s: EmbeddedStores | undefined;
    let inSteps = 0;
    s = openAt(dir, {
      eventSegmentBytes: 2048,
      eventCompaction: {
        intervalMs: 0,
        moveChunk: 2,
        // Between the copy and the move, and between chunks of the move: changes race it.
        onStep: async (step: string) => {
          if (step !== 'committed' && random() < 0.5) {
            inSteps++;
            await change(s!);
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

  it('reads and compacts an index written before positions named their generation (12-byte values)', async () => {
    const dir = tmp();
    const s = openAt(dir, small);
    await halfReplaced(s);
    // Segment 1 compacted once before: its entries lie in generation 1, as its mark says.
    expect((await s.events.compact()).compacted).toEqual([1]);
    await closeIt(s);
    await legacyIndex(dir);
    const again = openAt(dir, small);
    await halfReplacedReads(again);
    // Half of generation 1 replaced: compacted again, its 12-byte entries move to generation 2.
    await again.events.write(Array.from({ length: 4 }, (_, j) => put(`a${10 + j}`, fixed(10 + j, 2))));
    await new Promise((r) => setTimeout(r, 50)); // indexed
    expect((await again.events.compact()).compacted).toEqual([1]);
    expect(segments(dir)).toEqual(['0000000001.2.log', '0000000002.log']);
    const expected = async (store: EmbeddedStores) => {
      for (let j = 0; j < 18; j++) expect(await read(store, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : j < 14 ? 2 : 0));
    };
    await expected(again);
    await afterRestartAndRebuild(again, dir, expected);
  });

  it('after a crash: a new generation that was not committed is removed at start, and so is an old one that was', async () => {
    const dir = tmp();
    const crash = { eventSegmentBytes: 4096, eventCompaction: { intervalMs: 0, onStep: (step: string) => { if (step === 'committed') throw new Error('crash'); } } };
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
    expect(warnings.join('\n')).toMatch(/removed 0000000001\.log.*\n.*removed 0000000001\.2\.log|removed 0000000001\.2\.log.*\n.*removed 0000000001\.log/);
    for (let j = 0; j < 18; j++) expect(await read(again, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
    await closeIt(again);
    await clearIndex(dir);
    const rebuilt = openAt(dir, small);
    for (let j = 0; j < 18; j++) expect(await read(rebuilt, `a${j}`)).toBe(fixed(j, j < 10 ? 1 : 0));
  });
});

const canMount = (() => {
  if (process.getuid?.() !== 0) return false;
  const probe = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-mount-probe-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe], { stdio: 'ignore' });
    execFileSync('umount', [probe], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  } finally {
    fs.rmSync(probe, { recursive: true, force: true });
  }
})();

describe.skipIf(!canMount)('event log on a full disk (a tmpfs of 512 KB)', () => {
  it('refuses the write that does not fit, keeps what was answered, and goes on once there is space', async () => {
    const mnt = tmp();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', mnt]);
    try {
      const dir = tmp();
      fs.mkdirSync(path.join(mnt, 'events'));
      fs.symlinkSync(path.join(mnt, 'events'), path.join(dir, 'events'));
      fs.writeFileSync(path.join(mnt, 'filler'), Buffer.alloc(128 * 1024));
      const s = openAt(dir);
      const big = (i: number) => JSON.stringify({ id: `e${i}`, text: String(i).repeat(10_000).slice(0, 10_000) });
      const answered: number[] = [];
      let refused: unknown;
      for (let i = 0; i < 100 && refused === undefined; i++) {
        try {
          await s.events.write([put(`e${i}`, big(i))]);
          answered.push(i);
        } catch (e) {
          refused = e;
        }
      }
      expect(String((refused as Error)?.message)).toMatch(/ENOSPC|short write/);
      expect(answered.length).toBeGreaterThan(10);
      const last = answered.length; // the id of the refused write
      expect(await s.events.get('t', 'events', `e${last}`)).toBeUndefined();
      for (const i of answered) expect((await s.events.get('t', 'events', `e${i}`))?.json).toBe(big(i));

      fs.rmSync(path.join(mnt, 'filler'));
      await s.events.write([put('after', doc(1))]); // shorter than what the refused write left
      await closeIt(s);
      const warnings: string[] = [];
      const again = openAt(dir, { warn: (m) => warnings.push(m) });
      expect(warnings).toEqual([]); // nothing torn: the refused write was cut off at once
      for (const i of answered) expect((await again.events.get('t', 'events', `e${i}`))?.json).toBe(big(i));
      expect(await again.events.get('t', 'events', `e${last}`)).toBeUndefined();
      expect((await again.events.get('t', 'events', 'after'))?.json).toBe(doc(1));
      await closeIt(again);
    } finally {
      execFileSync('umount', ['-l', mnt]);
    }
  });
});

/** Drops the event index and its checkpoint, as if none of its commits had reached the disk. */
/**
 * Makes every LMDB commit of the event index fail (a full disk under LMDB, say) until the returned
 * function is called. lmdb-js answers all writes of one transaction with one promise, so the
 * index and meta writes all get the same rejected one.
 */
function failCommits(s: EmbeddedStores): () => void {
  const store = s.events as unknown as Record<'index' | 'meta', { put: unknown }>;
  const real = { index: store.index.put, meta: store.meta.put };
  const failure = Promise.reject(new Error('MDB_MAP_FULL'));
  failure.catch(() => {});
  store.index.put = store.meta.put = () => failure;
  return () => {
    store.index.put = real.index;
    store.meta.put = real.meta;
  };
}

/** Rewrites every index value as an earlier version wrote it: segment, offset, length (12 bytes). */
async function legacyIndex(dir: string): Promise<void> {
  const root = open({ path: path.join(dir, 'store', 'otm.mdb'), maxDbs: 8, compression: false });
  const index = root.openDB<Buffer, string>({ name: 'event-index', encoding: 'binary' });
  const entries = [...index.getRange({})].map(({ key, value }) => [key, Buffer.from(value)] as const);
  expect(entries.length).toBeGreaterThan(0);
  expect(entries.every(([, v]) => v.length === 16)).toBe(true);
  root.transactionSync(() => entries.forEach(([k, v]) => index.putSync(k, v.subarray(0, 12))));
  await root.close();
}

async function clearIndex(dir: string): Promise<void> {
  const root = open({ path: path.join(dir, 'store', 'otm.mdb'), maxDbs: 8, compression: false });
  root.openDB({ name: 'event-index', encoding: 'binary' }).clearSync();
  root.openDB({ name: 'event-log', encoding: 'string' }).clearSync();
  await root.close();
}
