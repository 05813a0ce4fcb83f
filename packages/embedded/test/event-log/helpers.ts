/**
 * What the event log's tests share: stores opened in folders of their own (closed and removed
 * after each test), documents to write, and ways to damage what a store left on disk. The port's
 * contract itself is test/contract/event-store.test.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach } from 'vitest';
import { open } from 'lmdb';
import { registry, type DocumentWrite } from '@otm/core';
import { openEmbeddedStores, type EmbeddedStores, type EmbeddedStoreOptions } from '../../src/index.js';

export type { EmbeddedStores, EmbeddedStoreOptions };

/** Folders and stores of the test under way, removed and closed after it. Call once at a file's top. */
export function useTempStores() {
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
  return { tmp, openAt, closeIt };
}

export const put = (key: string, json: string, rank = 0): DocumentWrite => ({
  op: 'put',
  tenant: 't',
  doc: { kind: 'events', key, lifecycleRank: rank, json },
});
export const del = (key: string): DocumentWrite => ({ op: 'delete', tenant: 't', kind: 'events', key });
export const doc = (i: number) =>
  JSON.stringify({ id: `e${i}`, eventType: 'locationUpdateEvent', name: `event ${i} é ${'x'.repeat(i % 50)}` });
export const segments = (dir: string) =>
  fs
    .readdirSync(path.join(dir, 'events'))
    .filter((f) => f.endsWith('.log'))
    .sort();
export const value = async (metric: string) => (await registry.getSingleMetric(metric)!.get()).values[0]!.value;
export const lastSegment = (dir: string) => path.join(dir, 'events', segments(dir).at(-1)!);
/** The part of the stores named `name` (`store lmdb`, `store event-log`, `event index commits`, `event log compaction`). */
export const partOf = (s: EmbeddedStores, name: string) => {
  const part = s.parts().find((p) => p.name === name);
  if (part === undefined)
    throw new Error(
      `no part ${name}: ${s
        .parts()
        .map((p) => p.name)
        .join(', ')}`,
    );
  return part;
};
export const read = async (s: EmbeddedStores, key: string) => (await s.events.get('t', 'events', key))?.json;

/** Opens the LMDB environment of a closed store's folder, for `fn` to look at or damage. */
export async function withLmdb<T>(dir: string, fn: (root: ReturnType<typeof open>) => T): Promise<T> {
  const root = open({ path: path.join(dir, 'store', 'otm.mdb'), maxDbs: 32, compression: false });
  try {
    return fn(root);
  } finally {
    await root.close();
  }
}

/** Drops the event index and its checkpoint, as if none of its commits had reached the disk. */
export async function clearIndex(dir: string): Promise<void> {
  const root = open({ path: path.join(dir, 'store', 'otm.mdb'), maxDbs: 32, compression: false });
  root.openDB({ name: 'event-index', encoding: 'binary' }).clearSync();
  root.openDB({ name: 'event-log', encoding: 'string' }).clearSync();
  await root.close();
}

/**
 * Makes every LMDB commit of the event index fail (a full disk under LMDB, say) until the returned
 * function is called. lmdb-js answers all writes of one transaction with one promise, so the
 * index and meta writes all get the same rejected one; the index commits (one transaction
 * callback with the lists, tracks and feed entries) and the units of the entity store, which share
 * the environment, get it too.
 */
export function failCommits(s: EmbeddedStores, error: Error = new Error('MDB_MAP_FULL')): () => void {
  const store = s.events as unknown as Record<'index' | 'meta', { put: unknown }> & { opts: { root: { childTransaction: unknown } } };
  const { root } = store.opts;
  const real = { index: store.index.put, meta: store.meta.put, child: root.childTransaction };
  const failure = Promise.reject(error);
  failure.catch(() => {});
  store.index.put = store.meta.put = root.childTransaction = () => failure;
  return () => {
    store.index.put = real.index;
    store.meta.put = real.meta;
    root.childTransaction = real.child;
  };
}
