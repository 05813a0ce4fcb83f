/**
 * The embedded event store: telemetry events appended to a log of segment files, with a small
 * index (event key -> where its document lies in the log) in LMDB. This class ties the parts
 * together; each has its own module: the record format (record.ts), the segment files
 * (segments.ts), group commit (group-commit.ts), the index (index-writer.ts), what a start does
 * (recovery.ts) and compaction (compaction.ts).
 *
 * Why not the documents themselves in LMDB: LMDB maps its file into the process, so every page the
 * service writes or reads counts in its resident size (RSS), which then grows with the data; and a
 * write would be answered only after lmdb's commit and its flush. Here the documents are written
 * with `write(2)` and read with `pread(2)`: they stay in the kernel's page cache, not in the
 * process; only the index, a key and a position an event, is mapped.
 *
 * Durability: a `write` resolves once its records are in the log, written with O_DSYNC (on the
 * disk when the write returns). Writes that arrive while a log write is under way share the next
 * one (group commit), so under load one sync answers many writes. The index is updated only after
 * the log write, gathered into one LMDB commit that no answer waits for (reads see the new
 * positions at once until it commits); it records how far into the log it has been applied (the
 * checkpoint, in the same LMDB transaction as the entries it covers). At start the log is replayed
 * from the checkpoint into the index, so an index behind the log after a crash catches up, and a
 * torn record at the tail of the log (a write cut off by a crash: never answered, because its write
 * never returned) is cut off.
 *
 * The index commit also records the events' lists and tracks (one entry by event time, and one by
 * vehicle and event time that is also the vehicle's track), and, beside the embedded entity store,
 * their feed entries and the vehicles' latest positions (effects.ts); the replay at start records
 * them again for what it replays, so they agree with the log after any stop.
 */
import fs from 'node:fs';
import type { Database, RootDatabase } from 'lmdb';
import type { KindSegment } from '@otm/model';
import {
  AdapterError,
  StorageRefused,
  type DocumentWrite,
  type Monitored,
  type EventStore,
  type ListPosition,
  type ListScan,
  type LogPosition,
  type StoredDocument,
  type TrackPoint,
  type TrackScan,
  type FixScan,
  type TrackFixPoint,
} from '@otm/core';
import { prefixOf, ranksToTry } from '../keys.js';
import type { WriteGate } from '../disk.js';
import { Compactor, type CompactionOptions, type CompactionResult } from './compaction.js';
import { EventEffects, decodeFix, putChange, type EventChange, type TelemetryEffects } from './effects.js';
import { GroupCommit, type Pending } from './group-commit.js';
import { binaryDb, indexKeyCodec } from './index-keys.js';
import { IndexEntry, IndexWriter, type IndexOp, type Pos } from './index-writer.js';
import { eventLogRecords } from './metrics.js';
import { encodeRecords } from './record.js';
import { recover } from './recovery.js';
import { DEFAULT_SEGMENT_BYTES, SegmentFiles } from './segments.js';

/**
 * Most index changes waiting for their commit before the answers to writes wait for it too
 * (`append`): ~100,000 events hold about 60 MB of entries and facts in memory.
 */
export const INDEX_BACKLOG_MAX = 100_000;

export interface EventLogOptions {
  /** Where the segment files are (created if missing). */
  readonly dir: string;
  /** The LMDB environment that holds the index (with the entity store's databases). */
  readonly root: RootDatabase;
  readonly segmentBytes?: number;
  /** Most segment files kept open at once (default 256; at least 2). */
  readonly maxOpenSegments?: number;
  /** Told what recovery found (a torn tail cut off, a compaction cut short). */
  readonly warn?: (message: string) => void;
  readonly compaction?: CompactionOptions;
  /** Whether the log takes writes (disk.ts): refused at once while the disk is full. */
  readonly gate?: WriteGate;
  /** Whether LMDB takes writes: the index commits tell it when they fail for lack of room, or succeed. */
  readonly lmdbGate?: WriteGate;
  /** Told the bytes of each write refused for lack of room, and of each accepted (the probe's need: disk.ts). */
  readonly onRefused?: (bytes: number) => void;
  readonly onAccepted?: () => void;
  /**
   * Where the feed entries and latest positions of the events go, when this store records them
   * (beside the embedded entity store, whose feed and positions they are); absent: the telemetry
   * worker records them elsewhere (`keepsTelemetryEffects` false).
   */
  readonly telemetryEffects?: TelemetryEffects;
}

export class LogEventStore implements EventStore {
  /** Writes are encoded and queued in call order, and the queue is written and indexed in order. */
  readonly appliesInCallOrder = true;
  readonly keepsTelemetryEffects: boolean;

  private readonly index: Database<Buffer, string>;
  private readonly meta: Database<string, string>;
  private readonly segments: SegmentFiles;
  private readonly writer: IndexWriter;
  private readonly commits: GroupCommit;
  private readonly compactor: Compactor;
  private readonly effects: EventEffects;
  private closed = false;

  constructor(private readonly opts: EventLogOptions) {
    // String keys, a UUID in them as its 16 bytes, compared with LMDB's memcmp (index-keys.ts).
    this.index = opts.root.openDB<Buffer, string>(binaryDb('event-index', indexKeyCodec(opts.root)));
    this.meta = opts.root.openDB<string, string>({ name: 'event-log', encoding: 'string' });
    this.keepsTelemetryEffects = opts.telemetryEffects !== undefined;
    this.effects = new EventEffects(opts.root, opts.telemetryEffects);
    fs.mkdirSync(opts.dir, { recursive: true });
    this.segments = new SegmentFiles({
      dir: opts.dir,
      segmentBytes: opts.segmentBytes ?? DEFAULT_SEGMENT_BYTES,
      maxOpen: Math.max(2, opts.maxOpenSegments ?? 256),
      // Undefined while recovery runs: compaction is made after it, and its first look is due anyway.
      onSeal: () => this.compactor?.changed(),
    });
    this.writer = new IndexWriter(opts.root, this.index, this.meta, opts.warn, this.effects, opts.lmdbGate);
    this.commits = new GroupCommit((group) => this.append(group));
    try {
      const recovered = recover({
        root: opts.root,
        index: this.index,
        meta: this.meta,
        segments: this.segments,
        warn: opts.warn,
        effects: this.effects,
      });
      this.writer.start(recovered.committed);
      // Replayed but not committed to the index (the disk is full): read from memory, committed once there is room.
      if (recovered.pending.length > 0) {
        for (const e of recovered.pending) this.writer.put(e);
        this.writer.covered(recovered.end);
        if (recovered.refusal !== undefined)
          opts.lmdbGate?.unable(
            recovered.refusal,
            `the event index could not be brought up to date at start (${recovered.pending.length} changes held in memory)`,
          );
      }
    } catch (e) {
      this.segments.closeAll();
      throw e;
    }
    this.compactor = new Compactor({
      index: this.index,
      meta: this.meta,
      segments: this.segments,
      writer: this.writer,
      options: opts.compaction,
      warn: opts.warn,
      closed: () => this.closed,
    });
  }

  /** The event log's background work: its index commits and compaction (core/health.ts). */
  parts(): Monitored[] {
    return [this.writer.part, this.compactor.part];
  }

  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const found = await this.read(prefixOf(tenant, kind, key), lifecycleRank);
    return found && { kind, key, lifecycleRank: found.rank, json: found.bytes.toString('utf8'), bytes: found.bytes };
  }

  /** The bytes of the version of `rank` of the document at `prefix`, or of its latest version. */
  private async read(prefix: string, rank?: number): Promise<{ rank: number; bytes: Buffer } | undefined> {
    for (const r of ranksToTry(rank)) {
      const pos = this.writer.lookup(prefix + r);
      if (pos === undefined || pos.len < 0) continue;
      // The descriptor is taken in the same turn as the position: compaction removes a generation's
      // file only once no position names it, and closes a descriptor only once no read uses it.
      const read = this.segments.read(pos);
      return { rank: r, bytes: Buffer.isBuffer(read) ? read : await read };
    }
    return undefined;
  }

  /**
   * The documents of many versions at once, in the order asked (a page of the change feed's puts:
   * query's `Finder.documents`): for each, the bytes of the version of `lifecycleRank` of `key`, or
   * of its latest version when it names none, as `get` would answer them; undefined for one not
   * stored or deleted. A version given with where it was `logged` (a feed entry's) is read from
   * there, the document that put wrote, without a lookup, while that file is the segment's current
   * generation; else looked up as above. Read together: every position looked up first (in one turn, so in one
   * LMDB read transaction: lmdb-js renews it once a turn), then the documents read in the order of
   * the log, one `pread` a run of adjacent records (segments.ts `readMany`), each answered as a
   * slice of what was read, no text made of it. The lookups and the reads of the runs are made in
   * one turn, as `read` takes a position and its descriptor: compaction moves positions to a new
   * generation, and removes the old file, only between turns (and the larger documents, read
   * through the thread pool, hold their descriptor open).
   */
  async documentsOf(
    tenant: string,
    kind: KindSegment,
    versions: ReadonlyArray<{
      readonly key: string;
      readonly lifecycleRank?: number | undefined;
      readonly logged?: LogPosition | undefined;
    }>,
  ): Promise<Array<Buffer | undefined>> {
    const out = new Array<Buffer | undefined>(versions.length);
    const found: Pos[] = [];
    /** The index in `versions` of each position found. */
    const at: number[] = [];
    const { gens } = this.segments;
    for (let i = 0; i < versions.length; i++) {
      const v = versions[i]!;
      // Where the put wrote it (a feed entry's), while that file is the segment's current one:
      // compaction copies what it keeps to a new generation and removes the old file.
      const w = v.logged;
      if (w !== undefined && gens.get(w.seg) === w.gen) {
        found.push(w);
        at.push(i);
        continue;
      }
      const prefix = prefixOf(tenant, kind, v.key);
      for (const r of ranksToTry(v.lifecycleRank)) {
        const pos = this.writer.lookup(prefix + r);
        if (pos === undefined || pos.len < 0) continue;
        found.push(pos);
        at.push(i);
        break;
      }
    }
    if (found.length === 0) return out;
    const read = this.segments.readMany(found);
    let waiting: Array<Promise<void>> | undefined;
    for (let j = 0; j < read.length; j++) {
      const b = read[j]!;
      if (Buffer.isBuffer(b)) out[at[j]!] = b;
      else (waiting ??= []).push(b.then((bytes) => void (out[at[j]!] = bytes)));
    }
    if (waiting !== undefined) await Promise.all(waiting);
    return out;
  }

  /**
   * A page of a list of the events in this store, as of the last index commit: at their event
   * times, all of them or one vehicle's (any other facet gets all of them; effects.ts). The entity
   * store lists the events it keeps (update and association events) on its own.
   */
  async list(scan: ListScan): Promise<ListPosition[]> {
    await this.settled();
    return this.effects.list(scan);
  }

  /**
   * Resolves once every write answered so far is in the index and what it records besides (lists,
   * track, feed, positions): the index commit that follows a write by up to INDEX_DELAY_MS is made
   * now. Reads of those wait for it, so that a client reads its own writes, as GET does.
   */
  settled(): Promise<void> {
    return this.writer.flush();
  }

  /**
   * A vehicle's track, in event time order: the location events with a position among the
   * vehicle's entries (effects.ts), read a chunk at a time, each with its event's latest version
   * read from the log as `get` reads it (an event deleted since it was read from the track is left
   * out). Yielded as read.
   */
  async *track(scan: TrackScan): AsyncGenerator<TrackPoint> {
    await this.settled();
    for (const e of this.effects.trackEntries(scan)) {
      const doc = await this.read(prefixOf(scan.tenant, 'events', e.key));
      if (doc === undefined) continue;
      yield {
        time: e.time,
        key: e.key,
        lifecycleRank: doc.rank,
        lat: e.lat,
        lon: e.lon,
        speedKmh: e.speedKmh,
        heading: e.heading,
        doc: doc.bytes,
      };
    }
  }

  /** The track's points without their ids and documents, from the index alone (after `settled`, as `track`). */
  async *fixes(scan: FixScan): AsyncGenerator<readonly TrackFixPoint[]> {
    await this.settled();
    yield* this.effects.trackChunks(scan, decodeFix);
  }

  /** Resolves once the events are in the log, on the disk. */
  write(writes: readonly DocumentWrite[]): Promise<void> {
    if (writes.length === 0) return Promise.resolve();
    // Closed by a shutdown: the same write can be made again to the process that opens the store next.
    if (this.closed) return Promise.reject(new AdapterError('event-log', 'event store closed', { retryable: true }));
    let encoded: { buf: Buffer; ops: IndexOp[] };
    try {
      // While the disk is full, refused without trying (disk.ts); a probe opens the gate again.
      this.opts.gate?.check();
      // The index commits fail: the log takes writes only while what waits for the index in memory is bounded.
      if (this.writer.retrying && this.writer.behind >= INDEX_BACKLOG_MAX) {
        throw new AdapterError(
          'event-log',
          `event log: ${this.writer.behind} changes wait for the event index, whose commits fail (${this.writer.part.status().reason ?? 'failing'}); not taken until they succeed`,
          { retryable: true },
        );
      }
    } catch (e) {
      return Promise.reject(e);
    }
    try {
      const now = Date.now();
      const changes: EventChange[] = [];
      // A put listed at the time it was accepted (no event time of its own) keeps that time in its
      // record, so that a replay at start lists it there too (record.ts, operation 3).
      let acceptedAt: Array<number | undefined> | undefined;
      writes.forEach((w, i) => {
        const at = w.op === 'put' ? (w.doc.stamp?.acceptedAt ?? now) : now;
        const c = changeOf(w, at);
        changes.push(c);
        if (c.op === 'put' && c.time === at) (acceptedAt ??= [])[i] = at;
      });
      encoded = encodeRecords(writes, acceptedAt);
      encoded.ops.forEach((op, i) => (op.change = changes[i]));
    } catch (e) {
      return Promise.reject(e);
    }
    return this.commits.add(encoded.buf, encoded.ops);
  }

  /** Appends one group to the log (durable when this resolves), then queues its index changes. */
  private async append(group: readonly Pending[]): Promise<void> {
    let placed: Awaited<ReturnType<SegmentFiles['append']>>;
    try {
      placed = await this.segments.append(group.map((p) => p.buf));
    } catch (e) {
      // A full disk: a StorageRefused (the gate down: disk.ts); the log is as it was before the group.
      const bytes = group.reduce((a, p) => a + p.buf.length, 0);
      const cause = (e instanceof AdapterError ? e.cause : undefined) ?? e;
      const out = this.opts.gate === undefined ? e : this.opts.gate.failed(cause, `a write of ${bytes} bytes`);
      if (out instanceof StorageRefused) {
        this.opts.onRefused?.(bytes);
        throw out;
      }
      throw e;
    }
    this.opts.gate?.ok();
    this.opts.onAccepted?.();
    eventLogRecords.inc(group.reduce((a, p) => a + p.ops.length, 0));

    // The group is durable: readable from here on, and queued for the index.
    for (let i = 0; i < group.length; i++) {
      const { seg: n, off } = placed[i]!;
      for (const op of group[i]!.ops) {
        if (op instanceof IndexEntry) {
          op.seg = n;
          op.gen = this.segments.genOf(n);
          op.off = off + op.at;
          this.writer.put(op);
        } else {
          this.compactor.changed();
          this.writer.delete(op.prefix, op.change);
        }
      }
    }
    this.writer.covered(`${this.segments.seg}:${this.segments.size}`);
    // Back-pressure: writes are answered without waiting for the index commit, which costs more an
    // event than the log append (lists, track, feed, positions: effects.ts). Should it fall this far
    // behind (a writer faster than the index, e.g. an in-process fill), the group's answers wait for
    // it to catch up, so that what waits in memory (`recent`, the queue) stays bounded.
    if (this.writer.behind >= INDEX_BACKLOG_MAX) await this.writer.flush();
  }

  /** Compacts the sealed segments worth it (compaction.ts); one compaction runs at a time. */
  compact(minDeadRatio?: number): Promise<CompactionResult> {
    return this.compactor.compact(minDeadRatio);
  }

  ready(): Promise<boolean> {
    return Promise.resolve(!this.closed);
  }

  /** Waits for queued writes, then for the index to commit, and closes the segment files. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.compactor.stop();
    await this.commits.idle();
    await this.writer.flush();
    this.writer.stop();
    await this.opts.root.flushed.then(undefined, () => {});
    this.segments.closeAll();
  }
}

/**
 * What the index commit records of a write besides its entry (effects.ts), read here once: from
 * its value or the facts its bulk request's checking thread read, else from its text, parsed.
 * `acceptedAt`: when the put was accepted, its time when its document has none.
 */
function changeOf(w: DocumentWrite, acceptedAt: number): EventChange {
  if (w.op === 'delete') return { op: 'delete', tenant: w.tenant, kind: w.kind, key: w.key };
  const d = w.doc;
  return putChange(w.tenant, d.kind, d.key, d.lifecycleRank, acceptedAt, d.value, () => d.bytes?.toString('utf8') ?? d.json, d.facts);
}
