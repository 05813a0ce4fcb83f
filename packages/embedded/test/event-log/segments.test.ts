/** Segment files: a new one when one is full, a bounded number open, a write that does not fit. */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { AdapterError, StorageRefused } from '@otm/core';
import { canMountTmpfs, mountTmpfs } from '../../../../test/tmpfs.js';
import { clearIndex, doc, lastSegment, partOf, put, segments, useTempStores } from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

describe('event log segments', () => {
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

  it('a write that fails (an I/O error) is a retryable StorageRefused and leaves nothing of itself in the log', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { warn: (m) => warnings.push(m), probeMs: 20 });
    await s.events.write([put('before', doc(1))]);
    const size = fs.statSync(lastSegment(dir)).size;
    const eio = Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
    const writev = vi.spyOn(fs, 'writev').mockImplementationOnce((...args: unknown[]) => (args.at(-1) as (e: Error) => void)(eio));
    try {
      const refused = await s.events.write([put('failed', doc(2))]).catch((e: unknown) => e);
      // EIO: more room may cure it (LMDB reports a short write as EIO): refused, and the store says so.
      expect(refused).toBeInstanceOf(StorageRefused);
      expect(refused).toMatchObject({ adapter: 'event-log', retryable: true, refusal: 'io', cause: eio });
      expect(String((refused as Error).message)).toMatch(/EIO/);
    } finally {
      writev.mockRestore();
    }
    expect(warnings).toEqual([expect.stringMatching(/^event-log: writes are refused from now on: an I\/O error/)]);
    expect(fs.statSync(lastSegment(dir)).size).toBe(size);
    expect(await s.events.get('t', 'events', 'failed')).toBeUndefined();
    // The probe finds the log writable again; the same write then succeeds where the failed one would have gone.
    await vi.waitFor(() => expect(partOf(s, 'store event-log').status().up).toBe(true), { timeout: 5_000 });
    await s.events.write([put('failed', doc(2))]);
    await closeIt(s);
    warnings.length = 0;
    const again = openAt(dir, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([]);
    expect((await again.events.get('t', 'events', 'before'))?.json).toBe(doc(1));
    expect((await again.events.get('t', 'events', 'failed'))?.json).toBe(doc(2));
  });

  it('a document the index names but its segment file does not hold is a non-retryable AdapterError', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write([put('gone', doc(1))]);
    // The file cut short behind the store's back: no retry brings the bytes back.
    fs.truncateSync(lastSegment(dir), 4);
    const refused = await s.events.get('t', 'events', 'gone').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({ adapter: 'event-log', retryable: false, message: expect.stringMatching(/short read/) });
  });
});

const canMount = canMountTmpfs();

/**
 * A small tmpfs of its own, to run out of space for real; needs root (CI runs as root here), so
 * the test says it was skipped, and why, elsewhere.
 */
describe.skipIf(!canMount)('event log on a full disk (a tmpfs of 512 KB)', () => {
  it('refuses the write that does not fit, keeps what was answered, and goes on once there is space', async () => {
    const { dir: mnt, unmount } = mountTmpfs('512k');
    try {
      const dir = tmp();
      fs.mkdirSync(path.join(mnt, 'events'));
      fs.symlinkSync(path.join(mnt, 'events'), path.join(dir, 'events'));
      fs.writeFileSync(path.join(mnt, 'filler'), Buffer.alloc(128 * 1024));
      const s = openAt(dir, { probeMs: 20 });
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
      // A full disk may have space again later: the same write can be retried.
      expect(refused).toBeInstanceOf(StorageRefused);
      expect(refused).toMatchObject({ adapter: 'event-log', retryable: true });
      expect(partOf(s, 'store event-log').status()).toMatchObject({ up: false, reason: expect.stringMatching(/free/) });
      expect(answered.length).toBeGreaterThan(10);
      const last = answered.length; // the id of the refused write
      expect(await s.events.get('t', 'events', `e${last}`)).toBeUndefined();
      for (const i of answered) expect((await s.events.get('t', 'events', `e${i}`))?.json).toBe(big(i));

      fs.rmSync(path.join(mnt, 'filler'));
      // Room again: the probe opens the log to writes by itself.
      await vi.waitFor(() => expect(partOf(s, 'store event-log').status().up).toBe(true), { timeout: 5_000 });
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
      unmount();
    }
  });
});
