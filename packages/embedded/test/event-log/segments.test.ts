/** Segment files: a new one when one is full, a bounded number open, a write that does not fit. */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { AdapterError } from '@otm/core';
import { clearIndex, doc, lastSegment, put, segments, useTempStores } from './helpers.js';

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

  it('a write that fails (an I/O error) is a retryable AdapterError and leaves nothing of itself in the log', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { warn: (m) => warnings.push(m) });
    await s.events.write([put('before', doc(1))]);
    const size = fs.statSync(lastSegment(dir)).size;
    const eio = Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
    const writev = vi.spyOn(fs, 'writev').mockImplementationOnce((...args: unknown[]) => (args.at(-1) as (e: Error) => void)(eio));
    try {
      const refused = await s.events.write([put('failed', doc(2))]).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(AdapterError);
      expect(refused).toMatchObject({ adapter: 'event-log', retryable: true, cause: eio });
      expect(String((refused as Error).message)).toMatch(/EIO/);
    } finally {
      writev.mockRestore();
    }
    expect(fs.statSync(lastSegment(dir)).size).toBe(size);
    expect(await s.events.get('t', 'events', 'failed')).toBeUndefined();
    // The same write, tried again, succeeds where the failed one would have gone.
    await s.events.write([put('failed', doc(2))]);
    await closeIt(s);
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

/**
 * A small tmpfs of its own, to run out of space for real; needs root (CI runs as root here), so
 * the test says it was skipped, and why, elsewhere.
 */
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
      // A full disk may have space again later: the same write can be retried.
      expect(refused).toBeInstanceOf(AdapterError);
      expect(refused).toMatchObject({ adapter: 'event-log', retryable: true });
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
