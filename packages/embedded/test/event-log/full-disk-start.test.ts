/**
 * A start on a full disk after a crash (issue 42): the event index is behind the log (its last
 * commits lost), and LMDB cannot commit the replay. The start goes on: the replayed changes are
 * held in memory, readable, and committed by the index writer once LMDB has room again. Needs a
 * tmpfs of its own to fill for real (root; CI runs as root here): LMDB's write failures cannot be
 * injected from JavaScript at the file layer, so where mounting is refused this is skipped, and says so.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { canMountTmpfs, mountTmpfs } from '../../../../test/tmpfs.js';
import { LAYOUT_KEY } from '../../src/event-log/recovery.js';
import { doc, failCommits, partOf, put, read, useTempStores, withLmdb } from './helpers.js';

const { openAt, closeIt } = useTempStores();

/** Fills the file system of `dir` with files `filler-N` until it says no; returns a function that removes them. */
function fill(dir: string): () => void {
  const made: string[] = [];
  for (const size of [262_144, 4096, 512]) {
    for (;;) {
      const file = path.join(dir, `filler-${made.length}`);
      try {
        fs.writeFileSync(file, Buffer.alloc(size, 1));
        made.push(file);
      } catch {
        fs.rmSync(file, { force: true });
        break;
      }
    }
  }
  return () => made.forEach((f) => fs.rmSync(f, { force: true }));
}

describe.skipIf(!canMountTmpfs())(
  'a start on a full disk with the event index behind the log (a tmpfs of 4 MB; skipped where mount is refused)',
  () => {
    it('serves every event from memory, and commits the index once there is room', async () => {
      const { dir: mnt, unmount } = mountTmpfs('4m');
      try {
        const dir = path.join(mnt, 'data');
        const s = openAt(dir, { probeMs: 20 });
        await s.events.write([put('before', doc(0))]);
        await s.events.settled();
        // The index commits of what follows are lost, as in a crash before them (kill -9).
        failCommits(s);
        const keys = Array.from({ length: 300 }, (_, i) => `e${i}`);
        for (let i = 0; i < keys.length; i += 50) await s.events.write(keys.slice(i, i + 50).map((k, j) => put(k, doc(i + j))));
        await closeIt(s);

        const room = fill(mnt);
        const warnings: string[] = [];
        const again = openAt(dir, { warn: (m) => warnings.push(m), probeMs: 20 });
        expect(warnings.join('\n')).toMatch(/the disk is full: \d+ changes replayed from the log are held in memory/);
        expect(partOf(again, 'store lmdb').status().up).toBe(false);
        expect(await read(again, 'before')).toBe(doc(0));
        for (const [i, k] of keys.entries()) expect(await read(again, k)).toBe(doc(i));

        room();
        // The writer tries its commit again by itself; LMDB's probe opens its gate.
        await vi.waitFor(
          async () => {
            const listed = await again.events.list({ tenant: 't', kind: 'events', facet: '', limit: 1000 });
            expect(listed.length).toBe(keys.length + 1);
          },
          { timeout: 40_000, interval: 200 },
        );
        await vi.waitFor(() => expect(partOf(again, 'store lmdb').status().up).toBe(true), { timeout: 10_000 });
        await closeIt(again);
        warnings.length = 0;
        const third = openAt(dir, { warn: (m) => warnings.push(m) });
        // The index covers the log: nothing replayed, nothing held (the folder is still small: it says so).
        expect(warnings).toEqual([
          expect.stringMatching(/^the data folder .* has [\d.]+ (KiB|MiB) free: writes are refused \(503\) while it is full/),
        ]);
        for (const [i, k] of keys.entries()) expect(await read(third, k)).toBe(doc(i));
        await closeIt(third);
      } finally {
        unmount();
      }
    }, 90_000);

    it('a start that must rebuild the index (an earlier layout) serves every event too, and rebuilds it once there is room', async () => {
      const { dir: mnt, unmount } = mountTmpfs('4m');
      try {
        const dir = path.join(mnt, 'data');
        const s = openAt(dir);
        for (let i = 0; i < 200; i += 50) await s.events.write(Array.from({ length: 50 }, (_, j) => put(`e${i + j}`, doc(i + j))));
        await closeIt(s);
        // No layout recorded: the next start removes the index and rebuilds it from the log, which writes.
        await withLmdb(dir, (root) => {
          const meta = root.openDB<string, string>({ name: 'event-log', encoding: 'string' });
          root.transactionSync(() => meta.removeSync(LAYOUT_KEY));
        });
        const room = fill(mnt);
        // The rebuild's replay cannot be committed: held in memory, every event served.
        const full = openAt(dir, { probeMs: 20 });
        for (let i = 0; i < 200; i++) expect(await read(full, `e${i}`)).toBe(doc(i));
        room();
        await vi.waitFor(
          async () => expect(await full.events.list({ tenant: 't', kind: 'events', facet: '', limit: 1000 })).toHaveLength(200),
          { timeout: 40_000, interval: 200 },
        );
        await closeIt(full);
        const again = openAt(dir);
        for (let i = 0; i < 200; i++) expect(await read(again, `e${i}`)).toBe(doc(i));
        await closeIt(again);
      } finally {
        unmount();
      }
    }, 60_000);
  },
);
