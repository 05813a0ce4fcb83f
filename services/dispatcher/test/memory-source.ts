/**
 * A change feed in memory, as the dispatcher reads it (DispatchSource): numbered changes of every
 * tenant, reads that skip kinds not asked for and answer `next` as the last change looked at, a
 * floor below which a read is expired, and counters of what was read. Documents are kept with the
 * entries of the kinds in `keptKinds` (as the entity store's feed keeps them), else "read" from a
 * map (as the event log's are).
 */
import { cursorExpired, type FeedEntry, type FeedPage, type FeedRead } from '@otm/core';
import type { KindSegment } from '@otm/model';
import type { DispatchSource } from '../src/index.js';

export const vehicleKey = (i: number) => `0a000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
export const eventKey = (i: number) => `0e000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
export const tripKey = (i: number) => `07000000-0000-4000-8000-${String(i).padStart(12, '0')}`;

export const locationOf = (i: number, vehicle: number) => ({
  id: eventKey(i),
  eventType: 'locationUpdateEvent',
  lifecycle: 'actual',
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicleKey(vehicle) },
});

export class MemorySource implements DispatchSource {
  readonly all: Array<FeedEntry & { tenant: string }> = [];
  private readonly docs = new Map<string, string>();
  floor = 0;
  /** Reads of the feed; entries given to `documents`; documents read from the map (not kept with the entry). */
  reads = 0;
  documentEntries = 0;
  documentsRead = 0;
  /** The kinds of every read, in order (undefined: all). */
  readonly readKinds: Array<string[] | undefined> = [];
  /** Called at the start of each read (tests hold reads up with it). */
  onRead: (q: FeedRead) => void | Promise<void> = () => {};

  constructor(private readonly keptKinds: ReadonlySet<KindSegment> = new Set(['vehicles', 'trips'])) {}

  append(tenant: string, kind: KindSegment, key: string, doc?: Record<string, unknown>, op: 'put' | 'delete' = 'put'): FeedEntry {
    const cursor = String(this.all.length + 1);
    const text = JSON.stringify(doc ?? { id: key });
    const kept = op === 'put' && this.keptKinds.has(kind);
    const e = {
      tenant,
      cursor,
      at: Date.now(),
      op,
      kind,
      key,
      ...(op === 'put' ? { lifecycleRank: kind === 'events' ? 4 : 0 } : {}),
      ...(kept ? { doc: text } : {}),
    };
    if (op === 'put' && !kept) this.docs.set(`${tenant}|${kind}|${key}`, text);
    this.all.push(e);
    return e;
  }

  of(tenant: string): FeedEntry[] {
    return this.all.filter((e) => e.tenant === tenant).map(({ tenant: _t, ...e }) => e);
  }

  readonly feed = {
    read: async (q: FeedRead): Promise<FeedPage> => {
      this.reads++;
      this.readKinds.push(q.kinds === undefined ? undefined : [...q.kinds].sort());
      await this.onRead(q);
      const after = Number(q.after ?? 0);
      if (after < this.floor) throw cursorExpired('expired');
      const entries: FeedEntry[] = [];
      let next: string | undefined;
      for (const { tenant, ...e } of this.all) {
        if (tenant !== q.tenant || Number(e.cursor) <= after) continue;
        next = e.cursor;
        if (q.kinds !== undefined && !q.kinds.has(e.kind)) continue;
        entries.push(e);
        if (entries.length >= q.limit) break;
      }
      await new Promise((r) => setImmediate(r));
      return next === undefined ? { entries } : { entries, next };
    },
    head: async (tenant: string): Promise<string> => {
      const mine = this.of(tenant);
      return mine.length === 0 ? String(this.floor) : mine[mine.length - 1]!.cursor;
    },
  };

  documents = async (tenant: string, entries: readonly FeedEntry[]): Promise<Array<string | Buffer | undefined>> => {
    this.documentEntries += entries.length;
    await new Promise((r) => setImmediate(r));
    return entries.map((e) => {
      if (e.op === 'delete' || e.doc !== undefined) return e.doc;
      this.documentsRead++;
      return this.docs.get(`${tenant}|${e.kind}|${e.key}`);
    });
  };
}
