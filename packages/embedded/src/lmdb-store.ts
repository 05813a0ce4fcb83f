/**
 * Embedded, durable storage on LMDB (the `lmdb` package: a memory-mapped B+tree with
 * copy-on-write transactions; its binary ships inside an npm package, so nothing compiles at
 * install). One environment under `<dataDir>/store` holds the databases:
 *
 * - `entities`: every version of every entity, key `tenant|kind|key|rank` (rank = the
 *   lifecycle rank 0-5, so all versions of one entity are adjacent and the latest is the last);
 *   value `modified acceptedAt \n json` (the version stamp, then the document as answered);
 * - `holders`: `tenant|childKind|childKey|holderKind|holderKey|rank`, which entities
 *   hold another inline;
 * - `pending`: `tenant|kind|key|acceptedAt|eventKey`, effects waiting for their target;
 * - `lists` and `list-records`: the entities by facet in keyset order (lists.ts); `store-meta`:
 *   the key the disk probe writes (disk.ts);
 * - `feed` and `feed-meta`: the change feed of the entity store and of the event log (feed.ts);
 * - `positions`: the vehicles' latest positions (positions.ts);
 * - `subscriptions` and `subscription-deliveries`: webhook subscriptions (subscriptions.ts);
 * - `api-keys` and `api-key-hashes`: API keys (api-keys.ts), written by `otm keys` from another process too;
 * - `event-index` and `event-log`: the event store's index and checkpoint; the events themselves
 *   are in a log of segment files under `<dataDir>/events` (event-log/); `event-time`,
 *   `event-vehicle` and `event-records`: its lists, which are also the tracks
 *   (event-log/effects.ts; their keys and the index's: event-log/index-keys.ts).
 *
 * The environment is mapped once, with 1 TiB of address space (api-keys.ts `openStoreEnv`), so that
 * a page read counts once in the resident size.
 *
 * A write resolves only after its transaction is committed and flushed to disk, so an
 * acknowledged write survives `kill -9` and power loss. Concurrent writes share transactions.
 * A unit's lists and feed entries are written in the unit's own transaction: they always agree
 * with the documents. Each unit is its own child transaction, so a unit that fails while its
 * transaction is built leaves nothing of itself. A unit's reads and queued writes are lmdb-tx.ts.
 */
import path from 'node:path';
import type { RootDatabase } from 'lmdb';
import { LRUCache } from 'lru-cache';
import type { KindSegment } from '@otm/model';
import {
  AdapterError,
  REFUSAL_TEXT,
  fileRefusal,
  formatBytes,
  reasonOf,
  watchDataFree,
  decodeVersion,
  LATEST_CACHE_BOUNDS,
  keptSize,
  keptVersion,
  watchLatestCache,
  type ChangeFeed,
  type EntityStore,
  type EntityTx,
  type LatestPosition,
  type ListPosition,
  type ListScan,
  type Monitored,
  type PositionReader,
  type StoredDocument,
  type TelemetrySideEffects,
} from '@otm/core';
import { LogEventStore, type CompactionOptions } from './event-log/index.js';
import { WriteGate, commitCause, fileProbe, freeBytes, gatedCommit, guardLmdbCommits } from './disk.js';
import { lockDataDir } from './dir-lock.js';
import { FeedSeq, LmdbFeed } from './feed.js';
import { prefixOf } from './keys.js';
import { readList } from './lists.js';
import { LmdbTx, readVersion, writeOps, type Dbs } from './lmdb-tx.js';
import { LmdbPositions, type Fix } from './positions.js';
import { LmdbSubscriptionStore } from './subscriptions.js';
import { apiKeyStoreOf, openStoreEnv, type LmdbApiKeyStore } from './api-keys.js';

/** How long the feed keeps changes by default (OTM_FEED_RETENTION). */
export const DEFAULT_FEED_RETENTION_MS = 7 * 86_400_000;
/** Below this many free bytes in the data folder, a start says so (a full disk refuses writes: disk.ts). */
const LOW_FREE_BYTES = 64 * 1024 * 1024;
/** How often retention removes old feed entries. */
const FEED_SWEEP_MS = 60_000;

/** What the entity store shares with the event log: the feed's numbers and the latest positions. */
interface Shared {
  readonly seq: FeedSeq;
  readonly feed: LmdbFeed;
  readonly positions: LmdbPositions;
}

class LmdbEntityStore implements EntityStore {
  /**
   * The latest version of recently read entities, as GET answers it. Reading the latest version
   * from LMDB probes up to six lifecycle keys and decodes the value, a large share of a GET's whole
   * cost; carriers poll the same trips over and over. This process
   * is the store's only writer, so the cache stays exact: a unit drops the entries of every entity
   * it wrote once its commit is visible to reads, and only reads made after that can fill them again.
   * Bounded by entries and by the bytes of the documents it holds (as UTF-8: keptVersion).
   */
  private readonly latest = new LRUCache<string, StoredDocument>({
    ...LATEST_CACHE_BOUNDS,
    // Its bytes alone (keptVersion).
    sizeCalculation: keptSize,
  });
  /** Stops counting `latest` in the cache gauges (otm_entity_cache_*). */
  private readonly unwatch = watchLatestCache(this.latest);

  readonly feed: ChangeFeed;
  readonly positions: PositionReader;
  readonly telemetry: TelemetrySideEffects;

  constructor(
    private readonly dbs: Dbs,
    private readonly shared: Shared,
    /** Resolves once the event log's index commit holds every write answered so far (LogEventStore.settled). */
    settled: () => Promise<void>,
    /** Whether LMDB takes writes (disk.ts); none: every commit is tried. */
    private readonly gate?: WriteGate,
  ) {
    // Telemetry events reach the feed and positions in the event log's index commit: wait for it.
    this.feed = {
      read: async (q) => (await settled(), shared.feed.read(q)),
      head: async (tenant) => (await settled(), shared.feed.head(tenant)),
    };
    this.positions = {
      positions: async (tenant: string): Promise<readonly LatestPosition[]> => (await settled(), shared.positions.positions(tenant)),
    };
    this.telemetry = {
      appendFeed: (entries) => this.appendFeed(entries),
      updatePositions: (fixes) => this.updatePositions(fixes),
    };
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: a failed read rejects, as the port's callers expect
  async list(scan: ListScan): Promise<ListPosition[]> {
    return readList(this.dbs.lists.entries, scan);
  }

  /** Runs `fn` in a write transaction of its own, durable when this resolves (disk.ts: refused while the disk is full). */
  private commit<T>(fn: () => T): Promise<T> {
    return gatedCommit(this.gate, 'the commit', async () => {
      const result = await this.dbs.root.childTransaction(fn);
      await this.dbs.root.flushed;
      return result;
    });
  }

  /** The feed entries of telemetry events stored elsewhere (ClickHouse), in one transaction. */
  private async appendFeed(entries: Parameters<TelemetrySideEffects['appendFeed']>[0]): Promise<void> {
    if (entries.length === 0) return;
    const { seq } = this.shared;
    await this.commit(() => {
      const at = Date.now();
      for (const e of entries) seq.append(e.tenant, { at, op: e.op, kind: e.kind, key: e.key, rank: e.lifecycleRank });
      seq.save();
    });
  }

  /** Moves latest positions forward, in one transaction; then the copies in memory. */
  private async updatePositions(fixes: readonly Fix[]): Promise<void> {
    if (fixes.length === 0) return;
    const { positions } = this.shared;
    const stored = await this.commit(() => positions.offer(fixes));
    positions.committed(stored);
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: a record that fails to decode rejects (see LmdbTx.get)
  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const prefix = prefixOf(tenant, kind, key);
    if (lifecycleRank === undefined) {
      const cached = this.latest.get(prefix);
      if (cached !== undefined) return cached;
    }
    const v = readVersion(this.dbs.entities, prefix, lifecycleRank);
    const doc = v && decodeVersion(kind, key, v.rank, v.raw);
    if (doc === undefined || lifecycleRank !== undefined) return doc;
    // Kept with its UTF-8 bytes, which a GET answers as they are (a string answer is joined with
    // the headers and encoded again on every send: three passes over the document).
    // As bytes alone, in memory of their own: a slice of Node's buffer pool would keep 8 KiB alive
    // for each, and the text beside them would double what each costs (keptVersion).
    const cached = keptVersion(doc);
    this.latest.set(prefix, cached);
    return cached;
  }

  async unit<T>(work: (tx: EntityTx) => Promise<T>): Promise<T> {
    const tx = new LmdbTx(this.dbs);
    const result = await work(tx);
    if (tx.ops.length === 0) return result;
    const { root } = this.dbs;
    const { seq } = this.shared;
    const message = (e: unknown) => (e as Error)?.message ?? String(e);
    // The commit failing (a full disk, an I/O error, the store closed by a shutdown) stores nothing
    // of the unit, and the same unit may succeed later, or in the next process (disk.ts).
    await gatedCommit(this.gate, 'the commit', async () => {
      await root.childTransaction(() => {
        try {
          writeOps(this.dbs, seq, tx.ops);
          seq.save();
        } catch (e) {
          // Refused while the transaction was built (a key longer than LMDB takes, say): the same
          // unit would be refused again.
          throw new AdapterError('lmdb', `lmdb: a write was refused (${message(e)})`, { retryable: false, cause: e });
        }
      });
      await root.flushed;
    });
    // Committed and visible to reads from here on: drop what the cache holds of the written entities.
    for (const op of tx.ops) {
      if (op.t === 'put') this.latest.delete(prefixOf(op.tenant, op.doc.kind, op.doc.key));
      else if (op.t === 'delete') this.latest.delete(prefixOf(op.tenant, op.kind, op.key));
    }
    return result;
  }

  ready(): Promise<boolean> {
    return Promise.resolve(true);
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async close(): Promise<void> {
    this.unwatch();
  }
}

export interface EmbeddedStores {
  readonly entities: EntityStore;
  readonly events: LogEventStore;
  /** Webhook subscriptions and their deliveries (subscriptions.ts), in the same environment. */
  readonly subscriptions: LmdbSubscriptionStore;
  /** API keys (api-keys.ts), in the same environment; `otm keys` writes them from another process. */
  readonly apiKeys: LmdbApiKeyStore;
  /**
   * Removes the feed entries older than the retention (as if it were `now`); returns how many. Run
   * at open and every minute; tests and tools may run it when they like.
   */
  sweepFeed(now?: number): Promise<number>;
  /**
   * Whether each store takes writes (`store lmdb`, `store event-log`: down while the disk is full,
   * disk.ts) and how the event log's background work fares (its index commits, compaction), for
   * /readyz and /healthz.
   */
  parts(): Monitored[];
  close(): Promise<void>;
}

export interface EmbeddedStoreOptions {
  /** Told what the event log's recovery did at start (a torn tail cut off, a compaction finished). */
  readonly warn?: (message: string) => void;
  /** Size at which the event log starts a new segment file (tests use small ones). */
  readonly eventSegmentBytes?: number;
  /** When and how the event log compacts its sealed segments. */
  readonly eventCompaction?: CompactionOptions;
  /** Most event log segment files open at once (default 256; tests use fewer). */
  readonly eventMaxOpenSegments?: number;
  /**
   * Whether the event log records the feed entries and latest positions of the events it stores
   * (default true). Only when these stores' entity store is the one in use: the feed and the
   * positions are the entity store's (with another entity store, the telemetry worker records them
   * there). Lists and tracks of events are the event log's own, kept either way.
   */
  readonly telemetryEffects?: boolean;
  /** How long the change feed keeps changes (ms, default 7 days). */
  readonly feedRetentionMs?: number;
  /** Told when a store takes writes again after it refused them. */
  readonly info?: (message: string) => void;
  /** How often a store that refuses writes tries a small one (ms; default 2 s: disk.ts). */
  readonly probeMs?: number;
}

/**
 * A start that failed for lack of room (a write it could not do without: a layout change, a
 * compaction's move to finish), said so, with the folder and its free bytes: not the bare
 * `Input/output error` of LMDB. Any other failure as it was.
 */
function fullAtStart(dataDir: string, e: unknown): unknown {
  const cause = fileRefusal(e);
  if (cause === undefined) return e;
  const free = freeBytes(dataDir);
  return new AdapterError(
    'lmdb',
    `cannot open the data folder ${path.resolve(dataDir)}: ${REFUSAL_TEXT[cause]}${free === undefined ? '' : ` (${formatBytes(free)} free)`}, and this start must write (${reasonOf(e)}); free some space and start again`,
    { retryable: true, cause: e },
  );
}

export function openEmbeddedStores(dataDir: string, opts: EmbeddedStoreOptions = {}): EmbeddedStores {
  // A commit that fails (a full disk) must never end the process (disk.ts).
  guardLmdbCommits();
  // One process at a time: the event log has one writer (dir-lock.ts).
  const unlock = lockDataDir(dataDir, opts.warn);
  let root: RootDatabase;
  try {
    root = openStoreEnv(dataDir);
  } catch (e) {
    unlock();
    throw fullAtStart(dataDir, e);
  }
  const db = (name: string) => root.openDB<string, string>({ name, encoding: 'string' });
  const storeMeta = db('store-meta');
  const lmdbGate = new WriteGate({
    store: 'lmdb',
    root,
    dir: path.join(dataDir, 'store'),
    // A key of its own, written and made durable as every write is.
    probe: async () => {
      await root.childTransaction(() => void storeMeta.put('write-probe', String(Date.now())));
      await root.flushed;
    },
    warn: opts.warn,
    info: opts.info,
    probeMs: opts.probeMs,
  });
  const eventsDir = path.join(dataDir, 'events');
  let largestRefused = 0;
  const eventGate = new WriteGate({
    store: 'event-log',
    dir: eventsDir,
    probe: fileProbe(eventsDir, () => largestRefused),
    warn: opts.warn,
    info: opts.info,
    probeMs: opts.probeMs,
  });
  let shared: Shared;
  let dbs: Dbs;
  let events: LogEventStore;
  try {
    dbs = {
      root,
      entities: db('entities'),
      holders: db('holders'),
      pending: db('pending'),
      lists: { entries: db('lists'), records: db('list-records') },
    };
    const feedDb = db('feed');
    const feedMeta = db('feed-meta');
    // One sequence for the entity store and the event log (feed.ts); made before the event log's
    // recovery, which may give numbers.
    shared = {
      seq: new FeedSeq(feedDb, feedMeta),
      feed: new LmdbFeed(root, feedDb, feedMeta, opts.feedRetentionMs ?? DEFAULT_FEED_RETENTION_MS),
      positions: new LmdbPositions(db('positions')),
    };
    events = new LogEventStore({
      dir: eventsDir,
      root,
      gate: eventGate,
      lmdbGate,
      onRefused: (bytes) => void (largestRefused = Math.max(largestRefused, bytes)),
      onAccepted: () => void (largestRefused = 0),
      ...(opts.warn ? { warn: opts.warn } : {}),
      ...(opts.eventSegmentBytes ? { segmentBytes: opts.eventSegmentBytes } : {}),
      ...(opts.eventCompaction ? { compaction: opts.eventCompaction } : {}),
      ...(opts.eventMaxOpenSegments ? { maxOpenSegments: opts.eventMaxOpenSegments } : {}),
      ...(opts.telemetryEffects === false ? {} : { telemetryEffects: { seq: shared.seq, positions: shared.positions } }),
    });
  } catch (e) {
    lmdbGate.close();
    eventGate.close();
    void root.close().finally(unlock);
    throw fullAtStart(dataDir, e);
  }
  // Whether each store can write now: a start on a full disk serves reads, says so, and waits for room.
  void lmdbGate.probeNow();
  void eventGate.probeNow();
  const free = freeBytes(dataDir);
  if (free !== undefined && free < LOW_FREE_BYTES) {
    opts.warn?.(
      `the data folder ${path.resolve(dataDir)} has ${formatBytes(free)} free: writes are refused (503) while it is full, reads are served`,
    );
  }
  watchDataFree({ folder: path.resolve(dataDir), free: () => freeBytes(dataDir) });
  const { feed } = shared;
  // One sweep at a time: a call while one runs starts after it.
  let sweeping: Promise<unknown> = Promise.resolve();
  const sweepFeed = (now?: number): Promise<number> => {
    const run = sweeping.catch(() => {}).then(() => feed.sweep(now));
    sweeping = run;
    return run;
  };
  const sweepNow = () =>
    void sweepFeed().catch(async (e: unknown) => {
      // A sweep frees room, but on a full disk LMDB cannot write the pages it frees them with.
      const cause = await commitCause(e);
      lmdbGate.failed(cause, 'the change feed sweep');
      opts.warn?.(`change feed: removing old entries failed (${reasonOf(cause)}); tried again in a minute`);
    });
  const timer = setInterval(sweepNow, FEED_SWEEP_MS);
  timer.unref();
  sweepNow();
  const entities = new LmdbEntityStore(dbs, shared, () => events.settled(), lmdbGate);
  return {
    entities,
    events,
    subscriptions: new LmdbSubscriptionStore(root, db('subscriptions'), db('subscription-deliveries'), lmdbGate),
    apiKeys: apiKeyStoreOf(root),
    sweepFeed,
    parts: () => [lmdbGate.state.part, eventGate.state.part, ...events.parts()],
    close: async () => {
      try {
        lmdbGate.close();
        eventGate.close();
        watchDataFree(undefined);
        clearInterval(timer);
        await sweeping.catch(() => {});
        await entities.close();
        await events.close();
        await root.flushed;
        await root.close();
      } finally {
        unlock();
      }
    },
  };
}
