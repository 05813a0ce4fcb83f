import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AdapterError, entityCacheBytes, entityCacheEntries } from '@otm/core';
import { openEmbeddedStores, type EmbeddedStores } from '../src/index.js';

const dirs: string[] = [];
const opened: EmbeddedStores[] = [];
function fresh(dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-lmdb-'))) {
  dirs.push(dir);
  const s = openEmbeddedStores(dir);
  opened.push(s);
  return { s, dir };
}
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close().catch(() => {});
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const put = (tenant: string, key: string, rank: number, json: string) =>
  ({ op: 'put', tenant, doc: { kind: 'actions', key, lifecycleRank: rank, json } }) as const;
type W = ReturnType<typeof put> | { op: 'delete'; tenant: string; kind: 'actions'; key: string };
/** Writes to the entity store through a unit of work. */
const write = (s: EmbeddedStores, writes: W[]) =>
  s.entities.unit(async (tx) => {
    for (const w of writes) {
      if (w.op === 'put') tx.put(w.tenant, { ...w.doc, stamp: { modified: 0, acceptedAt: 1 } });
      else tx.delete(w.tenant, w.kind, w.key);
    }
  });

describe('LMDB stores', () => {
  it('keeps every lifecycle version and returns the latest by default', async () => {
    const { s } = fresh();
    await write(s, [put('t', 'k1', 2, '{"v":"planned"}'), put('t', 'k1', 5, '{"v":"realized"}'), put('t', 'k1', 0, '{"v":"none"}')]);
    expect((await s.entities.get('t', 'actions', 'k1'))?.json).toBe('{"v":"realized"}');
    expect((await s.entities.get('t', 'actions', 'k1', 2))?.json).toBe('{"v":"planned"}');
    expect(await s.entities.get('t', 'actions', 'k1', 3)).toBeUndefined();
    expect((await s.entities.get('t', 'actions', 'k1'))?.lifecycleRank).toBe(5);
    expect((await s.entities.get('t', 'actions', 'k1'))?.stamp).toEqual({ modified: 0, acceptedAt: 1 });
  });

  it('keeps a read latest version with its bytes in memory of their own', async () => {
    const { s } = fresh();
    await write(s, [put('t', 'k1', 0, '{"v":"cached"}')]);
    const first = await s.entities.get('t', 'actions', 'k1');
    expect(await s.entities.get('t', 'actions', 'k1')).toBe(first); // from the cache
    // Not a slice of Node's 8 KiB buffer pool, which a cached document would keep alive.
    expect(first!.bytes!.toString()).toBe('{"v":"cached"}');
    expect(first!.bytes!.buffer.byteLength).toBe(first!.bytes!.length);
  });

  it('counts its cache of latest versions in otm_entity_cache_entries and otm_entity_cache_bytes', async () => {
    const gauge = async (g: typeof entityCacheEntries) => (await g.get()).values[0]?.value ?? 0;
    const { s } = fresh();
    const [entries, bytes] = [await gauge(entityCacheEntries), await gauge(entityCacheBytes)];
    await write(s, [put('t', 'k1', 0, '{"v":"cached"}'), put('t', 'k2', 0, '{"v":"not read"}')]);
    await s.entities.get('t', 'actions', 'k1');
    expect([await gauge(entityCacheEntries), await gauge(entityCacheBytes)]).toEqual([entries + 1, bytes + 14 + 100]);
    await s.close();
    expect([await gauge(entityCacheEntries), await gauge(entityCacheBytes)]).toEqual([entries, bytes]);
  });

  it('lets a unit read its own writes, and writes nothing when it throws', async () => {
    const { s } = fresh();
    await expect(
      s.entities.unit(async (tx) => {
        tx.put('t', { kind: 'trips', key: 'k', lifecycleRank: 0, json: '"x"', stamp: { modified: 0, acceptedAt: 1 } });
        expect((await tx.get('t', 'trips', 'k'))?.json).toBe('"x"');
        tx.delete('t', 'trips', 'k');
        expect(await tx.get('t', 'trips', 'k')).toBeUndefined();
        throw new Error('abandon');
      }),
    ).rejects.toThrow('abandon');
    expect(await s.entities.get('t', 'trips', 'k')).toBeUndefined();
  });

  it('keeps holders and pending effects, in order, across units', async () => {
    const { s } = fresh();
    const child = { kind: 'vehicles', key: 'v' } as const;
    const effect = (acceptedAt: number, eventKey: string) => ({ acceptedAt, eventKey, event: { n: eventKey } });
    await s.entities.unit(async (tx) => {
      tx.addHolder('t', child, { kind: 'trips', key: 'a', lifecycleRank: 0 });
      tx.addHolder('t', child, { kind: 'actions', key: 'b', lifecycleRank: 2 });
      tx.addPending('t', 'trips', 'x', effect(20, 'e2'));
      tx.addPending('t', 'trips', 'x', effect(10, 'e1'));
    });
    await s.entities.unit(async (tx) => {
      expect(await tx.holders('t', 'vehicles', 'v')).toEqual([
        { kind: 'actions', key: 'b', lifecycleRank: 2 },
        { kind: 'trips', key: 'a', lifecycleRank: 0 },
      ]);
      expect(await tx.holders('t2', 'vehicles', 'v')).toEqual([]);
      expect((await tx.pending('t', 'trips', 'x')).map((e) => e.eventKey)).toEqual(['e1', 'e2']);
      tx.removeHolder('t', child, { kind: 'trips', key: 'a', lifecycleRank: 0 });
      tx.removePending('t', 'trips', 'x', effect(10, 'e1'));
    });
    await s.entities.unit(async (tx) => {
      expect(await tx.holders('t', 'vehicles', 'v')).toEqual([{ kind: 'actions', key: 'b', lifecycleRank: 2 }]);
      expect((await tx.pending('t', 'trips', 'x')).map((e) => e.eventKey)).toEqual(['e2']);
    });
  });

  it('separates tenants, kinds and keys that share a prefix', async () => {
    const { s } = fresh();
    await write(s, [put('t', 'k1', 0, '"a"'), put('t2', 'k1', 0, '"b"'), put('t', 'k10', 0, '"c"')]);
    expect((await s.entities.get('t', 'actions', 'k1'))?.json).toBe('"a"');
    expect((await s.entities.get('t2', 'actions', 'k1'))?.json).toBe('"b"');
    expect(await s.entities.get('t', 'trips', 'k1')).toBeUndefined();
    await write(s, [{ op: 'delete', tenant: 't', kind: 'actions', key: 'k1' }]);
    expect(await s.entities.get('t', 'actions', 'k1')).toBeUndefined();
    expect((await s.entities.get('t', 'actions', 'k10'))?.json).toBe('"c"');
    expect((await s.entities.get('t2', 'actions', 'k1'))?.json).toBe('"b"');
  });

  it('deletes every lifecycle version', async () => {
    const { s } = fresh();
    await write(s, [put('t', 'k', 1, '1'), put('t', 'k', 4, '4')]);
    await write(s, [{ op: 'delete', tenant: 't', kind: 'actions', key: 'k' }]);
    expect(await s.entities.get('t', 'actions', 'k')).toBeUndefined();
    expect(await s.entities.get('t', 'actions', 'k', 1)).toBeUndefined();
  });

  it('keeps the entity and event databases apart, and both across a reopen', async () => {
    const { s, dir } = fresh();
    await write(s, [put('t', 'k', 0, '"entity"')]);
    await s.events.write([put('t', 'k', 0, '"event"')]);
    await s.close();
    opened.pop();
    const again = openEmbeddedStores(dir);
    opened.push(again);
    expect((await again.entities.get('t', 'actions', 'k'))?.json).toBe('"entity"');
    expect((await again.events.get('t', 'actions', 'k'))?.json).toBe('"event"');
  });

  it('refuses a unit LMDB cannot store (a key longer than it takes) with a non-retryable AdapterError', async () => {
    const { s } = fresh();
    const refused = await write(s, [put('t', 'fine', 0, '"a"'), put('t', 'k'.repeat(3000), 0, '"b"')]).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({ adapter: 'lmdb', retryable: false, message: expect.stringMatching(/key size/i) });
  });

  it('refuses a unit once the store is closed (a shutdown) with a retryable AdapterError', async () => {
    const { s } = fresh();
    await s.close();
    const refused = await write(s, [put('t', 'k', 0, '"a"')]).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({ adapter: 'lmdb', retryable: true });
  });
});
