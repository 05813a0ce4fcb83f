/**
 * What the stream's tests share: an in-memory feed whose reads take their snapshot and answer
 * after random delays, stand-ins for sockets, documents that name vehicles, and hubs counting their
 * streams in the process.
 */
import { cursorExpired, invalidDocument, type ChangeFeed, type FeedEntry, type FeedRead, type LatestPosition } from '@otm/core';
import { MemoryStreamSlots } from '@otm/embedded';
import type { KindSegment } from '@otm/model';
import { StreamHub, type StreamFilter, type StreamOptions, type StreamSink, type StreamSource } from '../src/stream.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const jitter = () => sleep(Math.random() < 0.5 ? 0 : Math.random() * 3);

/** A feed in memory: numbered changes of every tenant, a floor below which reads are expired. */
export class MemoryFeed implements ChangeFeed {
  readonly all: Array<FeedEntry & { tenant: string }> = [];
  floor = 0;
  reads = 0;
  /** While set, every read fails with it (the store unavailable); `failed` counts those reads. */
  failure: Error | undefined;
  failed = 0;

  append(tenant: string, kind: KindSegment, key: string, doc?: Record<string, unknown>, op: 'put' | 'delete' = 'put'): FeedEntry {
    const e = {
      tenant,
      cursor: String(this.all.length + 1),
      at: Date.now(),
      op,
      kind,
      key,
      ...(op === 'put' ? { lifecycleRank: 0, doc: JSON.stringify(doc ?? { id: key }) } : {}),
    };
    this.all.push(e);
    return e;
  }

  of(tenant: string): FeedEntry[] {
    return this.all.filter((e) => e.tenant === tenant);
  }

  async head(tenant: string): Promise<string> {
    await jitter();
    const mine = this.of(tenant);
    return mine.length === 0 ? String(this.floor) : mine[mine.length - 1]!.cursor;
  }

  async read(q: FeedRead): Promise<{ entries: FeedEntry[]; next?: string }> {
    this.reads++;
    if (this.failure !== undefined) {
      this.failed++;
      throw this.failure;
    }
    if (q.after !== undefined && !/^\d{1,16}$/.test(q.after)) {
      throw invalidDocument([{ type: 'invalidField', field: 'cursor', message: 'not a cursor' }]);
    }
    const after = Number(q.after ?? 0);
    if (after < this.floor) throw cursorExpired('expired');
    await jitter();
    // The snapshot, somewhere in the middle of the read.
    const entries = this.all
      .filter((e) => e.tenant === q.tenant && Number(e.cursor) > after && (q.kinds === undefined || q.kinds.has(e.kind)))
      .slice(0, q.limit)
      .map(({ tenant: _t, ...e }) => e);
    await jitter();
    const last = entries[entries.length - 1];
    return last === undefined ? { entries } : { entries, next: last.cursor };
  }
}

export function sourceOf(feed: MemoryFeed, positions: () => Promise<LatestPosition[]> = async () => []): StreamSource {
  return {
    feed,
    documents: async (_t, entries) => {
      await jitter();
      return entries.map((e) => e.doc);
    },
    version: async () => undefined,
    positions: async () => positions(),
  };
}

/** A socket stand-in: keeps what is written; `stuck` ones never take their bytes. */
export class Sink implements StreamSink {
  text = '';
  writes = 0;
  writableLength = 0;
  ended = false;
  destroyed = false;
  constructor(private readonly stuck = false) {}
  write(chunk: Buffer): boolean {
    if (this.ended || this.destroyed) return false;
    this.writes++;
    this.text += chunk.toString('utf8');
    if (this.stuck) this.writableLength += chunk.length;
    return !this.stuck;
  }
  end(): void {
    this.ended = true;
  }
  destroy(): void {
    this.destroyed = true;
  }
  once(): this {
    return this;
  }
  /** The events written: [id, event, data]. */
  events(): Array<{ id?: string; event: string; data: string }> {
    return this.text
      .split('\n\n')
      .filter((block) => block.includes('data: '))
      .map((block) => {
        const lines = block.split('\n');
        const field = (name: string) => lines.find((l) => l.startsWith(`${name}: `))?.slice(name.length + 2);
        const id = field('id');
        return { ...(id === undefined ? {} : { id }), event: field('event') ?? 'message', data: field('data') ?? '' };
      });
  }
  ids(): string[] {
    return this.events().flatMap((e) => (e.id === undefined ? [] : [e.id]));
  }
}

export const vehicleKey = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
export const eventKey = (i: number) => `e0000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
export const locationOf = (i: number, v: number) => ({
  id: eventKey(i),
  eventType: 'locationUpdateEvent',
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicleKey(v) },
});

export const matches = (f: StreamFilter, e: FeedEntry): boolean => {
  if (f.kinds !== undefined && !f.kinds.has(e.kind)) return false;
  if (f.vehicle !== undefined) {
    if (e.kind === 'vehicles') return e.key === f.vehicle;
    if (e.kind !== 'events' || e.doc === undefined) return false;
    return (JSON.parse(String(e.doc)) as { vehicle?: { uuid: string } }).vehicle?.uuid === f.vehicle;
  }
  return true;
};

/** A hub whose streams are counted in the process unless `slots` says otherwise. */
export const hubOf = (source: StreamSource, opts: Omit<StreamOptions, 'slots'> & Partial<Pick<StreamOptions, 'slots'>>): StreamHub =>
  new StreamHub(source, { slots: new MemoryStreamSlots(), ...opts });
