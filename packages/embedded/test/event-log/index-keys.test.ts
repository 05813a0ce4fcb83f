/**
 * The bytes of the event log's keys (index-keys.ts, layout 2): each key read back as written, the
 * lists in the same order as with text keys, an index of the earlier layout rebuilt at start
 * (recovery.ts `relayout`), and the LMDB file mapped once (api-keys.ts `storeMapSize`).
 */
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { DocumentWrite, FeedEntry, ListPosition, ListScan } from '@otm/core';
import { storeMapSize } from '../../src/api-keys.js';
import { indexKeyCodec, keyCodecOf, readKeyPart, readTime, writeKeyPart, writeTime } from '../../src/event-log/index-keys.js';
import { INDEX_LAYOUT, LAYOUT_KEY, REBUILD_KEY } from '../../src/event-log/recovery.js';
import { useTempStores, withLmdb, type EmbeddedStores } from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

const uuid = (i: number) => `0000${i.toString(16).padStart(4, '0')}-0000-4000-8000-${(i * 7919).toString(16).padStart(12, '0')}`;
const V1 = '6b3e1f40-0c1a-4f7e-9a51-000000000101';
const V2 = 'ffffffff-0c1a-4f7e-9a51-000000000102';
const T0 = Date.UTC(2025, 0, 1);

function location(key: string, vehicle: string, time: number): string {
  return JSON.stringify({
    id: key,
    eventType: 'locationUpdateEvent',
    creationDate: new Date(time).toISOString(),
    vehicle: { associationType: 'reference', uuid: vehicle, entityType: 'vehicle' },
    geoReference: { type: 'latLonPointGeoReference', lat: 50, lon: 4 },
  });
}
const put = (key: string, json: string, rank = 4, tenant = 't'): DocumentWrite => ({
  op: 'put',
  tenant,
  doc: { kind: 'events', key, lifecycleRank: rank, json, stamp: { modified: 0, acceptedAt: 1000 } },
});
/** Whether an index key takes the compact form: an ASCII prefix without characters below 5, a UUID, a digit. */
const compactable = (key: string) =>
  /\|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\|\d$/.test(key) &&
  [...key.slice(0, -39)].every((c) => c.charCodeAt(0) >= 5 && c.charCodeAt(0) < 128);
const byTimeThenKey = (a: ListPosition, b: ListPosition) => a.at - b.at || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

async function pages(s: EmbeddedStores, scan: Omit<ListScan, 'limit' | 'after'>, limit: number): Promise<ListPosition[]> {
  const out: ListPosition[] = [];
  let after: ListPosition | undefined;
  for (;;) {
    const page = await s.events.list({ ...scan, limit, ...(after ? { after: { at: after.at, key: after.key } } : {}) });
    out.push(...page);
    if (page.length < limit) return out;
    after = page[page.length - 1];
  }
}

describe('event log keys (layout 2)', () => {
  it('reads every index key back as written; a UUID in it takes 16 bytes, anything else the bytes lmdb-js writes', async () => {
    const u = uuid(1);
    const strings = [
      `acme|events|${u}|4`,
      `acme|trips|${u}|0`,
      `|events|${u}|4`,
      `acme.eu_1-2|events|${u}|9`,
      `a|b|events|${u}|4`,
      `x|events|${u.toUpperCase()}|4`,
      `x|events|${u.slice(0, 35)}g|4`,
      `x|events|${u}|x`,
      `x|events|${u}4`,
      `a\u0003b|events|${u}|4`,
      `\u001bx|events|${u}|4`,
      `café|events|${u}|4`,
      't|events|k1|4',
      't|events|k1|',
      `${u}|4`,
      'a\u0003b|k',
      '~',
    ];
    await withLmdb(tmp(), (root) => {
      const codec = indexKeyCodec(root)!;
      const theirs = keyCodecOf(root)!;
      for (const key of strings) {
        const a = Buffer.alloc(512);
        const end = codec.writeKey(key, a, 0);
        expect(codec.readKey(a, 0, end), key).toBe(key);
        const b = Buffer.alloc(512);
        const their = theirs.writeKey(key, b, 0);
        // Compact where it can be; else byte for byte what lmdb-js writes.
        if (compactable(key)) expect(end, key).toBeLessThan(their);
        else expect(a.subarray(0, end), key).toEqual(b.subarray(0, their));
      }
      const a = Buffer.alloc(64);
      expect(codec.writeKey(`acme|events|${u}|4`, a, 0)).toBe(22);
      expect(codec.writeKey(`acme|trips|${u}|4`, a, 0)).toBe(28);
      // Each key once: none is written as another is.
      const written = new Set(strings.map((k) => a.subarray(0, codec.writeKey(k, a, 0)).toString('hex')));
      expect(written.size).toBe(strings.length);
    });
  });

  it('writes times and event keys so that their bytes sort as the text keys did, and reads them back', () => {
    const b = Buffer.alloc(64);
    const times = [-5, 0, 1, 999, T0, 2 ** 48 - 1, 2 ** 48, 2 ** 48 + 5, 999_999_999_999_999, 1e16, NaN, 12.7];
    const clamped = (t: number) => (t > 0 ? Math.min(999_999_999_999_999, Math.trunc(t)) : 0);
    const encoded = times.map((t) => {
      writeTime(t, b, 0);
      expect(readTime(b, 0), String(t)).toBe(clamped(t));
      return Buffer.from(b.subarray(0, 7));
    });
    const order = (xs: number[]) => xs.map((_, i) => i).sort((i, j) => xs[i]! - xs[j]! || i - j);
    expect(order(times.map(clamped)).map((i) => clamped(times[i]!))).toEqual(
      encoded
        .map((e, i) => [e, i] as const)
        .sort((x, y) => Buffer.compare(x[0], y[0]) || x[1] - y[1])
        .map(([, i]) => clamped(times[i]!)),
    );

    // UUIDs sort among themselves, and other keys among themselves, as their text does.
    const uuids = [uuid(3), uuid(1), 'ffffffff-0000-4000-8000-000000000000', '00000000-0000-4000-8000-000000000000', uuid(2)];
    const others = ['', 'a', 'a\u0000', 'a\u0001', 'ab', 'abcdefghijklmn', 'abcdefghijklmno', 'abcdefghijklmnop', 'é', 'z'.repeat(40)];
    for (const keys of [uuids, others]) {
      const parts = keys.map((k) => {
        const end = writeKeyPart(k, b, 0);
        expect(readKeyPart(b, 0, end), k).toBe(k);
        expect(end === 16, k).toBe(keys === uuids);
        return [Buffer.from(b.subarray(0, end)), k] as const;
      });
      expect(parts.sort((x, y) => Buffer.compare(x[0], y[0])).map(([, k]) => k)).toEqual([...keys].sort());
    }
  });

  it('lists UUID keys by time, then key, paged by keyset, within since and before, as text keys did', async () => {
    const s = openAt(tmp());
    // 60 events of two vehicles at 12 times (five at each), written out of order, one moved.
    const writes: DocumentWrite[] = [];
    for (let i = 0; i < 60; i++) {
      const j = (i * 37) % 60;
      writes.push(put(uuid(j), location(uuid(j), j % 2 ? V1 : V2, T0 + (j % 12) * 1000)));
    }
    await s.events.write(writes);
    await s.events.write([put(uuid(5), location(uuid(5), V2, T0 + 500))]);
    const expected = (vehicle?: string) =>
      Array.from({ length: 60 }, (_, j) => ({
        at: j === 5 ? T0 + 500 : T0 + (j % 12) * 1000,
        key: uuid(j),
        v: j === 5 || j % 2 === 0 ? V2 : V1,
      }))
        .filter((e) => vehicle === undefined || e.v === vehicle)
        .map(({ at, key }) => ({ at, key }))
        .sort(byTimeThenKey);
    const all = expected();
    for (const limit of [1, 7, 100]) {
      expect(await pages(s, { tenant: 't', kind: 'events', facet: '' }, limit)).toEqual(all);
      expect(await pages(s, { tenant: 't', kind: 'events', facet: `vehicle=${V1}` }, limit)).toEqual(expected(V1));
      expect(await pages(s, { tenant: 't', kind: 'events', facet: `vehicle=${V2}` }, limit)).toEqual(expected(V2));
    }
    const since = T0 + 3000;
    const before = T0 + 7000;
    expect(await s.events.list({ tenant: 't', kind: 'events', facet: '', limit: 100, since, before })).toEqual(
      all.filter((e) => e.at >= since && e.at < before),
    );
    expect(await s.events.list({ tenant: 't', kind: 'events', facet: '', limit: 100, after: all[20]!, since })).toEqual(
      all.filter((e) => e.at >= since).filter((e) => byTimeThenKey(e, all[20]!) > 0),
    );
    // A vehicle, a tenant or a facet value not stored: nothing.
    expect(await s.events.list({ tenant: 't', kind: 'events', facet: `vehicle=${V1.toUpperCase()}`, limit: 10 })).toEqual([]);
    expect(await s.events.list({ tenant: 't', kind: 'events', facet: 'vehicle=not-a-uuid', limit: 10 })).toEqual([]);
    expect(await s.events.list({ tenant: 'u', kind: 'events', facet: '', limit: 10 })).toEqual([]);
    const track: string[] = [];
    for await (const p of s.events.track({ tenant: 't', vehicle: V2, from: 0, to: 4e12 })) track.push(p.key);
    expect(track).toEqual(expected(V2).map((e) => e.key));
  });

  it('rebuilds an index and lists of the earlier layout from the log at start: the same answers, no feed entry twice', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write(Array.from({ length: 30 }, (_, i) => put(uuid(i), location(uuid(i), i % 3 ? V1 : V2, T0 + i * 1000))));
    await s.events.write([{ op: 'delete', tenant: 't', kind: 'events', key: uuid(4) }, put(uuid(7), location(uuid(7), V2, T0 + 99_000))]);
    const list = () => pages(s, { tenant: 't', kind: 'events', facet: '' }, 1000);
    const feed = async (x: EmbeddedStores): Promise<FeedEntry[]> => (await x.entities.feed.read({ tenant: 't', limit: 10_000 })).entries;
    const before = { all: await list(), v1: await s.events.list({ tenant: 't', kind: 'events', facet: `vehicle=${V1}`, limit: 100 }) };
    const positions = await s.entities.positions.positions('t');
    const changes = await feed(s);
    expect(changes).toHaveLength(32);
    await closeIt(s);

    // What the earlier layout left: text keys in the index and the lists, and no layout recorded.
    await withLmdb(dir, (root) => {
      const meta = root.openDB<string, string>({ name: 'event-log', encoding: 'string' });
      expect(meta.get(LAYOUT_KEY)).toBe(INDEX_LAYOUT);
      root.transactionSync(() => {
        meta.removeSync(LAYOUT_KEY);
        for (const name of ['event-index', 'event-time', 'event-vehicle', 'event-records']) {
          const db = root.openDB<Buffer, string>({ name, encoding: 'binary' });
          db.putSync(`t|events|${uuid(0)}|4`, Buffer.alloc(16));
          db.putSync(`t|001735689600000|${uuid(0)}`, Buffer.from([4]));
        }
      });
    });
    const warnings: string[] = [];
    const again = openAt(dir, { warn: (m) => warnings.push(m) });
    expect(warnings.join('\n')).toMatch(/rebuilding the event index and lists from the log/);
    expect(await pages(again, { tenant: 't', kind: 'events', facet: '' }, 1000)).toEqual(before.all);
    expect(await again.events.list({ tenant: 't', kind: 'events', facet: `vehicle=${V1}`, limit: 100 })).toEqual(before.v1);
    for (let i = 0; i < 30; i++) {
      const got = await again.events.get('t', 'events', uuid(i));
      if (i === 4) expect(got).toBeUndefined();
      else expect(JSON.parse(got!.json)).toMatchObject({ id: uuid(i) });
    }
    expect(await again.entities.positions.positions('t')).toEqual(positions);
    expect(await feed(again)).toEqual(changes);
    // Written after the rebuild: found, and its feed entry is the next one.
    await again.events.write([put(uuid(40), location(uuid(40), V1, T0 + 200_000))]);
    expect((await again.events.list({ tenant: 't', kind: 'events', facet: '', limit: 1000 })).at(-1)?.key).toBe(uuid(40));
    expect(await feed(again)).toHaveLength(33);
    await closeIt(again);
    await withLmdb(dir, (root) => {
      const meta = root.openDB<string, string>({ name: 'event-log', encoding: 'string' });
      expect([meta.get(LAYOUT_KEY), meta.get(REBUILD_KEY)]).toEqual([INDEX_LAYOUT, undefined]);
    });
    const third = openAt(dir, { warn: (m) => warnings.push(m) });
    expect(warnings.filter((w) => /rebuilding/.test(w))).toHaveLength(1);
    expect(await feed(third)).toHaveLength(33);
  });

  it('resumes a rebuild that a stop cut short: its replay records no feed entry or position again', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write(Array.from({ length: 20 }, (_, i) => put(uuid(i), location(uuid(i), i % 2 ? V1 : V2, T0 + i * 1000))));
    const feed = async (x: EmbeddedStores) => (await x.entities.feed.read({ tenant: 't', limit: 10_000 })).entries;
    const changes = await feed(s);
    const positions = await s.entities.positions.positions('t');
    await closeIt(s);
    // Where a stop leaves a rebuild: its mark, the index and lists part done, the checkpoint at the start.
    await withLmdb(dir, (root) => {
      const meta = root.openDB<string, string>({ name: 'event-log', encoding: 'string' });
      root.transactionSync(() => {
        meta.putSync(REBUILD_KEY, meta.get('checkpoint')!);
        meta.putSync('checkpoint', '1:0');
        root.openDB({ name: 'event-time', encoding: 'binary', keyEncoding: 'binary' }).clearSync();
      });
    });
    const warnings: string[] = [];
    const again = openAt(dir, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([]);
    expect(await feed(again)).toEqual(changes);
    expect(await again.entities.positions.positions('t')).toEqual(positions);
    expect((await again.events.list({ tenant: 't', kind: 'events', facet: '', limit: 100 })).map((p) => p.key)).toEqual(
      Array.from({ length: 20 }, (_, i) => uuid(i)),
    );
    await closeIt(again);
    await withLmdb(dir, (root) =>
      expect(root.openDB<string, string>({ name: 'event-log', encoding: 'string' }).get(REBUILD_KEY)).toBeUndefined(),
    );
  });

  it('maps the LMDB file once, with 1 TiB of address space on a 64-bit system', async () => {
    if (process.platform !== 'linux' || !/64/.test(process.arch)) return;
    const limits = fs.readFileSync('/proc/self/limits', 'utf8');
    if (/^Max address space\s+unlimited/m.test(limits)) expect(storeMapSize()).toBe(2 ** 40);
    const dir = tmp();
    const s = openAt(dir);
    // Enough to grow the file past lmdb-js's first map (128 KB) many times over.
    for (let b = 0; b < 4; b++) {
      await s.events.write(Array.from({ length: 5000 }, (_, i) => put(uuid(b * 5000 + i), location(uuid(b * 5000 + i), V1, T0 + i))));
    }
    await s.events.settled();
    const file = fs.realpathSync(`${dir}/store/otm.mdb`);
    expect(fs.statSync(file).size).toBeGreaterThan(4 << 20);
    const maps = fs
      .readFileSync('/proc/self/maps', 'utf8')
      .split('\n')
      .filter((l) => l.endsWith(` ${file}`));
    expect(maps).toHaveLength(1);
  });
});
