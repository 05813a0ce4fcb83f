/**
 * Lists in LMDB (facets.ts says what they are): for every (tenant, kind, facet) the entities that
 * have the facet, in keyset order, as keys without values, so that a list page is one range read
 * whatever the number of entities. Two databases a store:
 *
 * - the entries: `tenant|kind|<facet escaped>|<at as 15 digits>|<key>` -> '' (the facet escaped
 *   so that the separator never occurs in it: '%' as '%25', '|' as '%7C');
 * - the list records: `tenant|kind|key|` -> the entity's ListRecord (JSON), which says where its
 *   entries are, so that they are found again to be moved or removed.
 *
 * Entries are only ever changed inside a write transaction, together with the record, and from the
 * record found in that same transaction (not from what the caller read before): a change that
 * raced with another can never leave an entry behind that no record names.
 *
 * A data folder of 0.1.0, written before lists existed, has its entities listed at the first start
 * on it (`catchUpLists`).
 *
 * These are the entity store's lists. The event log keeps its own, fewer and smaller, with entries
 * of the same shape (`<at as 15 digits>|<key>` after a base), read by `readEntries` too
 * (event-log/effects.ts).
 */
import type { Database, RootDatabase } from 'lmdb';
import { isKindSegment, type KindSegment } from '@otm/model';
import {
  decodeListRecord,
  decodeVersion,
  encodeListRecord,
  listRecordOfVersions,
  listedFacets,
  type ListPosition,
  type ListRecord,
  type ListScan,
  type StoredDocument,
} from '@otm/core';
import { END, SEP, prefixOf } from './keys.js';

export type Str = Database<string, string>;

const MAX15 = 999_999_999_999_999;
/** A time (ms) as 15 digits, so that keys sort by it; before the epoch counts as 0 (and beyond 15 digits as the largest). */
export const pad15 = (n: number) => String(n > 0 ? Math.min(MAX15, Math.trunc(n)) : 0).padStart(15, '0');

export const escapeFacet = (f: string) => (f.includes('%') || f.includes(SEP) ? f.replace(/%/g, '%25').replace(/\|/g, '%7C') : f);

/** Where the entries of one list start: every entry of (tenant, kind, facet) begins so. */
export const listBase = (tenant: string, kind: string, facet: string) => `${tenant}${SEP}${kind}${SEP}${escapeFacet(facet)}${SEP}`;

/** The two databases of a store's lists. */
export interface ListDbs {
  readonly entries: Str;
  readonly records: Str;
}

/** Reads a stored list record (outside or inside a transaction). */
export function readListRecord(dbs: ListDbs, tenant: string, kind: string, key: string): ListRecord | undefined {
  const raw = dbs.records.get(prefixOf(tenant, kind, key));
  return raw === undefined ? undefined : decodeListRecord(raw);
}

/**
 * Inside a write transaction: lists the entity under `next`'s facets at `next.at` (undefined: no
 * longer listed) instead of where its stored record says it was, and stores `next` as its record
 * (`encoded`: what to store, when the caller keeps more in it than the ListRecord). Entries that
 * stay where they are are not written again.
 */
export function relist(
  dbs: ListDbs,
  tenant: string,
  kind: string,
  key: string,
  next: ListRecord | undefined,
  previous = readListRecord(dbs, tenant, kind, key),
  encoded?: string,
): void {
  const keep = new Set<string>();
  const nextFacets = next === undefined ? [] : listedFacets(next);
  if (previous !== undefined) {
    const stays = next !== undefined && next.at === previous.at ? new Set(nextFacets) : undefined;
    for (const f of listedFacets(previous)) {
      if (stays?.has(f)) keep.add(f);
      else void dbs.entries.remove(`${listBase(tenant, kind, f)}${pad15(previous.at)}${SEP}${key}`);
    }
  }
  const recordKey = prefixOf(tenant, kind, key);
  if (next === undefined) {
    if (previous !== undefined) void dbs.records.remove(recordKey);
    return;
  }
  for (const f of nextFacets) if (!keep.has(f)) void dbs.entries.put(`${listBase(tenant, kind, f)}${pad15(next.at)}${SEP}${key}`, '');
  void dbs.records.put(recordKey, encoded ?? encodeListRecord(next));
}

/**
 * One page of a list: one range read of the entries of (tenant, kind, facet) strictly after
 * `after`, at or after `since`, before `before`, at most `limit` of them.
 */
export function readList(entries: Str, scan: ListScan): ListPosition[] {
  return readEntries(entries, listBase(scan.tenant, scan.kind, scan.facet), scan);
}

/**
 * One page of the entries `base<at as 15 digits>|<key>` of `db` (a list's, or the event log's
 * lists, event-log/effects.ts), with `scan`'s keyset bounds; its tenant, kind and facet are not
 * looked at (`base` stands for them).
 */
export function readEntries(
  db: Pick<Database<unknown, string>, 'getKeys'>,
  base: string,
  scan: Omit<ListScan, 'tenant' | 'kind' | 'facet'>,
): ListPosition[] {
  if (scan.limit <= 0) return [];
  let start = base;
  let skip: string | undefined;
  if (scan.after !== undefined) {
    start = skip = `${base}${pad15(scan.after.at)}${SEP}${scan.after.key}`;
  }
  if (scan.since !== undefined) {
    const since = `${base}${pad15(scan.since)}${SEP}`;
    if (since > start) {
      start = since;
      skip = undefined;
    }
  }
  const end = scan.before === undefined ? base + END : `${base}${pad15(scan.before)}${SEP}`;
  if (start >= end) return [];
  const out: ListPosition[] = [];
  for (const k of db.getKeys({ start, end, limit: scan.limit + 1 })) {
    if (k === skip) continue;
    const rest = k.slice(base.length);
    out.push({ at: Number(rest.slice(0, 15)), key: rest.slice(16) });
    if (out.length >= scan.limit) break;
  }
  return out;
}

/** Entities listed a write transaction when lists are caught up at start. */
const CATCH_UP_BATCH = 1_000;

/**
 * Lists the entities stored without a list record: those a data folder of 0.1.0 holds, written
 * before lists existed. Once, at the first start on such a folder (then `meta`'s `lists` says the
 * lists cover every entity; a new folder is marked at once): every version of `entities`
 * (`tenant|kind|key|rank` -> `modified acceptedAt \n json`) is read in key order, and each entity
 * with no record is listed as a unit would list it (core's `listRecordOfVersions`: at the newest
 * time one of its versions was accepted, under the facets of each), a write transaction a batch. An
 * entity that has a record keeps it. A stop in the middle leaves the mark unset: the next start
 * goes on, the entities listed already being skipped. `starting` is told first when there are
 * entities to look at. Returns how many it listed.
 */
export function catchUpLists(root: RootDatabase, entities: Str, dbs: ListDbs, meta: Str, starting?: () => void): number {
  if (meta.get(LISTS_MARK) === LISTS_COMPLETE) return 0;
  // A folder with entities: say so before reading them all, which takes a while on a large one.
  for (const _ of entities.getKeys({ limit: 1 })) starting?.();
  let listed = 0;
  let batch: Array<{ tenant: string; kind: KindSegment; key: string; versions: StoredDocument[] }> = [];
  const flush = () => {
    const todo = batch;
    batch = [];
    root.transactionSync(() => {
      for (const e of todo) {
        if (readListRecord(dbs, e.tenant, e.kind, e.key) !== undefined) continue;
        const record = listRecordOfVersions(e.kind, e.versions);
        if (record === undefined) continue;
        relist(dbs, e.tenant, e.kind, e.key, record, undefined);
        listed++;
      }
    });
  };
  let current: { prefix: string; tenant: string; kind: KindSegment; key: string; versions: StoredDocument[] } | undefined;
  for (const { key: k, value } of entities.getRange({})) {
    // `tenant|kind|key|rank`, read from the right: the key and the kind never hold the separator.
    const r = k.lastIndexOf(SEP);
    const ke = k.lastIndexOf(SEP, r - 1);
    const ki = k.lastIndexOf(SEP, ke - 1);
    if (ki <= 0) continue;
    const tenant = k.slice(0, ki);
    const kind = k.slice(ki + 1, ke);
    const key = k.slice(ke + 1, r);
    const rank = Number(k.slice(r + 1));
    if (!isKindSegment(kind) || !Number.isInteger(rank)) continue;
    const prefix = k.slice(0, r + 1);
    if (current?.prefix !== prefix) {
      if (current !== undefined) batch.push(current);
      if (batch.length >= CATCH_UP_BATCH) flush();
      current = { prefix, tenant, kind, key, versions: [] };
    }
    current.versions.push(decodeVersion(kind, key, rank, value));
  }
  if (current !== undefined) batch.push(current);
  if (batch.length > 0) flush();
  meta.putSync(LISTS_MARK, LISTS_COMPLETE);
  return listed;
}

/** The key of `meta` that says the lists cover every entity, and its value. */
const LISTS_MARK = 'lists';
const LISTS_COMPLETE = 'complete';
