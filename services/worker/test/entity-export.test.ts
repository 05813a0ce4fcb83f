/**
 * The entity export's loop (entity-export.ts) recovers from failed passes and says so meanwhile
 * (issue 36), against stand-ins for the stores: a feed in memory that fails on demand, a sink that
 * keeps what it is given. test/distributed/entity-export.test.ts runs the export on Redis and
 * ClickHouse; test/distributed/loops.test.ts stops Redis under it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  Health,
  createLogger,
  registry,
  type EntityChange,
  type EntityChangeSink,
  type EntityStore,
  type FeedEntry,
  type FeedExport,
  type FeedRead,
} from '@otm/core';
import { EntityExporter } from '../src/index.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const until = async (what: string, check: () => boolean) => {
  const deadline = Date.now() + 15_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(5);
  }
};
const metric = async (name: string, labels: Record<string, string> = { loop: 'entity-export' }) =>
  (await registry.getSingleMetric(name)!.get()).values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value ?? 0;

/** One tenant's feed of vehicles in memory, its cursor saved at 0 (no snapshot); every call fails while `failure` is set. */
function memoryStores() {
  const entries: FeedEntry[] = [];
  const saved = new Map<string, string | undefined>([['t', '0']]);
  let holder: string | undefined;
  const state = { failure: undefined as Error | undefined, failed: 0 };
  const check = () => {
    if (state.failure === undefined) return;
    state.failed++;
    throw state.failure;
  };
  const feedExport: FeedExport = {
    tenants: async () => (check(), ['t']),
    cursor: async (t) => (check(), saved.get(t)),
    saveCursor: async (t, c) => void (check(), saved.set(t, c)),
    versionOf: (c) => BigInt(c),
    lease: async (owner) => {
      check();
      if (holder !== undefined && holder !== owner) return false;
      holder = owner;
      return true;
    },
    release: async (owner) => {
      if (holder === owner) holder = undefined;
    },
  };
  const feed = {
    read: async (q: FeedRead) => {
      check();
      const after = Number(q.after ?? 0);
      const page = entries.filter((e) => Number(e.cursor) > after).slice(0, q.limit);
      return page.length === 0 ? { entries: page } : { entries: page, next: page[page.length - 1]!.cursor };
    },
    head: async () => (check(), String(entries.length)),
  };
  const entities = { feedExport, feed, list: async () => [], get: async () => undefined } as unknown as EntityStore & {
    feedExport: FeedExport;
  };
  const rows: EntityChange[] = [];
  const sink: EntityChangeSink = {
    writeEntityChanges: async (changes) => {
      rows.push(...changes);
      return changes.length;
    },
  };
  const append = (n: number) => {
    for (let i = 0; i < n; i++) {
      const key = `0a000000-0000-4000-8000-${String(entries.length).padStart(12, '0')}`;
      entries.push({
        cursor: String(entries.length + 1),
        at: Date.now(),
        op: 'put',
        kind: 'vehicles',
        key,
        lifecycleRank: 0,
        doc: JSON.stringify({ id: key }),
      });
    }
  };
  return { entities, sink, rows, state, append, holder: () => holder, saved };
}

describe('the entity export loop', () => {
  let exporter: EntityExporter | undefined;
  afterEach(async () => {
    await exporter?.close();
    exporter = undefined;
  });

  it('passes that fail are tried again with backoff, the export down and named meanwhile; then it copies every change once', async () => {
    const s = memoryStores();
    s.append(10);
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) });
    exporter = new EntityExporter(s.entities, s.sink, logger, { intervalMs: 5, maxBackoffMs: 40 });
    const health = new Health();
    health.watch(() => exporter!.parts());
    exporter.start();
    await until('copied', () => s.rows.length === 10);
    await until('up', () => health.down().length === 0);
    expect(await metric('otm_loop_up')).toBe(1);

    const [restarts, failures] = [await metric('otm_loop_restarts_total'), await metric('otm_entity_export_failures_total', {})];
    s.state.failure = new Error('redis unavailable');
    await until('a pass failed', () => s.state.failed > 0);
    s.append(10);
    await until('down', () => health.down().length === 1);
    expect(health.down()[0]).toMatchObject({ name: 'entity export', kind: 'loop', reason: 'redis unavailable' });
    expect(await metric('otm_loop_up')).toBe(0);
    await until('tried again, and again', () => s.state.failed >= 4);
    expect(s.rows.length).toBe(10);

    s.state.failure = undefined;
    await until('the rest copied', () => s.rows.length === 20);
    expect(s.rows.map((r) => r.key)).toEqual([...new Set(s.rows.map((r) => r.key))]);
    expect(s.saved.get('t')).toBe('20');
    await until('up again', () => health.down().length === 0);
    expect(await metric('otm_loop_up')).toBe(1);
    // Each failed pass counted, and followed by one more start.
    const failed = (await metric('otm_entity_export_failures_total', {})) - failures;
    expect(failed).toBeGreaterThanOrEqual(4);
    expect((await metric('otm_loop_restarts_total')) - restarts).toBe(failed);
    // Each failure logged once, with its attempt: 1, 2, 3, ...
    const attempts = lines.filter((l) => l.err === 'redis unavailable').map((l) => l.attempt);
    expect(attempts).toEqual(Array.from({ length: failed }, (_, i) => i + 1));
  });

  it('is up as soon as a page is written, not only once a long pass ends', async () => {
    const s = memoryStores();
    s.append(50);
    // The third insert waits until the test lets it go.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let inserts = 0;
    const sink: EntityChangeSink = {
      writeEntityChanges: async (changes) => {
        if (++inserts === 3) await held;
        return s.sink.writeEntityChanges(changes);
      },
    };
    exporter = new EntityExporter(s.entities, sink, createLogger('silent'), { intervalMs: 5, pageSize: 10, pagesPerTenant: 100 });
    exporter.start();
    try {
      await until('the third insert under way', () => inserts === 3);
      // Two pages written, the pass not over.
      expect(s.rows.length).toBe(20);
      expect(exporter.parts()[0]!.status().up).toBe(true);
    } finally {
      release();
    }
    await until('copied', () => s.rows.length === 50);
  });

  it('stands by, up, while another process holds the lease; takes over once it is free', async () => {
    const s = memoryStores();
    s.append(3);
    expect(await s.entities.feedExport.lease('another process', 60_000)).toBe(true);
    exporter = new EntityExporter(s.entities, s.sink, createLogger('silent'), { intervalMs: 5 });
    exporter.start();
    const health = new Health();
    health.watch(() => exporter!.parts());
    await until('up, standing by', () => exporter!.parts()[0]?.status().up === true);
    expect(s.rows).toEqual([]);
    await s.entities.feedExport.release('another process');
    await until('copied', () => s.rows.length === 3);
    expect(s.holder()).toBe(exporter.owner);
    expect(health.down()).toEqual([]);
    await exporter.close();
    // Given up as it stops.
    expect(s.holder()).toBeUndefined();
  });
});
