import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
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

describe('LMDB stores', () => {
  it('keeps every lifecycle version and returns the latest by default', async () => {
    const { s } = fresh();
    await s.entities.write([put('t', 'k1', 2, '{"v":"planned"}'), put('t', 'k1', 5, '{"v":"realized"}'), put('t', 'k1', 0, '{"v":"none"}')]);
    expect((await s.entities.get('t', 'actions', 'k1'))?.json).toBe('{"v":"realized"}');
    expect((await s.entities.get('t', 'actions', 'k1', 2))?.json).toBe('{"v":"planned"}');
    expect((await s.entities.get('t', 'actions', 'k1', 3))).toBeUndefined();
    expect((await s.entities.get('t', 'actions', 'k1'))?.lifecycleRank).toBe(5);
  });

  it('separates tenants, kinds and keys that share a prefix', async () => {
    const { s } = fresh();
    await s.entities.write([put('t', 'k1', 0, '"a"'), put('t2', 'k1', 0, '"b"'), put('t', 'k10', 0, '"c"')]);
    expect((await s.entities.get('t', 'actions', 'k1'))?.json).toBe('"a"');
    expect((await s.entities.get('t2', 'actions', 'k1'))?.json).toBe('"b"');
    expect(await s.entities.get('t', 'trips', 'k1')).toBeUndefined();
    await s.entities.write([{ op: 'delete', tenant: 't', kind: 'actions', key: 'k1' }]);
    expect(await s.entities.get('t', 'actions', 'k1')).toBeUndefined();
    expect((await s.entities.get('t', 'actions', 'k10'))?.json).toBe('"c"');
    expect((await s.entities.get('t2', 'actions', 'k1'))?.json).toBe('"b"');
  });

  it('deletes every lifecycle version', async () => {
    const { s } = fresh();
    await s.entities.write([put('t', 'k', 1, '1'), put('t', 'k', 4, '4')]);
    await s.entities.write([{ op: 'delete', tenant: 't', kind: 'actions', key: 'k' }]);
    expect(await s.entities.get('t', 'actions', 'k')).toBeUndefined();
    expect(await s.entities.get('t', 'actions', 'k', 1)).toBeUndefined();
  });

  it('keeps the entity and event databases apart, and both across a reopen', async () => {
    const { s, dir } = fresh();
    await s.entities.write([put('t', 'k', 0, '"entity"')]);
    await s.events.write([put('t', 'k', 0, '"event"')]);
    await s.close();
    opened.pop();
    const again = openEmbeddedStores(dir);
    opened.push(again);
    expect((await again.entities.get('t', 'actions', 'k'))?.json).toBe('"entity"');
    expect((await again.events.get('t', 'actions', 'k'))?.json).toBe('"event"');
  });
});
