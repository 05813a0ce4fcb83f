/**
 * The LMDB entity store's unit of work (lmdb-store.ts `unit`): reads through an overlay of the
 * unit's own writes, which it queues as operations; `writeOps` writes them inside the unit's
 * transaction.
 */
import type { RootDatabase } from 'lmdb';
import type { KindSegment } from '@otm/model';
import {
  decodeListRecord,
  decodeVersion,
  encodeVersion,
  type EntityTx,
  type HolderRef,
  type ListPosition,
  type ListRecord,
  type ListScan,
  type PendingEffect,
  type StoredDocument,
  type VersionStamp,
} from '@otm/core';
import type { FeedSeq } from './feed.js';
import { END, SEP, prefixOf, ranksToTry } from './keys.js';
import { pad15 as pad, readList, relist, type ListDbs, type Str } from './lists.js';

/** The stored value of one document at `rank`, or of its latest (highest-ranked) version. */
export function readVersion(db: Str, prefix: string, rank?: number): { rank: number; raw: string } | undefined {
  for (const r of ranksToTry(rank)) {
    const raw = db.get(prefix + r);
    if (raw !== undefined) return { rank: r, raw };
  }
  return undefined;
}

/** Removes every version of one document (inside a write transaction: `void`, see LmdbEntityStore.unit). */
function removeVersions(db: Str, prefix: string): void {
  for (const k of db.getKeys({ start: prefix, end: prefix + '9' })) void db.remove(k);
}

export type Op =
  | { t: 'put'; tenant: string; doc: StoredDocument & { stamp: VersionStamp } }
  | { t: 'delete'; tenant: string; kind: KindSegment; key: string }
  | { t: 'holder+' | 'holder-'; k: string }
  | { t: 'pending+'; k: string; v: string }
  | { t: 'pending-'; k: string }
  | { t: 'list'; tenant: string; kind: KindSegment; key: string; next: ListRecord | undefined };

interface Overlay {
  deleted: boolean;
  versions: Map<number, StoredDocument>;
}

/** A unit of work: reads through an overlay of its own writes, committed in one transaction. */
export class LmdbTx implements EntityTx {
  readonly ops: Op[] = [];
  private readonly overlay = new Map<string, Overlay>();
  private readonly holderOverlay = new Map<string, Map<string, boolean>>();
  private readonly pendingOverlay = new Map<string, Map<string, PendingEffect | null>>();
  /** List records set in this unit (null: no longer listed). */
  private readonly listOverlay = new Map<string, ListRecord | null>();

  constructor(private readonly dbs: Dbs) {}

  // eslint-disable-next-line @typescript-eslint/require-await -- async: a record that fails to decode rejects, as the port's callers expect, rather than throws
  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const prefix = prefixOf(tenant, kind, key);
    const o = this.overlay.get(prefix);
    // The unit's own writes first (highest rank wins when none is asked for), then the store.
    for (const r of ranksToTry(lifecycleRank)) {
      const own = o?.versions.get(r);
      if (own) return own;
      if (o?.deleted) continue;
      const raw = this.dbs.entities.get(prefix + r);
      if (raw !== undefined) return decodeVersion(kind, key, r, raw);
    }
    return undefined;
  }

  put(tenant: string, doc: StoredDocument & { stamp: VersionStamp }): void {
    const p = prefixOf(tenant, doc.kind, doc.key);
    const o = this.overlay.get(p) ?? { deleted: false, versions: new Map() };
    o.versions.set(doc.lifecycleRank, doc);
    this.overlay.set(p, o);
    this.ops.push({ t: 'put', tenant, doc });
  }

  delete(tenant: string, kind: KindSegment, key: string): void {
    this.overlay.set(prefixOf(tenant, kind, key), { deleted: true, versions: new Map() });
    this.ops.push({ t: 'delete', tenant, kind, key });
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: a failed read rejects (see get)
  async holders(tenant: string, kind: KindSegment, key: string): Promise<HolderRef[]> {
    const prefix = prefixOf(tenant, kind, key);
    const seen = new Map<string, boolean>();
    for (const k of this.dbs.holders.getKeys({ start: prefix, end: prefix + END })) seen.set(k.slice(prefix.length), true);
    for (const [rest, present] of this.holderOverlay.get(prefix) ?? []) seen.set(rest, present);
    const out: HolderRef[] = [];
    for (const [rest, present] of seen) {
      if (!present) continue;
      const [hk, hkey, rank] = rest.split(SEP) as [KindSegment, string, string];
      out.push({ kind: hk, key: hkey, lifecycleRank: Number(rank) });
    }
    return out;
  }

  private holderKey(tenant: string, child: { kind: KindSegment; key: string }, h: HolderRef) {
    const prefix = prefixOf(tenant, child.kind, child.key);
    const rest = `${h.kind}${SEP}${h.key}${SEP}${h.lifecycleRank}`;
    const m = this.holderOverlay.get(prefix) ?? new Map<string, boolean>();
    this.holderOverlay.set(prefix, m);
    return { k: prefix + rest, rest, m };
  }

  addHolder(tenant: string, child: { kind: KindSegment; key: string }, holder: HolderRef): void {
    const { k, rest, m } = this.holderKey(tenant, child, holder);
    m.set(rest, true);
    this.ops.push({ t: 'holder+', k });
  }

  removeHolder(tenant: string, child: { kind: KindSegment; key: string }, holder: HolderRef): void {
    const { k, rest, m } = this.holderKey(tenant, child, holder);
    m.set(rest, false);
    this.ops.push({ t: 'holder-', k });
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: a record that fails to parse rejects (see get)
  async pending(tenant: string, kind: KindSegment, key: string): Promise<PendingEffect[]> {
    const prefix = prefixOf(tenant, kind, key);
    const all = new Map<string, PendingEffect | null>();
    for (const { key: k, value } of this.dbs.pending.getRange({ start: prefix, end: prefix + END })) {
      all.set(k, JSON.parse(value) as PendingEffect);
    }
    for (const [k, v] of this.pendingOverlay.get(prefix) ?? []) all.set(k, v);
    return [...all.entries()]
      .filter((e): e is [string, PendingEffect] => e[1] !== null)
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
      .map((e) => e[1]);
  }

  private pendingKey(tenant: string, kind: KindSegment, key: string, e: PendingEffect) {
    const prefix = prefixOf(tenant, kind, key);
    const m = this.pendingOverlay.get(prefix) ?? new Map<string, PendingEffect | null>();
    this.pendingOverlay.set(prefix, m);
    return { k: `${prefix}${pad(e.acceptedAt)}${SEP}${e.eventKey}`, m };
  }

  addPending(tenant: string, kind: KindSegment, key: string, effect: PendingEffect): void {
    const { k, m } = this.pendingKey(tenant, kind, key, effect);
    m.set(k, effect);
    this.ops.push({ t: 'pending+', k, v: JSON.stringify(effect) });
  }

  removePending(tenant: string, kind: KindSegment, key: string, effect: PendingEffect): void {
    const { k, m } = this.pendingKey(tenant, kind, key, effect);
    m.set(k, null);
    this.ops.push({ t: 'pending-', k });
  }

  /** A list as committed (the unit's own writes are not in it). */
  // eslint-disable-next-line @typescript-eslint/require-await -- async: a failed read rejects (see get)
  async list(scan: ListScan): Promise<ListPosition[]> {
    return readList(this.dbs.lists.entries, scan);
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: a record that fails to parse rejects (see get)
  async listRecords(
    tenant: string,
    refs: ReadonlyArray<{ readonly kind: KindSegment; readonly key: string }>,
  ): Promise<Array<ListRecord | undefined>> {
    return refs.map(({ kind, key }) => {
      const k = prefixOf(tenant, kind, key);
      const own = this.listOverlay.get(k);
      if (own !== undefined) return own ?? undefined;
      const raw = this.dbs.lists.records.get(k);
      return raw === undefined ? undefined : decodeListRecord(raw);
    });
  }

  /**
   * Queues the move of the entity's list entries. `previous` is not needed: the commit moves the
   * entries from where the record stored in its own transaction says they are (lists.ts).
   */
  setListRecord(tenant: string, kind: KindSegment, key: string, next: ListRecord | undefined, _previous: ListRecord | undefined): void {
    this.listOverlay.set(prefixOf(tenant, kind, key), next ?? null);
    this.ops.push({ t: 'list', tenant, kind, key, next });
  }
}

export interface Dbs {
  root: RootDatabase;
  entities: Str;
  holders: Str;
  pending: Str;
  lists: ListDbs;
}

/**
 * Inside the unit's write transaction: writes its operations in order, and gives its puts and
 * deletes their feed numbers (feed.ts); the caller saves the sequence.
 */
export function writeOps(dbs: Dbs, seq: FeedSeq, ops: readonly Op[]): void {
  const { entities, holders, pending, lists } = dbs;
  // Inside a transaction lmdb writes at once and answers with an already resolved promise: what
  // counts is the transaction's, awaited by the caller, hence `void` on each write.
  const at = Date.now();
  for (const op of ops) {
    switch (op.t) {
      case 'put': {
        const d = op.doc;
        void entities.put(prefixOf(op.tenant, d.kind, d.key) + d.lifecycleRank, encodeVersion(d.json, d.stamp));
        seq.append(op.tenant, { at, op: 'put', kind: d.kind, key: d.key, rank: d.lifecycleRank, doc: d.json });
        break;
      }
      case 'delete':
        removeVersions(entities, prefixOf(op.tenant, op.kind, op.key));
        seq.append(op.tenant, { at, op: 'delete', kind: op.kind, key: op.key, rank: 0 });
        break;
      case 'list':
        relist(lists, op.tenant, op.kind, op.key, op.next);
        break;
      case 'holder+':
        void holders.put(op.k, '1');
        break;
      case 'holder-':
        void holders.remove(op.k);
        break;
      case 'pending+':
        void pending.put(op.k, op.v);
        break;
      case 'pending-':
        void pending.remove(op.k);
        break;
    }
  }
}
