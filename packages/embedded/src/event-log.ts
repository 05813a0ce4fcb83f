/**
 * The embedded event store: telemetry events appended to a log of segment files, with a small
 * index (event key -> where its document lies in the log) in LMDB.
 *
 * Why not the documents themselves in LMDB, as before 2026-11-23: LMDB maps its file into the
 * process, so every page the service writes or reads counts in its resident size (RSS) and grew
 * with the data (223 MB of a 352 MB peak after 400,000 events in the benchmark); and a write was
 * answered only after lmdb's commit chain (~1.1 ms of commit plus its flush). Here the documents
 * are written with `write(2)` and read with `pread(2)`: they stay in the kernel's page cache, not
 * in the process; only the index is mapped: by estimate ~70 bytes an event (key ~50, position 12,
 * LMDB node header 8) against ~560 before (228 MB of LMDB file for ~400,000 events).
 *
 * Durability: a `write` resolves once its records are in the log, written with O_DSYNC (on the
 * disk when the write returns). Writes that arrive while a log write is under way share the next
 * one (group commit), so under load one sync answers many writes. The index is updated only
 * after the log write, gathered over 10 ms into one LMDB commit that no answer waits for (reads
 * see the new positions at once through `recent` until it commits); it records how far into the
 * log it has been applied (the checkpoint, in the same LMDB transaction as the entries it
 * covers). At start the log is replayed from the checkpoint into the index, so an index behind
 * the log after a crash catches up, and a torn record at the tail of the log (a write cut off by
 * a crash: never answered, because its write never returned) is cut off.
 *
 * Record: u32 body length, u32 CRC-32 of the body, then the body: u8 operation (1 put, 2 delete),
 * u16 key length, the key (UTF-8), and for a put the document (UTF-8 JSON, as answered). A put's
 * key is `tenant|kind|key|rank`; a delete's is `tenant|kind|key|` and removes every rank.
 *
 * Compaction: a replaced or deleted event's record stays in its segment until that segment is
 * sealed (a newer one is being written) and at least half of its bytes are such records (see
 * `compact`). The segment is then rewritten without them, as a new generation of the same
 * segment (`NNNNNNNNNN.G.log`) that keeps its place in the log's order. Index entries name the
 * generation their record is in (a value of 16 bytes; those of 12 written by earlier versions lie
 * in the generation the segment's mark names), so the index moves to the new generation a chunk at
 * a time while reads go on from both files; the old file is removed once the new generation is
 * named as the segment's. A start after a crash keeps the old generation when the move had not
 * begun, finishes a move that a `moving` mark says was under way, and removes the other files.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import type { Database, RootDatabase } from 'lmdb';
import type { KindSegment } from '@otm/model';
import {
  eventIndexBehind,
  eventIndexFailed,
  eventLogBytes,
  eventLogCompactions,
  eventLogReclaimedBytes,
  eventLogRecords,
  eventLogWrites,
  type DocumentWrite,
  type EventStore,
  type StoredDocument,
} from '@otm/core';
import { RANKS_DOWN, SEP, prefixOf, ranksToTry } from './keys.js';


const HEADER = 8;
const OP_PUT = 1;
const OP_DELETE = 2;
/** A new segment file is started when the current one would grow past this. */
export const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;
/** `NNNNNNNNNN.log`, or `NNNNNNNNNN.G.log` for generation G (G >= 1) of a compacted segment. */
const SEGMENT_NAME = /^(\d{10})(?:\.(\d+))?\.log$/;
const segmentName = (n: number, gen = 0) => `${String(n).padStart(10, '0')}${gen > 0 ? `.${gen}` : ''}.log`;
const CHECKPOINT = 'checkpoint';
/** Meta key of a segment's current generation (absent: 0); GONE: compaction found nothing in it to keep. */
const genKey = (n: number) => `gen:${String(n).padStart(10, '0')}`;
const GONE = 'gone';

/**
 * Where a document lies in the log: segment number, the generation of the segment's file, byte
 * offset and byte length of its JSON.
 */
interface Pos {
  readonly seg: number;
  readonly gen: number;
  readonly off: number;
  readonly len: number;
}
/** Meta key of a compaction moving segment `n`'s index entries to a new generation (its value). */
const movingKey = (n: number) => `moving:${String(n).padStart(10, '0')}`;
/** The key of a segment generation's descriptor in `fds`; a segment never reaches 1024 generations (see `compactSegment`). */
const MAX_GEN = 1023;
const fileKey = (n: number, gen: number) => n * (MAX_GEN + 1) + gen;

/**
 * Index changes are gathered for this long (or up to INDEX_BATCH of them) and handed to LMDB
 * together: one LMDB commit, with its own sync, for many log syncs.
 */
const INDEX_DELAY_MS = 10;
const INDEX_BATCH = 20_000;

/** Compaction reads and writes a segment in pieces of this size. */
const COMPACTION_CHUNK = 1024 * 1024;
/**
 * Index entries a compaction moves to the new generation in one event-loop turn (~2 µs each: a
 * few milliseconds a turn; all of a 64 MB segment's in one turn held the loop up 110–160 ms).
 */
const MOVE_CHUNK = 2_000;

async function readFully(fh: fs.promises.FileHandle, buf: Buffer, position: number): Promise<void> {
  const { bytesRead } = await fh.read(buf, 0, buf.length, position);
  if (bytesRead !== buf.length) throw new Error(`event log: short read (${bytesRead} of ${buf.length} bytes)`);
}

async function writeFully(fh: fs.promises.FileHandle, buf: Buffer, position: number): Promise<void> {
  const { bytesWritten } = await fh.write(buf, 0, buf.length, position);
  if (bytesWritten !== buf.length) throw new Error(`event log: short write (${bytesWritten} of ${buf.length} bytes)`);
}

/**
 * An index value: u32 segment, u32 offset, u32 length, u32 generation. Values of 12 bytes (written
 * before positions named their generation) lie in the generation the segment's mark names.
 */
const encodePos = (p: Pos): Buffer => {
  const b = Buffer.allocUnsafe(16);
  b.writeUInt32LE(p.seg, 0);
  b.writeUInt32LE(p.off, 4);
  b.writeUInt32LE(p.len, 8);
  b.writeUInt32LE(p.gen, 12);
  return b;
};
const decodePos = (b: Buffer, genOf: (seg: number) => number): Pos => {
  const seg = b.readUInt32LE(0);
  return { seg, gen: b.length >= 16 ? b.readUInt32LE(12) : genOf(seg), off: b.readUInt32LE(4), len: b.readUInt32LE(8) };
};

/**
 * A put's index entry, one object for the event's whole way through the log: made with its record
 * (its key, where its JSON starts in the record buffer, its length), placed in the log once the
 * record is written (segment, generation, offset: it is then the `Pos` that `recent` maps the key to
 * and the index queue holds), and handed to LMDB as its key and position. One object rather than an
 * index change, a position and a queue entry an event: thousands wait for the index at once, and
 * the collector copies all they hold.
 */
class IndexEntry implements Pos {
  seg = 0;
  gen = 0;
  off = 0;
  constructor(
    readonly k: string,
    /** Where the JSON starts in its record buffer. */
    readonly at: number,
    readonly len: number,
  ) {}
}

/** One index change: a put's entry, or a delete's prefix. */
type IndexOp = IndexEntry | { readonly prefix: string };

/** The records of one `write` call, encoded into one buffer, and who waits for them. */
interface Pending {
  readonly buf: Buffer;
  readonly ops: readonly IndexOp[];
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

/** Encodes the records of one call into one buffer. */
function encodeRecords(writes: readonly DocumentWrite[]): { buf: Buffer; ops: IndexOp[] } {
  const keys: string[] = [];
  const keyBytes: number[] = [];
  const jsonBytes: number[] = [];
  /** Each put's document bytes, when it has them (asked for once: a TextPut makes a view a call). */
  const docBytes: (Buffer | undefined)[] = [];
  let total = 0;
  for (const w of writes) {
    const k = w.op === 'put' ? prefixOf(w.tenant, w.doc.kind, w.doc.key) + w.doc.lifecycleRank : prefixOf(w.tenant, w.kind, w.key);
    const kb = Buffer.byteLength(k);
    if (kb > 0xffff) throw new Error(`event key too long (${kb} bytes)`);
    const bytes = w.op === 'put' ? w.doc.bytes : undefined;
    const jb = w.op === 'put' ? (bytes?.length ?? Buffer.byteLength(w.doc.json)) : 0;
    docBytes.push(bytes);
    keys.push(k);
    keyBytes.push(kb);
    jsonBytes.push(jb);
    total += HEADER + 3 + kb + jb;
  }
  const buf = Buffer.allocUnsafe(total);
  const ops: IndexOp[] = [];
  let at = 0;
  writes.forEach((w, i) => {
    const body = at + HEADER;
    const kb = keyBytes[i]!;
    const jb = jsonBytes[i]!;
    const end = body + 3 + kb + jb;
    buf[body] = w.op === 'put' ? OP_PUT : OP_DELETE;
    buf.writeUInt16LE(kb, body + 1);
    buf.write(keys[i]!, body + 3, kb, 'utf8');
    if (w.op === 'put') {
      const bytes = docBytes[i];
      if (bytes !== undefined) bytes.copy(buf, body + 3 + kb);
      else buf.write(w.doc.json, body + 3 + kb, jb, 'utf8');
      ops.push(new IndexEntry(keys[i]!, body + 3 + kb, jb));
    } else ops.push({ prefix: keys[i]! });
    buf.writeUInt32LE(end - body, at);
    buf.writeUInt32LE(zlib.crc32(buf.subarray(body, end)), at + 4);
    at = end;
  });
  return { buf, ops };
}

/** The body of the record at `at` of a segment file of `size` bytes, or what is wrong there. */
function readRecordSync(fd: number, at: number, size: number, head: Buffer): Buffer | string {
  if (size - at < HEADER || fs.readSync(fd, head, 0, HEADER, at) !== HEADER) return 'a torn record header';
  const len = head.readUInt32LE(0);
  if (len < 3 || len > size - at - HEADER) return 'a torn record';
  const body = Buffer.allocUnsafe(len);
  if (fs.readSync(fd, body, 0, len, at + HEADER) !== len) return 'a torn record';
  if (zlib.crc32(body) !== head.readUInt32LE(4)) return 'a record whose checksum does not match';
  return body;
}

const writev = (fd: number, bufs: Buffer[], position: number) =>
  new Promise<number>((resolve, reject) => fs.writev(fd, bufs, position, (e, n) => (e ? reject(e) : resolve(n))));
/** Segment files are opened with O_DSYNC: a write returns once its data is on the disk. */
const SEGMENT_FLAGS = fs.constants.O_RDWR | fs.constants.O_DSYNC;
/**
 * Documents up to this size are read with a synchronous `pread`: from the page cache that costs
 * ~2 µs of CPU, where the same read through libuv's thread pool costs ~30 µs when reads come one at
 * a time, as GETs do (`node bench/diag/event-read.mjs`). Like LMDB's own reads (its pages are mapped
 * and read in place), a read of a page not in memory then waits on the disk on the event loop: keep
 * the data folder on local SSD. Larger documents are read through the thread pool.
 */
const SYNC_READ_MAX = 64 * 1024;

function preadSync(fd: number, len: number, position: number): Buffer {
  const b = Buffer.allocUnsafe(len);
  const n = fs.readSync(fd, b, 0, len, position);
  if (n !== len) throw new Error(`event log: short read (${n} of ${len} bytes)`);
  return b;
}

const pread = (fd: number, len: number, position: number) =>
  new Promise<Buffer>((resolve, reject) => {
    const b = Buffer.allocUnsafe(len);
    fs.read(fd, b, 0, len, position, (e, n) => (e ? reject(e) : n !== len ? reject(new Error(`event log: short read (${n} of ${len} bytes)`)) : resolve(b)));
  });

export interface EventLogOptions {
  /** Where the segment files are (created if missing). */
  readonly dir: string;
  /** The LMDB environment that holds the index (with the entity store's databases). */
  readonly root: RootDatabase;
  readonly segmentBytes?: number;
  /** Most segment files kept open at once (default 256; at least 2). */
  readonly maxOpenSegments?: number;
  /** Told what recovery found (a torn tail cut off, an old store moved into the log). */
  readonly warn?: (message: string) => void;
  readonly compaction?: CompactionOptions;
}

export interface CompactionOptions {
  /**
   * How often to look for sealed segments worth compacting, when a segment was sealed or an event
   * deleted since the last look (ms; default 10 minutes; 0: only when `compact` is called).
   */
  readonly intervalMs?: number;
  /** Rewrite a sealed segment once at least this share of its bytes is replaced or deleted events (default 0.5). */
  readonly minDeadRatio?: number;
  /** Index entries moved to a compacted segment's new generation in one event-loop turn (default 2,000). */
  readonly moveChunk?: number;
  /**
   * For tests: called after each step of a segment's compaction (the new generation written, each
   * chunk of the index moved, the new generation committed as the segment's); throwing stops it
   * there, as a crash would.
   */
  readonly onStep?: (step: 'written' | 'moved' | 'committed', segment: number) => void | Promise<void>;
}

export interface CompactionResult {
  /** Segments rewritten without their replaced and deleted events. */
  readonly compacted: number[];
  /** Segments removed: nothing in them was live. */
  readonly removed: number[];
  readonly reclaimedBytes: number;
}

/** One record of a segment being compacted, with where it will be in the new generation. */
interface SegmentRecord {
  readonly start: number;
  readonly end: number;
  readonly put: boolean;
  readonly k: string;
  readonly off: number;
  readonly len: number;
  to: number;
}

export class LogEventStore implements EventStore {
  /** Writes are encoded and queued in call order, and the queue is written and indexed in order. */
  readonly appliesInCallOrder = true;

  private readonly index: Database<Buffer, string>;
  private readonly meta: Database<string, string>;
  private readonly fds = new Map<number, number>();
  private readonly segmentBytes: number;
  private readonly maxOpen: number;
  private seg = 0;
  private size = 0;
  private queue: Pending[] = [];
  private running: Promise<void> | undefined;
  private closed = false;
  /**
   * Index changes whose records are durable in the log but that LMDB does not show yet (given to
   * it, or waiting in `indexQueue`); reads look here first. `len` -1: deleted.
   */
  private readonly recent = new Map<string, Pos>();
  /** Index changes for LMDB, in order (a deletion: an entry of length -1 for each rank). */
  private indexQueue: IndexEntry[] = [];
  private indexTimer: NodeJS.Timeout | undefined;
  /** The log position up to which `indexQueue` and what went before it cover the log (`seg:offset`). */
  private checkpoint = '';
  /** The last index batch handed to LMDB, until it is committed. */
  private indexing: Promise<void> | undefined;
  /** Set when LMDB failed to commit index changes: the checkpoint then stays where it was. */
  private indexFailed = false;
  /** The checkpoint LMDB last committed (at start: where recovery left the index). */
  private committedCheckpoint = '';
  /** The current generation of each segment, and the segment numbers in log order. */
  private readonly gens = new Map<number, number>();
  private segs: number[] = [];
  /** The generation of segment `seg` that its mark names (0 for one never compacted). */
  private readonly genOf = (seg: number): number => this.gens.get(seg) ?? 0;
  private decode(raw: Buffer): Pos {
    return decodePos(raw, this.genOf);
  }
  /**
   * Reads and writes in flight on each file descriptor: such a descriptor is not closed (neither
   * to keep at most `maxOpen` open nor when compaction replaced its file) until they end.
   */
  private readonly inUse = new Map<number, number>();
  private readonly retired = new Set<number>();
  private compacting: Promise<CompactionResult> | undefined;
  private compactTimer: NodeJS.Timeout | undefined;
  /** A segment sealed or an event deleted since compaction last looked. */
  private changedSinceLook = true;
  /** Set when LMDB failed to commit a compaction's move: no more compaction in this process. */
  private compactionStopped = false;

  constructor(private readonly opts: EventLogOptions) {
    this.segmentBytes = opts.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    this.maxOpen = Math.max(2, opts.maxOpenSegments ?? 256);
    this.index = opts.root.openDB<Buffer, string>({ name: 'event-index', encoding: 'binary' });
    this.meta = opts.root.openDB<string, string>({ name: 'event-log', encoding: 'string' });
    fs.mkdirSync(opts.dir, { recursive: true });
    try {
      this.recover();
    } catch (e) {
      for (const fd of this.fds.values()) fs.closeSync(fd);
      throw e;
    }
    const every = opts.compaction?.intervalMs ?? 10 * 60_000;
    if (every > 0) {
      this.compactTimer = setInterval(() => {
        if (!this.changedSinceLook || this.compacting) return;
        this.changedSinceLook = false;
        this.compact().catch((e: unknown) => this.opts.warn?.(`event log compaction stopped: ${(e as Error)?.message ?? e}`));
      }, every);
      this.compactTimer.unref();
    }
  }

  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const prefix = prefixOf(tenant, kind, key);
    for (const r of ranksToTry(lifecycleRank)) {
      const k = prefix + r;
      let pos = this.recent.get(k);
      if (pos === undefined) {
        const raw = this.index.get(k);
        if (raw === undefined) continue;
        pos = this.decode(raw);
      }
      if (pos.len < 0) continue;
      // The descriptor is taken in the same turn as the position: compaction removes a generation's
      // file only once no position names it, and closes a descriptor only once no read uses it.
      const fd = this.fdOf(pos.seg, pos.gen);
      if (pos.len <= SYNC_READ_MAX) {
        const bytes = preadSync(fd, pos.len, pos.off);
        return { kind, key, lifecycleRank: r, json: bytes.toString('utf8'), bytes };
      }
      this.acquire(fd);
      let bytes: Buffer;
      try {
        bytes = await pread(fd, pos.len, pos.off);
      } finally {
        this.release(fd);
      }
      return { kind, key, lifecycleRank: r, json: bytes.toString('utf8'), bytes };
    }
    return undefined;
  }

  /** Resolves once the events are in the log, on the disk. */
  write(writes: readonly DocumentWrite[]): Promise<void> {
    if (writes.length === 0) return Promise.resolve();
    if (this.closed) return Promise.reject(new Error('event store closed'));
    let encoded: { buf: Buffer; ops: IndexOp[] };
    try {
      encoded = encodeRecords(writes);
    } catch (e) {
      return Promise.reject(e);
    }
    const { buf, ops } = encoded;
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ buf, ops, resolve, reject });
      this.running ??= this.drain();
    });
  }

  /**
   * Writes what is queued, one group at a time: everything queued while a group was being
   * written (O_DSYNC: on the disk when the write returns) forms the next group.
   */
  private async drain(): Promise<void> {
    // `running` is cleared in the same turn as the queue is found empty, so that a write made
    // after that (by a waiter this loop resolved) starts a new loop.
    for (;;) {
      if (this.queue.length === 0) {
        this.running = undefined;
        return;
      }
      const group = this.queue;
      this.queue = [];
      try {
        await this.append(group);
      } catch (e) {
        for (const p of group) p.reject(e);
        continue;
      }
      for (const p of group) p.resolve();
    }
  }

  /** Appends one group to the log (durable when this resolves), then queues its index changes. */
  private async append(group: readonly Pending[]): Promise<void> {
    // Every call's records go into one segment; a new segment starts when they would overflow it.
    const placed: { p: Pending; seg: number; off: number }[] = [];
    const bySeg = new Map<number, { start: number; bufs: Buffer[] }>();
    let seg = this.seg;
    let size = this.size;
    for (const p of group) {
      [seg, size] = this.roomFor(p.buf.length, seg, size);
      placed.push({ p, seg, off: size });
      const s = bySeg.get(seg) ?? { start: size, bufs: [] };
      s.bufs.push(p.buf);
      bySeg.set(seg, s);
      size += p.buf.length;
    }
    for (const [n, s] of bySeg) {
      const fd = this.fdOf(n);
      this.acquire(fd);
      try {
        for (let i = 0, at = s.start; i < s.bufs.length; i += 256) {
          const part = s.bufs.slice(i, i + 256);
          const want = part.reduce((a, b) => a + b.length, 0);
          const wrote = await writev(fd, part, at);
          if (wrote !== want) throw new Error(`event log: short write (${wrote} of ${want} bytes)`);
          at += want;
        }
      } catch (e) {
        // Nothing of this group is acknowledged; cut what it may have written off the log, so
        // that the next group starts where this one did.
        try {
          fs.ftruncateSync(fd, s.start);
        } catch {
          /* the next start cuts an unreadable tail */
        }
        this.seg = n;
        this.size = s.start;
        throw e;
      } finally {
        this.release(fd);
      }
    }
    this.seg = seg;
    this.size = size;
    eventLogWrites.inc(bySeg.size);
    eventLogBytes.inc(placed.reduce((a, x) => a + x.p.buf.length, 0));
    eventLogRecords.inc(placed.reduce((a, x) => a + x.p.ops.length, 0));

    // The group is durable: readable from here on, and queued for the index.
    const queue = this.indexQueue;
    for (const { p, seg: n, off } of placed) {
      for (const op of p.ops) {
        if (op instanceof IndexEntry) {
          op.seg = n;
          op.gen = this.genOf(n);
          op.off = off + op.at;
          this.recent.set(op.k, op);
          queue.push(op);
        } else {
          this.changedSinceLook = true;
          for (const r of RANKS_DOWN) {
            // A deletion waiting for the index: a new object each time, so that each is told apart in `recent`.
            const e = new IndexEntry(op.prefix + r, 0, -1);
            this.recent.set(e.k, e);
            queue.push(e);
          }
        }
      }
    }
    this.checkpoint = `${seg}:${size}`;
    eventIndexBehind.set(this.recent.size);
    if (queue.length >= INDEX_BATCH) this.applyIndex();
    else this.indexTimer ??= setTimeout(() => this.applyIndex(), INDEX_DELAY_MS);
  }

  /**
   * Hands the queued index changes to LMDB with the checkpoint after them, in one event-loop turn
   * and so in one LMDB transaction (lmdb-js's event-turn batching): committed together or not at
   * all. Once committed, drops them from `recent` unless a later change replaced them there.
   * Should a commit fail, its changes stay in `recent` (still read from there), and from then on
   * every batch writes the checkpoint of the last committed one instead of moving it, so that
   * the next start replays the log from before the lost changes (a later batch may already have
   * committed a checkpoint past them: the next write puts it back).
   */
  private applyIndex(): void {
    clearTimeout(this.indexTimer);
    this.indexTimer = undefined;
    const todo = this.indexQueue;
    if (todo.length === 0) return;
    this.indexQueue = [];
    for (const e of todo) void (e.len < 0 ? this.index.remove(e.k) : this.index.put(e.k, encodePos(e)));
    const checkpoint = this.indexFailed ? this.committedCheckpoint : this.checkpoint;
    const settled: Promise<void> = this.meta
      .put(CHECKPOINT, checkpoint)
      .then(
        () => {
          for (const e of todo) if (this.recent.get(e.k) === e) this.recent.delete(e.k);
          eventIndexBehind.set(this.recent.size);
          this.committedCheckpoint = checkpoint;
        },
        (e: unknown) => {
          if (this.indexFailed) return;
          this.indexFailed = true;
          eventIndexFailed.set(1);
          this.opts.warn?.(`event index: LMDB did not commit (${(e as Error)?.message ?? e}); the events stay readable, and the next start indexes them again from the log`);
          this.meta.put(CHECKPOINT, this.committedCheckpoint).catch(() => {});
        },
      )
      .finally(() => {
        if (this.indexing === settled) this.indexing = undefined;
      });
    this.indexing = settled;
  }

  /** Where `bytes` more go: the end of segment `seg`, or a new segment if they would overflow it. */
  private roomFor(bytes: number, seg: number, size: number): [seg: number, size: number] {
    return size > 0 && size + bytes > this.segmentBytes ? [this.createSegment(seg + 1), 0] : [seg, size];
  }

  /**
   * The open descriptor of segment `n`. At most `maxOpen` stay open (a store of many segments
   * read across would otherwise run out of descriptors): the least recently used are closed,
   * never the segment being written nor one with a read or write in flight.
   */
  private fdOf(n: number, gen: number = this.genOf(n)): number {
    const key = fileKey(n, gen);
    let fd = this.fds.get(key);
    if (fd !== undefined) {
      // Most recently used last.
      this.fds.delete(key);
      this.fds.set(key, fd);
      return fd;
    }
    fd = fs.openSync(path.join(this.opts.dir, segmentName(n, gen)), SEGMENT_FLAGS);
    this.fds.set(key, fd);
    this.trim(key);
    return fd;
  }

  /** Closes the least recently used descriptors beyond `maxOpen` that nothing uses (nor the file `keep`). */
  private trim(keep?: number): void {
    const writing = fileKey(this.seg, this.genOf(this.seg));
    for (const [m, fd] of this.fds) {
      if (this.fds.size <= this.maxOpen) return;
      if (m === writing || m === keep || this.inUse.has(fd)) continue;
      this.fds.delete(m);
      fs.closeSync(fd);
    }
  }

  private acquire(fd: number): void {
    this.inUse.set(fd, (this.inUse.get(fd) ?? 0) + 1);
  }

  private release(fd: number): void {
    const left = (this.inUse.get(fd) ?? 1) - 1;
    if (left > 0) this.inUse.set(fd, left);
    else {
      this.inUse.delete(fd);
      if (this.retired.delete(fd)) fs.closeSync(fd);
      else if (this.fds.size > this.maxOpen) this.trim();
    }
  }

  /** Closes the descriptor of a replaced generation once no read uses it. */
  private retire(fd: number): void {
    if (this.inUse.has(fd)) this.retired.add(fd);
    else fs.closeSync(fd);
  }

  private syncDir(): void {
    const dirFd = fs.openSync(this.opts.dir, 'r');
    try {
      fs.fsyncSync(dirFd);
    } finally {
      fs.closeSync(dirFd);
    }
  }

  private async syncDirAsync(): Promise<void> {
    const dir = await fs.promises.open(this.opts.dir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }

  /**
   * Creates segment `n` (empty: a file of that name can only be left by a group that failed
   * before writing to it) and makes its name durable in the directory.
   */
  private createSegment(n: number): number {
    const old = this.fds.get(fileKey(n, 0));
    if (old !== undefined) fs.closeSync(old);
    const fd = fs.openSync(path.join(this.opts.dir, segmentName(n)), SEGMENT_FLAGS | fs.constants.O_CREAT | fs.constants.O_TRUNC);
    this.fds.set(fileKey(n, 0), fd);
    this.syncDir();
    this.gens.set(n, 0);
    if (!this.segs.includes(n)) this.segs.push(n);
    // The segment before it is sealed now: compaction may look at it.
    this.changedSinceLook = true;
    return n;
  }

  /**
   * At start: replays the log from the index's checkpoint (an index behind the log catches up),
   * cuts a torn record off the tail of the last segment, and moves the events of the LMDB event
   * store of earlier versions (database `telemetry`) into the log.
   */
  private recover(): void {
    const segs = this.pickGenerations();
    this.segs = [...segs];
    if (segs.length === 0) {
      this.seg = this.createSegment(1);
      this.size = 0;
    } else {
      const [cpSeg, cpOff] = (this.meta.get(CHECKPOINT) ?? `${segs[0]}:0`).split(':').map(Number) as [number, number];
      for (const n of segs) {
        if (n < cpSeg) continue;
        const last = n === segs[segs.length - 1];
        const end = this.replay(n, n === cpSeg ? cpOff : 0, last);
        if (last) {
          this.seg = n;
          this.size = end;
        }
      }
      this.opts.root.transactionSync(() => this.meta.putSync(CHECKPOINT, `${this.seg}:${this.size}`));
    }
    this.migrateLegacy();
    eventLogBytes.set(
      fs
        .readdirSync(this.opts.dir)
        .filter((f) => SEGMENT_NAME.test(f))
        .reduce((a, f) => a + fs.statSync(path.join(this.opts.dir, f)).size, 0),
    );
    this.committedCheckpoint = this.checkpoint = `${this.seg}:${this.size}`;
  }

  /**
   * Finds the segment files and the generation of each that the index names; removes the other
   * generations (left by a compaction that a stop cut short: before its LMDB commit the new one,
   * after it the old one). Returns the segment numbers in log order.
   */
  private pickGenerations(): number[] {
    const files = new Map<number, Map<number, string>>();
    for (const f of fs.readdirSync(this.opts.dir)) {
      const m = SEGMENT_NAME.exec(f);
      if (!m) continue;
      const n = Number(m[1]);
      const byGen = files.get(n) ?? new Map<number, string>();
      byGen.set(m[2] === undefined ? 0 : Number(m[2]), f);
      files.set(n, byGen);
    }
    let removed = false;
    const marks: [string, string][] = [];
    const remove = (f: string) => {
      fs.unlinkSync(path.join(this.opts.dir, f));
      this.opts.warn?.(`event log: removed ${f}, left by a compaction that a stop cut short`);
      removed = true;
    };
    for (const [n, byGen] of files) {
      const want = this.meta.get(genKey(n));
      if (want === GONE) {
        byGen.forEach(remove);
        continue;
      }
      // Without a mark (a segment never compacted, or an index lost with its marks) the lowest
      // generation: the older one is whole until the newer is named by the index, and either
      // holds every event that was live in the segment.
      let gen = want === undefined ? Math.min(...byGen.keys()) : Number(want);
      if (!byGen.has(gen)) {
        throw new Error(`event log: segment ${n} is generation ${gen} by the index, but ${segmentName(n, gen)} is missing; the log is damaged`);
      }
      // A move to a new generation that a stop cut short: index entries point at both; finish it.
      const moving = this.meta.get(movingKey(n));
      if (moving !== undefined) {
        const to = Number(moving);
        if (!byGen.has(to)) throw new Error(`event log: segment ${n} was being moved to ${segmentName(n, to)}, which is missing; the log is damaged`);
        this.rollForward(n, gen, to);
        // Named as the segment's before the old file goes: a stop in between finds a whole log.
        this.opts.root.transactionSync(() => {
          this.meta.putSync(genKey(n), String(to));
          this.meta.removeSync(movingKey(n));
        });
        gen = to;
      } else if (want === undefined && gen > 0) marks.push([genKey(n), String(gen)]);
      for (const [g, f] of byGen) if (g !== gen) remove(f);
      this.gens.set(n, gen);
    }
    if (removed) this.syncDir();
    // Segments that compaction removed whole: their files are gone, their mark can go too; and so
    // can the mark of a move whose segment has no file left.
    const stale = [
      ...[...this.meta.getRange({ start: 'gen:', end: 'gen;' })].filter((e) => e.value === GONE).map((e) => e.key),
      ...[...this.meta.getRange({ start: 'moving:', end: 'moving;' })].map((e) => e.key),
    ];
    if (stale.length > 0 || marks.length > 0) {
      this.opts.root.transactionSync(() => {
        stale.forEach((k) => this.meta.removeSync(k));
        marks.forEach(([k, v]) => this.meta.putSync(k, v));
      });
    }
    return [...this.gens.keys()].sort((a, b) => a - b);
  }

  /**
   * Rewrites the sealed segments in which at least `minDeadRatio` (default 0.5, or the store's
   * option) of the bytes are replaced or deleted events, without those records. How much of each
   * segment is live comes from one pass over the index (in steps, between which other work goes
   * on); each chosen segment is then compacted on its own (`compactSegment`). One compaction runs
   * at a time: a call while one runs gets its result.
   */
  compact(minDeadRatio = this.opts.compaction?.minDeadRatio ?? 0.5): Promise<CompactionResult> {
    this.compacting ??= this.compactAll(minDeadRatio).finally(() => {
      this.compacting = undefined;
    });
    return this.compacting;
  }

  private async compactAll(minDeadRatio: number): Promise<CompactionResult> {
    const result: CompactionResult = { compacted: [], removed: [], reclaimedBytes: 0 };
    // The index changes waiting for their 10 ms go now: a segment is compacted only once the
    // index and its checkpoint have moved past it.
    this.applyIndex();
    await this.indexing;
    if (this.indexFailed || this.compactionStopped) return result;
    const live = await this.liveBytes();
    for (const n of this.segs.filter((x) => x < this.seg)) {
      if (this.closed) break;
      const size = fs.fstatSync(this.fdOf(n)).size;
      if (size === 0 || 1 - (live.get(n) ?? 0) / size < minDeadRatio) continue;
      const done = await this.compactSegment(n, minDeadRatio);
      if (done === undefined) continue;
      (done.removed ? result.removed : result.compacted).push(n);
      (result as { reclaimedBytes: number }).reclaimedBytes += done.reclaimed;
    }
    return result;
  }

  /** Bytes of live records in each segment, by the index (and the changes not committed to it yet). */
  private async liveBytes(): Promise<Map<number, number>> {
    const live = new Map<number, number>();
    const add = (k: string, pos: Pos) => {
      if (pos.len >= 0) live.set(pos.seg, (live.get(pos.seg) ?? 0) + HEADER + 3 + Buffer.byteLength(k) + pos.len);
    };
    let start: string | undefined;
    for (;;) {
      let last: string | undefined;
      for (const { key, value } of this.index.getRange({ start, limit: 2_000 })) {
        if (key === start) continue; // `start` is where the previous step ended
        last = key;
        if (!this.recent.has(key)) add(key, this.decode(value));
      }
      if (last === undefined || this.closed) break;
      start = last;
      await new Promise((r) => setImmediate(r));
    }
    for (const [k, pos] of this.recent) add(k, pos);
    return live;
  }

  /**
   * Compacts sealed segment `n`: reads it, keeps the records still live (and the deletions, while
   * an older segment may hold versions they delete), writes them as the next generation of the
   * segment and makes it durable. Then it moves the index entries of those records to the new
   * generation a chunk at a time (`moveChunk` entries in an event-loop turn, each chunk its own
   * LMDB transaction), so that reads and writes go on between chunks: a position names its
   * generation, so entries moved and entries not moved yet are both read right, from two files.
   * An entry is moved only if it still points at the record copied (a write or a deletion since
   * then wins). A `moving` mark, committed before the first entry moves, tells a start cut short
   * in the middle to finish the move (`rollForward`); the last step names the new generation as
   * the segment's and drops the mark in one transaction, and only then is the old file removed.
   * Returns undefined when it was not worth it (less than `minDeadRatio` of the bytes to drop) or
   * not possible yet.
   */
  private async compactSegment(n: number, minDeadRatio: number): Promise<{ removed: boolean; reclaimed: number } | undefined> {
    // Not while index changes that point into the segment, or the checkpoint, are uncommitted.
    if (Number(this.committedCheckpoint.split(':')[0]) <= n) return undefined;
    for (const p of this.recent.values()) if (p.seg === n) return undefined;
    const oldGen = this.genOf(n);
    if (oldGen >= MAX_GEN) return undefined;
    const oldFile = path.join(this.opts.dir, segmentName(n, oldGen));
    let newFile: string | undefined;
    let src: fs.promises.FileHandle | undefined;
    try {
      src = await fs.promises.open(oldFile, 'r');
      const size = (await src.stat()).size;
      // Which records stay: live puts, and deletions while an older segment exists.
      const older = this.segs[0]! < n;
      const kept: SegmentRecord[] = [];
      let bytes = 0;
      await this.eachRecord(src, n, size, (r) => {
        if (r.put ? this.isAt(r.k, n, oldGen, r.off) : older) {
          r.to = bytes;
          kept.push(r);
          bytes += r.end - r.start;
        }
      });
      if (this.closed || (size - bytes) / size < minDeadRatio) return undefined;

      const newGen = oldGen + 1;
      if (kept.length > 0) {
        newFile = path.join(this.opts.dir, segmentName(n, newGen));
        await this.copyRecords(src, size, kept, newFile);
        await this.syncDirAsync();
      }
      await this.opts.compaction?.onStep?.('written', n);
      if (this.closed) throw new Error('event store closed');
      const stop = (e: unknown, what: string): undefined => {
        this.compactionStopped = true;
        this.opts.warn?.(`event log compaction stopped until the next start: LMDB did not commit ${what} (${(e as Error)?.message ?? e})`);
        return undefined;
      };

      if (kept.length > 0) {
        try {
          await this.meta.put(movingKey(n), String(newGen));
        } catch (e) {
          return stop(e, `the start of segment ${n}'s move`); // nothing points at the new file: removed below
        }
        newFile = undefined; // part of the log from here on: a start finishes the move
        const chunk = Math.max(1, this.opts.compaction?.moveChunk ?? MOVE_CHUNK);
        const puts = kept.filter((r) => r.put);
        for (let i = 0; i < puts.length; i += chunk) {
          // One turn: these entries go to LMDB together. Until they are committed, reads find the
          // old positions, in the old file, which stays until the move is over.
          let committed: Promise<boolean> | undefined;
          for (let j = i; j < Math.min(puts.length, i + chunk); j++) {
            const r = puts[j]!;
            if (!this.isAt(r.k, n, oldGen, r.off)) continue;
            committed = this.index.put(r.k, encodePos({ seg: n, gen: newGen, off: r.to + (r.off - r.start), len: r.len }));
          }
          try {
            await committed;
          } catch (e) {
            // Reads go on from the old positions; the next start finishes the move.
            return stop(e, `a step of segment ${n}'s move`);
          }
          await this.opts.compaction?.onStep?.('moved', n);
          if (this.closed) return undefined; // the next start finishes the move
        }
        // No position names the old generation now: the new one becomes the segment's.
        this.gens.set(n, newGen);
        const flip = this.meta.put(genKey(n), String(newGen));
        void this.meta.remove(movingKey(n));
        try {
          await flip;
        } catch (e) {
          return stop(e, `the end of segment ${n}'s move`);
        }
      } else {
        // Nothing in it is live: the segment goes.
        this.gens.delete(n);
        this.segs = this.segs.filter((x) => x !== n);
        try {
          await this.meta.put(genKey(n), GONE);
        } catch (e) {
          this.gens.set(n, oldGen);
          this.segs = [...this.segs, n].sort((a, b) => a - b);
          return stop(e, `segment ${n}'s removal`);
        }
      }
      const oldFd = this.fds.get(fileKey(n, oldGen));
      this.fds.delete(fileKey(n, oldGen));
      if (oldFd !== undefined) this.retire(oldFd);
      await this.opts.compaction?.onStep?.('committed', n);

      await src.close();
      src = undefined;
      // In the thread pool: removing a file of 64 MB took ~30 ms, too long for the event loop.
      await fs.promises.unlink(oldFile);
      await this.syncDirAsync();
      if (kept.length === 0) await this.meta.remove(genKey(n));
      const reclaimed = size - bytes;
      eventLogBytes.dec(reclaimed);
      eventLogCompactions.inc();
      eventLogReclaimedBytes.inc(reclaimed);
      return { removed: kept.length === 0, reclaimed };
    } finally {
      await src?.close();
      // Written but not named by the index (stopped before the move started): not part of the log.
      if (newFile !== undefined) fs.rmSync(newFile, { force: true });
    }
  }

  /** Whether the index has `k` at offset `off` of generation `gen` of segment `n`. */
  private isAt(k: string, n: number, gen: number, off: number): boolean {
    let pos = this.recent.get(k);
    if (pos === undefined) {
      const raw = this.index.get(k);
      if (raw === undefined) return false;
      pos = this.decode(raw);
    }
    return pos.len >= 0 && pos.seg === n && pos.gen === gen && pos.off === off;
  }

  /**
   * Calls `fn` with each record of sealed segment `n`, read in pieces of COMPACTION_CHUNK bytes
   * (a record larger than that on its own), so that compaction holds only a piece of the segment in
   * memory; between pieces other work goes on. A damaged record stops the compaction.
   */
  private async eachRecord(fh: fs.promises.FileHandle, n: number, size: number, fn: (r: SegmentRecord) => void): Promise<void> {
    const piece = Buffer.allocUnsafe(COMPACTION_CHUNK);
    let at = 0;
    while (at < size) {
      const want = Math.min(COMPACTION_CHUNK, size - at);
      let buf = piece.subarray(0, want);
      await readFully(fh, buf, at);
      const recLen = want >= HEADER ? HEADER + buf.readUInt32LE(0) : 0;
      if (recLen > want && recLen <= size - at) {
        // One record larger than a piece: read it whole.
        buf = Buffer.allocUnsafe(recLen);
        await readFully(fh, buf, at);
      }
      let i = 0;
      while (i + HEADER <= buf.length) {
        const len = buf.readUInt32LE(i);
        if (i + HEADER + len > buf.length) break; // continues in the next piece
        if (len < 3 || zlib.crc32(buf.subarray(i + HEADER, i + HEADER + len)) !== buf.readUInt32LE(i + 4)) break;
        const kb = buf.readUInt16LE(i + HEADER + 1);
        const start = at + i;
        fn({
          start,
          end: start + HEADER + len,
          put: buf[i + HEADER] === OP_PUT,
          k: buf.toString('utf8', i + HEADER + 3, i + HEADER + 3 + kb),
          off: start + HEADER + 3 + kb,
          len: len - 3 - kb,
          to: 0,
        });
        i += HEADER + len;
      }
      if (i === 0) throw new Error(`event log ${segmentName(n, this.gens.get(n))}: a damaged record at byte ${at}; not compacted`);
      at += i;
      await new Promise((r) => setImmediate(r));
      if (this.closed) return;
    }
  }

  /**
   * Writes the kept records, read again from the old generation in pieces, one after the other
   * into a new file at `file`, and makes it durable.
   */
  private async copyRecords(src: fs.promises.FileHandle, size: number, kept: readonly SegmentRecord[], file: string): Promise<void> {
    const out = await fs.promises.open(file, 'wx');
    try {
      const window = Buffer.allocUnsafe(COMPACTION_CHUNK);
      const pending = Buffer.allocUnsafe(COMPACTION_CHUNK);
      let win = window.subarray(0, 0);
      let winStart = 0;
      let used = 0;
      let written = 0;
      const flush = async () => {
        if (used === 0) return;
        await writeFully(out, pending.subarray(0, used), written);
        written += used;
        used = 0;
      };
      for (const r of kept) {
        const len = r.end - r.start;
        if (r.start < winStart || r.end > winStart + win.length) {
          const want = Math.max(len, Math.min(COMPACTION_CHUNK, size - r.start));
          win = want <= COMPACTION_CHUNK ? window.subarray(0, want) : Buffer.allocUnsafe(want);
          await readFully(src, win, r.start);
          winStart = r.start;
        }
        const bytes = win.subarray(r.start - winStart, r.end - winStart);
        if (used + len > pending.length) await flush();
        if (len > pending.length) {
          await writeFully(out, bytes, written);
          written += len;
        } else {
          bytes.copy(pending, used);
          used += len;
        }
      }
      await flush();
      await out.sync();
    } finally {
      await out.close();
    }
  }

  /**
   * At start, finishes a compaction's move of segment `n` from generation `from` to `to` that a
   * stop cut short: every index entry that still points at `from` points at the same record in
   * `to` afterwards (the new generation holds a copy of each record the move was to take over).
   */
  private rollForward(n: number, from: number, to: number): void {
    const name = segmentName(n, to);
    const fd = fs.openSync(path.join(this.opts.dir, name), 'r');
    try {
      const size = fs.fstatSync(fd).size;
      const head = Buffer.allocUnsafe(HEADER);
      let batch: [string, Buffer][] = [];
      let moved = 0;
      const apply = () => {
        const todo = batch;
        batch = [];
        this.opts.root.transactionSync(() => todo.forEach(([k, v]) => this.index.putSync(k, v)));
      };
      for (let at = 0; at < size; ) {
        const body = readRecordSync(fd, at, size, head);
        if (typeof body === 'string') throw new Error(`event log ${name}: ${body} at byte ${at} of ${size} in a compacted segment; the log is damaged`);
        const kb = body.readUInt16LE(1);
        if (body[0] === OP_PUT) {
          const k = body.toString('utf8', 3, 3 + kb);
          const raw = this.index.get(k);
          const pos = raw === undefined ? undefined : decodePos(raw, () => from);
          if (pos !== undefined && pos.seg === n && pos.gen === from) {
            batch.push([k, encodePos({ seg: n, gen: to, off: at + HEADER + 3 + kb, len: body.length - 3 - kb })]);
            moved++;
            if (batch.length >= 10_000) apply();
          }
        }
        at += HEADER + body.length;
      }
      apply();
      this.opts.warn?.(`event log: finished moving segment ${n}'s index to ${name} (${moved} entries), which a stop had cut short`);
    } finally {
      fs.closeSync(fd);
    }
  }

  /** Applies segment `n` from `from` to the index; returns where its last whole record ends. */
  private replay(n: number, from: number, last: boolean): number {
    const fd = this.fdOf(n);
    const fileSize = fs.fstatSync(fd).size;
    let at = from;
    let batch: (() => void)[] = [];
    const apply = () => {
      if (batch.length === 0) return;
      const todo = batch;
      batch = [];
      this.opts.root.transactionSync(() => todo.forEach((f) => f()));
    };
    const head = Buffer.allocUnsafe(HEADER);
    const name = segmentName(n, this.genOf(n));
    while (at < fileSize) {
      const torn = (why: string) => {
        if (!last) throw new Error(`event log ${name}: ${why} at byte ${at} of ${fileSize}, not at the end of the log; the log is damaged`);
        this.opts.warn?.(`event log ${name}: ${why} at byte ${at}; cutting off the last ${fileSize - at} bytes (a write cut off by a crash, never acknowledged)`);
        fs.ftruncateSync(fd, at);
        fs.fsyncSync(fd);
      };
      const body = readRecordSync(fd, at, fileSize, head);
      if (typeof body === 'string') {
        torn(body);
        break;
      }
      const len = body.length;
      const kb = body.readUInt16LE(1);
      const k = body.toString('utf8', 3, 3 + kb);
      if (body[0] === OP_PUT) {
        const value = encodePos({ seg: n, gen: this.genOf(n), off: at + HEADER + 3 + kb, len: len - 3 - kb });
        batch.push(() => this.index.putSync(k, value));
      } else if (body[0] === OP_DELETE) {
        batch.push(() => RANKS_DOWN.forEach((r) => this.index.removeSync(k + r)));
      } else {
        torn(`an unknown operation ${body[0]}`);
        break;
      }
      at += HEADER + len;
      if (batch.length >= 10_000) apply();
    }
    apply();
    return at;
  }

  /** Moves the documents of the LMDB event store of earlier versions into the log, once. */
  private migrateLegacy(): void {
    const legacy = this.opts.root.openDB<string, string>({ name: 'telemetry', encoding: 'string' });
    if (legacy.getCount() === 0) return;
    let moved = 0;
    let chunk: DocumentWrite[] = [];
    const flush = () => {
      if (chunk.length === 0) return;
      const { buf, ops } = encodeRecords(chunk);
      chunk = [];
      [this.seg, this.size] = this.roomFor(buf.length, this.seg, this.size);
      const fd = this.fdOf(this.seg);
      fs.writeSync(fd, buf, 0, buf.length, this.size);
      const base = this.size;
      this.size += buf.length;
      this.opts.root.transactionSync(() => {
        for (const op of ops) if ('k' in op) this.index.putSync(op.k, encodePos({ seg: this.seg, gen: this.genOf(this.seg), off: base + op.at, len: op.len }));
        this.meta.putSync(CHECKPOINT, `${this.seg}:${this.size}`);
      });
    };
    for (const { key, value } of legacy.getRange({})) {
      // key `tenant|kind|key|rank`; the tenant never holds '|', the kind and the rank neither.
      const k = key as string;
      const parts = k.split(SEP);
      const rank = Number(parts.pop());
      const [tenant, kind, ...rest] = parts;
      chunk.push({ op: 'put', tenant: tenant!, doc: { kind: kind as KindSegment, key: rest.join(SEP), lifecycleRank: rank, json: value } });
      moved++;
      if (chunk.length >= 10_000) flush();
    }
    flush();
    // Every document is in the log and indexed, durably: the old database goes.
    legacy.clearSync();
    this.opts.warn?.(`moved ${moved} events from the LMDB event store of an earlier version into the event log`);
  }

  async ready(): Promise<boolean> {
    return !this.closed;
  }

  /** Waits for queued writes, then for the index to commit, and closes the segment files. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.compactTimer);
    await this.compacting?.catch(() => {});
    while (this.running) await this.running;
    this.applyIndex();
    await this.indexing;
    await this.opts.root.flushed;
    for (const fd of this.fds.values()) fs.closeSync(fd);
    for (const fd of this.retired) fs.closeSync(fd);
    this.fds.clear();
    this.retired.clear();
  }
}
