/** Latest positions in LMDB and the in-memory copy that reads answer (positions.ts). */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { open, type RootDatabase } from 'lmdb';
import { afterEach, describe, expect, it } from 'vitest';
import { LmdbPositions, type Fix } from '../src/positions.js';

let root: RootDatabase | undefined;
let dir = '';
afterEach(async () => {
  await root?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function openPositions(): LmdbPositions {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-positions-'));
  root = open({ path: dir });
  return new LmdbPositions(root.openDB<string, string>({ name: 'positions', encoding: 'string' }));
}

const fix = (vehicle: string, time: number, eventKey = `e-${vehicle}-${time}`, tenant = 't'): Fix => ({
  tenant,
  vehicle,
  time,
  lat: 52 + time / 1e6,
  lon: 4,
  speedKmh: null,
  heading: null,
  eventKey,
});

/** Offers `fixes` in one write transaction, then hands what was stored to the copies. */
async function offer(p: LmdbPositions, fixes: Fix[]): Promise<void> {
  const stored = await root!.transaction(() => p.offer(fixes));
  p.committed(stored);
}

describe('latest positions (embedded)', () => {
  it('keeps the newest fix a vehicle, in any order of arrival, the copy equal to what is stored', async () => {
    const p = openPositions();
    // Seeded pseudo-random arrivals: new vehicles, moves, late and repeated fixes.
    let seed = 7;
    const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    const newest = new Map<string, Fix>();
    // Read once early, so that the copy in memory exists and is kept up to date from then on.
    expect(p.positions('t')).toEqual([]);
    for (let round = 0; round < 40; round++) {
      const batch: Fix[] = [];
      for (let i = 0; i < 25; i++) {
        const f = fix(`v${rnd(300).toString().padStart(3, '0')}${rnd(2) ? '-x' : ''}`, rnd(1_000));
        batch.push(f);
        const had = newest.get(f.vehicle);
        if (had === undefined || f.time > had.time || (f.time === had.time && f.eventKey > had.eventKey)) newest.set(f.vehicle, f);
      }
      await offer(p, batch);
      const expected = [...newest.values()].sort((a, b) => (a.vehicle < b.vehicle ? -1 : 1)).map(({ tenant: _, ...rest }) => rest);
      const read = p.positions('t');
      expect(read).toEqual(expected);
      // What a fresh copy (a restart) would read from LMDB is the same.
      expect([...p.readStored('t')].sort((a, b) => (a.vehicle < b.vehicle ? -1 : 1))).toEqual(expected);
    }
  });

  it('answers the same list while nothing moved, a new one after a move, and keeps tenants apart', async () => {
    const p = openPositions();
    await offer(p, [fix('b', 10), fix('a', 10), fix('c', 10, 'x', 'other')]);
    const first = p.positions('t');
    expect(first.map((x) => x.vehicle)).toEqual(['a', 'b']);
    expect(p.positions('t')).toBe(first);
    await offer(p, [fix('a', 5)]); // older: nothing moves
    expect(p.positions('t')).toBe(first);
    await offer(p, [fix('a', 20)]);
    const second = p.positions('t');
    expect(second).not.toBe(first);
    expect(second.map((x) => [x.vehicle, x.time])).toEqual([
      ['a', 20],
      ['b', 10],
    ]);
    expect(first.map((x) => x.time)).toEqual([10, 10]); // an answer given is never changed afterwards
    expect(p.positions('other').map((x) => x.vehicle)).toEqual(['c']);
  });

  it('takes a later version of the newest event (its position corrected: same time, same id), as the event store does', async () => {
    const p = openPositions();
    expect(p.positions('t')).toEqual([]);
    await offer(p, [fix('a', 10, 'e1'), fix('a', 20, 'e2')]);
    await offer(p, [{ ...fix('a', 20, 'e2'), lat: 51 }]);
    expect(p.positions('t').map((x) => [x.eventKey, x.lat])).toEqual([['e2', 51]]);
    // Two versions in one offer: the last one offered, as the log holds them.
    await offer(p, [
      { ...fix('a', 20, 'e2'), lat: 50 },
      { ...fix('a', 20, 'e2'), lat: 49 },
    ]);
    expect(p.positions('t').map((x) => [x.eventKey, x.lat])).toEqual([['e2', 49]]);
    expect(p.readStored('t').map((x) => [x.eventKey, x.lat])).toEqual([['e2', 49]]);
    // A correction of an older event does not move the vehicle back.
    await offer(p, [{ ...fix('a', 10, 'e1'), lat: 48 }]);
    expect(p.readStored('t').map((x) => [x.eventKey, x.lat])).toEqual([['e2', 49]]);
  });
});
