/**
 * The segment files of the event log: naming, opening, appending, reading, starting a new one.
 *
 * The log is a sequence of segment files `NNNNNNNNNN.log` in the log's folder; a new one is
 * started when the records of a write would grow the current one past `segmentBytes` (the records
 * of one `write` call never straddle two segments). Compaction rewrites a sealed segment as a new
 * generation of it, `NNNNNNNNNN.G.log` (G >= 1), which keeps the segment's place in the log's
 * order; the LMDB meta database names each segment's current generation (`genKey`), a segment
 * compaction removed whole (`GONE`), and a move of its index entries under way (`movingKey`).
 *
 * Invariants:
 * - Segment files are opened with O_DSYNC: a write returns once its data is on the disk, so an
 *   append that resolved is durable. A new segment's name is made durable in the folder (its
 *   fsync) before anything is written to it.
 * - An append that fails leaves nothing of itself in the log: what it may have written is cut off
 *   again (in every segment it wrote to; a cut that fails is made before the next append, which is
 *   refused until it can be), and the next append starts where it did.
 * - At most `maxOpen` descriptors stay open; the least recently used are closed, never the one of
 *   the segment being written nor one with a read or write in flight (nor, once compaction replaced
 *   its file, before those end).
 */
import fs from 'node:fs';
import path from 'node:path';
import { AdapterError } from '@otm/core';
import type { Pos } from './index-writer.js';
import { eventLogBytes, eventLogWrites } from './metrics.js';

/** A new segment file is started when the current one would grow past this. */
export const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;
/** `NNNNNNNNNN.log`, or `NNNNNNNNNN.G.log` for generation G (G >= 1) of a compacted segment. */
export const SEGMENT_NAME = /^(\d{10})(?:\.(\d+))?\.log$/;
export const segmentName = (n: number, gen = 0) => `${String(n).padStart(10, '0')}${gen > 0 ? `.${gen}` : ''}.log`;
/** Meta key of a segment's current generation (absent: 0); GONE: compaction found nothing in it to keep. */
export const genKey = (n: number) => `gen:${String(n).padStart(10, '0')}`;
export const GONE = 'gone';
/** Meta key of a compaction moving segment `n`'s index entries to a new generation (its value). */
export const movingKey = (n: number) => `moving:${String(n).padStart(10, '0')}`;
/** The key of a segment generation's descriptor in `fds`; a segment never reaches 1024 generations (see `compactSegment`). */
export const MAX_GEN = 1023;
const fileKey = (n: number, gen: number) => n * (MAX_GEN + 1) + gen;

const writev = (fd: number, bufs: Buffer[], position: number) =>
  new Promise<number>((resolve, reject) => fs.writev(fd, bufs, position, (e, n) => (e ? reject(e) : resolve(n))));
/** Segment files are opened with O_DSYNC: a write returns once its data is on the disk. */
const SEGMENT_FLAGS = fs.constants.O_RDWR | fs.constants.O_DSYNC;
/**
 * Documents up to this size are read with a synchronous `pread`: from the page cache that costs a
 * small fraction of the CPU the same read costs through libuv's thread pool when reads come one at
 * a time, as GETs do (`node bench/diag/event-log/event-read.mjs` measures both). Like LMDB's own reads (its
 * pages are mapped and read in place), a read of a page not in memory then waits on the disk on
 * the event loop: keep the data folder on local SSD. Larger documents are read through the thread
 * pool.
 */
const SYNC_READ_MAX = 64 * 1024;

/**
 * `readMany`: most bytes one `pread` takes (a run of documents read at once), and most bytes
 * between two documents of one run (their records' headers and keys, or records not asked for,
 * read and dropped). A page of the change feed's location events (~400 bytes each, written one
 * after the other) is then one read instead of one a document; a run is bounded so that one
 * read never holds up the event loop long, nor keeps much that is not asked for alive in the
 * slices answered.
 */
export const RUN_MAX_BYTES = 1024 * 1024;
export const RUN_GAP_BYTES = 4096;

/** The order of the log: segment, generation (the files of one segment during a move), offset. */
const logOrder = (a: Pos, b: Pos): number => a.seg - b.seg || a.gen - b.gen || a.off - b.off;

/** A read that found fewer bytes than the index names: the file does not hold them, and never will. */
const shortRead = (n: number, len: number) =>
  new AdapterError('event-log', `event log: short read (${n} of ${len} bytes)`, { retryable: false });

function preadSync(fd: number, len: number, position: number): Buffer {
  const b = Buffer.allocUnsafe(len);
  const n = fs.readSync(fd, b, 0, len, position);
  if (n !== len) throw shortRead(n, len);
  return b;
}

const pread = (fd: number, len: number, position: number) =>
  new Promise<Buffer>((resolve, reject) => {
    const b = Buffer.allocUnsafe(len);
    fs.read(fd, b, 0, len, position, (e, n) => (e ? reject(e) : n !== len ? reject(shortRead(n, len)) : resolve(b)));
  });

export interface SegmentFilesOptions {
  /** Where the segment files are. */
  readonly dir: string;
  readonly segmentBytes: number;
  /** Most segment files kept open at once (at least 2). */
  readonly maxOpen: number;
  /** Told when a segment is sealed (a new one started after it). */
  readonly onSeal: () => void;
}

export class SegmentFiles {
  readonly dir: string;
  private readonly segmentBytes: number;
  private readonly maxOpen: number;
  private readonly onSeal: () => void;
  private readonly fds = new Map<number, number>();
  /** The segment being written, and its size: where the next append goes. */
  seg = 0;
  size = 0;
  /** The current generation of each segment, and the segment numbers in log order. */
  readonly gens = new Map<number, number>();
  segs: number[] = [];
  /**
   * Reads and writes in flight on each file descriptor: such a descriptor is not closed (neither
   * to keep at most `maxOpen` open nor when compaction replaced its file) until they end.
   */
  private readonly inUse = new Map<number, number>();
  private readonly retired = new Set<number>();
  /** Where `readMany` reads a run before copying its documents out (grown up to RUN_MAX_BYTES, kept). */
  private scratch = Buffer.alloc(0);

  constructor(opts: SegmentFilesOptions) {
    this.dir = opts.dir;
    this.segmentBytes = opts.segmentBytes;
    this.maxOpen = opts.maxOpen;
    this.onSeal = opts.onSeal;
  }

  /** The generation of segment `seg` that its mark names (0 for one never compacted). */
  readonly genOf = (seg: number): number => this.gens.get(seg) ?? 0;

  /**
   * Appends each buffer to the log, in order (durable when this resolves); returns where each went.
   * The buffers of a group go into one segment; a new segment starts when one would overflow it.
   */
  async append(bufs: readonly Buffer[]): Promise<{ seg: number; off: number }[]> {
    // What a failed group wrote and could not cut off again: cut off before anything else is written.
    this.cutLeftOvers();
    const placed: { seg: number; off: number }[] = [];
    const bySeg = new Map<number, { start: number; bufs: Buffer[] }>();
    let seg = this.seg;
    let size = this.size;
    let bytes = 0;
    for (const buf of bufs) {
      [seg, size] = this.roomFor(buf.length, seg, size);
      placed.push({ seg, off: size });
      const s = bySeg.get(seg) ?? { start: size, bufs: [] };
      s.bufs.push(buf);
      bySeg.set(seg, s);
      size += buf.length;
      bytes += buf.length;
    }
    /** Where each segment this group wrote to started, to cut what it wrote off again should it fail. */
    const started: Array<[seg: number, start: number]> = [];
    for (const [n, s] of bySeg) {
      const fd = this.fdOf(n);
      this.acquire(fd);
      started.push([n, s.start]);
      try {
        for (let i = 0, at = s.start; i < s.bufs.length; i += 256) {
          const part = s.bufs.slice(i, i + 256);
          const want = part.reduce((a, b) => a + b.length, 0);
          const wrote = await writev(fd, part, at);
          // A full disk, most often: the same write may succeed once there is space.
          if (wrote !== want) throw Object.assign(new Error(`short write (${wrote} of ${want} bytes)`), { code: 'ESHORTWRITE' });
          at += want;
        }
      } catch (e) {
        // Nothing of this group is acknowledged; cut what it may have written off the log, in every
        // segment it wrote to, so that the next group starts where this one did. A cut that fails
        // is made again before the next write (`cutLeftOvers`): no record of a refused write is
        // ever followed by an acknowledged one, nor found whole by the next start.
        for (const [f, start] of started) this.cutOff(f, start);
        const [first] = bySeg.keys();
        this.seg = first!;
        this.size = bySeg.get(first!)!.start;
        // The log is as before the write (a full disk, an I/O error): the same write may succeed later.
        throw new AdapterError('event-log', `event log: the write failed (${(e as Error)?.message ?? e}); nothing of it was kept`, {
          retryable: true,
          cause: e,
        });
      } finally {
        this.release(fd);
      }
    }
    this.seg = seg;
    this.size = size;
    eventLogWrites.inc(bySeg.size);
    eventLogBytes.inc(bytes);
    return placed;
  }

  /** Tails of segments that a failed group wrote and that could not be cut off yet (segment -> length). */
  private readonly leftOvers = new Map<number, number>();

  /** Cuts the tail a failed group wrote off segment `n`, or keeps it to be cut before the next write. */
  private cutOff(n: number, at: number): void {
    try {
      fs.ftruncateSync(this.fdOf(n), at);
      this.leftOvers.delete(n);
    } catch {
      this.leftOvers.set(n, at);
    }
  }

  /** Cuts the tails failed groups left; throws (nothing written) while one cannot be cut. */
  private cutLeftOvers(): void {
    for (const [n, at] of this.leftOvers) {
      fs.ftruncateSync(this.fdOf(n), at);
      this.leftOvers.delete(n);
    }
  }

  /** Where `bytes` more go: the end of segment `seg`, or a new segment if they would overflow it. */
  roomFor(bytes: number, seg: number, size: number): [seg: number, size: number] {
    return size > 0 && size + bytes > this.segmentBytes ? [this.create(seg + 1), 0] : [seg, size];
  }

  /**
   * The bytes at `pos`. Small documents are read at once (a synchronous `pread`, see SYNC_READ_MAX),
   * larger ones through the thread pool, their descriptor kept open until the read ends.
   */
  read(pos: Pos): Buffer | Promise<Buffer> {
    const fd = this.fdOf(pos.seg, pos.gen);
    if (pos.len <= SYNC_READ_MAX) return preadSync(fd, pos.len, pos.off);
    this.acquire(fd);
    return pread(fd, pos.len, pos.off).finally(() => this.release(fd));
  }

  /**
   * The bytes at each of `positions`, in their order (as `read` answers each), read together: in
   * the order of the log, the documents of a segment file near each other (at most `maxGap` bytes
   * apart, a run of at most `maxRun` bytes) with one synchronous `pread` of the run, each answered
   * as a slice of it (positions named twice share their bytes). A document larger than
   * SYNC_READ_MAX (or than `maxRun`) is read alone, as `read` reads it, through the thread pool.
   * As with `read`, the positions must have been looked up in the same turn (see store.ts): every
   * run's descriptor is taken, and its bytes read, before this returns.
   */
  readMany(positions: readonly Pos[], maxRun = RUN_MAX_BYTES, maxGap = RUN_GAP_BYTES): Array<Buffer | Promise<Buffer>> {
    const out = new Array<Buffer | Promise<Buffer>>(positions.length);
    /** The positions read in runs, by their index; most often already in the log's order (a feed page's). */
    const order: number[] = [];
    let sorted = true;
    for (let i = 0; i < positions.length; i++) {
      const p = positions[i]!;
      if (p.len > SYNC_READ_MAX || p.len > maxRun) {
        out[i] = this.read(p);
        continue;
      }
      if (sorted && order.length > 0 && logOrder(positions[order[order.length - 1]!]!, p) > 0) sorted = false;
      order.push(i);
    }
    if (!sorted) order.sort((a, b) => logOrder(positions[a]!, positions[b]!));
    for (let a = 0; a < order.length;) {
      const first = positions[order[a]!]!;
      const start = first.off;
      let end = start + first.len;
      let b = a + 1;
      for (; b < order.length; b++) {
        const p = positions[order[b]!]!;
        if (p.seg !== first.seg || p.gen !== first.gen || p.off - end > maxGap || p.off + p.len - start > maxRun) break;
        if (p.off + p.len > end) end = p.off + p.len;
      }
      const fd = this.fdOf(first.seg, first.gen);
      if (b === a + 1) out[order[a]!] = preadSync(fd, end - start, start);
      else {
        // Read into the scratch buffer, then the documents copied out together into one buffer of
        // their own bytes (a position named twice once), each answered as a slice of it: what the
        // answers keep alive is what was asked for, not the headers, keys and records between.
        if (this.scratch.length < end - start)
          this.scratch = Buffer.allocUnsafeSlow(Math.max(end - start, Math.min(2 * this.scratch.length, maxRun)));
        const run = this.scratch;
        const n = fs.readSync(fd, run, 0, end - start, start);
        if (n !== end - start) throw shortRead(n, end - start);
        let bytes = 0;
        for (let k = a; k < b; k++) {
          const p = positions[order[k]!]!;
          if (k === a || p.off !== positions[order[k - 1]!]!.off) bytes += p.len;
        }
        const docs = Buffer.allocUnsafe(bytes);
        let at = 0;
        for (let k = a; k < b; k++) {
          const p = positions[order[k]!]!;
          if (k > a && p.off === positions[order[k - 1]!]!.off) {
            out[order[k]!] = out[order[k - 1]!]!;
            continue;
          }
          run.copy(docs, at, p.off - start, p.off - start + p.len);
          out[order[k]!] = docs.subarray(at, at + p.len);
          at += p.len;
        }
      }
      a = b;
    }
    return out;
  }

  /**
   * The open descriptor of segment `n`. At most `maxOpen` stay open (a store of many segments
   * read across would otherwise run out of descriptors): the least recently used are closed,
   * never the segment being written nor one with a read or write in flight.
   */
  fdOf(n: number, gen: number = this.genOf(n)): number {
    const key = fileKey(n, gen);
    let fd = this.fds.get(key);
    if (fd !== undefined) {
      // Most recently used last.
      this.fds.delete(key);
      this.fds.set(key, fd);
      return fd;
    }
    fd = fs.openSync(path.join(this.dir, segmentName(n, gen)), SEGMENT_FLAGS);
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

  /** Forgets the descriptor of generation `gen` of segment `n` (replaced), closing it once no read uses it. */
  retire(n: number, gen: number): void {
    const fd = this.fds.get(fileKey(n, gen));
    this.fds.delete(fileKey(n, gen));
    if (fd === undefined) return;
    if (this.inUse.has(fd)) this.retired.add(fd);
    else fs.closeSync(fd);
  }

  syncDir(): void {
    const dirFd = fs.openSync(this.dir, 'r');
    try {
      fs.fsyncSync(dirFd);
    } finally {
      fs.closeSync(dirFd);
    }
  }

  async syncDirAsync(): Promise<void> {
    const dir = await fs.promises.open(this.dir, 'r');
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
  create(n: number): number {
    const old = this.fds.get(fileKey(n, 0));
    if (old !== undefined) fs.closeSync(old);
    const fd = fs.openSync(path.join(this.dir, segmentName(n)), SEGMENT_FLAGS | fs.constants.O_CREAT | fs.constants.O_TRUNC);
    this.fds.set(fileKey(n, 0), fd);
    this.syncDir();
    this.gens.set(n, 0);
    if (!this.segs.includes(n)) this.segs.push(n);
    // The segment before it is sealed now: compaction may look at it.
    this.onSeal();
    return n;
  }

  /** Closes every descriptor (the store is closed, or did not open). */
  closeAll(): void {
    for (const fd of this.fds.values()) fs.closeSync(fd);
    for (const fd of this.retired) fs.closeSync(fd);
    this.fds.clear();
    this.retired.clear();
  }
}
