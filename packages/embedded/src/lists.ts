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
 * These are the entity store's lists. The event log keeps its own, fewer and smaller, with entries
 * of the same shape (`<at as 15 digits>|<key>` after a base), read by `readEntries` too
 * (event-log/effects.ts).
 */
import type { Database } from 'lmdb';
import { decodeListRecord, encodeListRecord, listedFacets, type ListPosition, type ListRecord, type ListScan } from '@otm/core';
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
