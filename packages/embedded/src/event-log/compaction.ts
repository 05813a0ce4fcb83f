/**
 * Compaction of the event log: a replaced or deleted event's record stays in its segment until
 * that segment is sealed (a newer one is being written) and at least half of its bytes are such
 * records (`minDeadRatio`). The segment is then rewritten without them, as a new generation of the
 * same segment (`NNNNNNNNNN.G.log`) that keeps its place in the log's order.
 *
 * Invariants:
 * - Index entries name the generation their record is in, so the index moves to the new
 *   generation a chunk at a time while reads go on from both files; the old file is removed only
 *   once the new generation is named as the segment's (and no read uses its descriptor).
 * - An entry is moved only if it still points at the record copied: a write or a deletion since
 *   the copy wins over it.
 * - A deletion is kept while an older segment may hold a version it deletes, so that a rebuild of
 *   the index from the log does not bring that version back.
 * - A start after a crash keeps the old generation when the move had not begun, finishes a move
 *   that a `moving` mark says was under way, and removes the other files (recovery.ts).
 * - A step LMDB did not commit is tried again (with backoff) until it commits or the store closes;
 *   a compaction that failed otherwise is tried again at the next look. Either way the failure is
 *   logged, and compaction's part is down (core/health.ts) unless the cause is a lack of room.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import type { Database } from 'lmdb';
import { AdapterError, PartState, ThrottledLog, backoffDelay, fileRefusal, reasonOf } from '@otm/core';
import { commitCause, holdTurn } from '../disk.js';
import { decodePos, encodePos, type IndexWriter, type Pos } from './index-writer.js';
import { eventLogBytes, eventLogCompactions, eventLogReclaimedBytes } from './metrics.js';
import { HEADER, docStart, isPut } from './record.js';
import { GONE, MAX_GEN, genKey, movingKey, segmentName, type SegmentFiles } from './segments.js';

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

/** Compaction reads and writes a segment in pieces of this size. */
const COMPACTION_CHUNK = 1024 * 1024;
/**
 * Index entries a compaction moves to the new generation in one event-loop turn: few enough that
 * a chunk holds the loop up only briefly, where all of a full segment's entries in one turn held
 * it up long enough to delay answers.
 */
const MOVE_CHUNK = 2_000;

/** A short read of a sealed segment: the file is shorter than it was a moment ago. */
async function readFully(fh: fs.promises.FileHandle, buf: Buffer, position: number): Promise<void> {
  const { bytesRead } = await fh.read(buf, 0, buf.length, position);
  if (bytesRead !== buf.length)
    throw new AdapterError('event-log', `event log: short read (${bytesRead} of ${buf.length} bytes)`, { retryable: false });
}

/** A short write of the new generation: a full disk, most often; a later compaction may succeed. */
async function writeFully(fh: fs.promises.FileHandle, buf: Buffer, position: number): Promise<void> {
  const { bytesWritten } = await fh.write(buf, 0, buf.length, position);
  if (bytesWritten !== buf.length)
    throw new AdapterError('event-log', `event log: short write (${bytesWritten} of ${buf.length} bytes)`, { retryable: true });
}

export interface CompactionContext {
  readonly index: Database<Buffer, string>;
  readonly meta: Database<string, string>;
  readonly segments: SegmentFiles;
  readonly writer: IndexWriter;
  readonly options: CompactionOptions | undefined;
  readonly warn: ((message: string) => void) | undefined;
  /** Whether the store was closed (compaction then stops where it is). */
  readonly closed: () => boolean;
}

export class Compactor {
  private compacting: Promise<CompactionResult> | undefined;
  private readonly timer: NodeJS.Timeout | undefined;
  /** A segment sealed or an event deleted since compaction last looked. */
  private changedSinceLook = true;
  /** Whether compaction works: down from a failure (other than a lack of room) until a look succeeds. */
  readonly part = new PartState('event log compaction', 'loop');
  private readonly failureLog = new ThrottledLog(60_000);
  /** Ends the wait of a step's retry (`step`) when the store closes. */
  private wake: (() => void) | undefined;

  constructor(private readonly ctx: CompactionContext) {
    const every = ctx.options?.intervalMs ?? 10 * 60_000;
    if (every > 0) {
      this.timer = setInterval(() => {
        if (!this.changedSinceLook || this.compacting) return;
        this.changedSinceLook = false;
        this.compact().then(
          () => this.part.up(),
          async (e: unknown) => {
            // Looked at again at the next interval, whatever changed since; never a silent stop.
            this.changedSinceLook = true;
            const cause = await commitCause(e);
            const room = fileRefusal(cause) !== undefined;
            // A lack of room is a store refusing writes (readiness), not a loop that a restart cures.
            if (!room) this.part.down(`compaction failed (${reasonOf(cause)}); tried again every ${Math.round(every / 1000)} s`);
            ctx.warn?.(
              `event log compaction failed (${reasonOf(cause)}); tried again in ${Math.round(every / 1000)} s${room ? ': the disk has no room for the compacted segment' : ''}`,
            );
          },
        );
      }, every);
      this.timer.unref();
    }
  }

  /**
   * Runs one LMDB step of a compaction until it commits: a failure (a full disk, an I/O error) is
   * logged (at most once a minute), the part is down for any other cause than a lack of room, and
   * the step is tried again after a backoff. False when the store closed meanwhile.
   */
  private async step(what: string, run: () => Promise<unknown>): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        const running = run();
        holdTurn(this.ctx.meta); // a failed commit leaves no rejection unhandled (disk.ts)
        await running;
        if (attempt > 1) {
          this.part.up();
          this.ctx.warn?.(`event log compaction: LMDB committed ${what} after ${attempt - 1} failed attempts`);
        }
        return true;
      } catch (e) {
        const cause = await commitCause(e);
        if (this.ctx.closed()) return false;
        const delay = backoffDelay(attempt, { initialMs: 500, maxMs: 30_000 });
        if (fileRefusal(cause) === undefined) this.part.down(`LMDB did not commit ${what} (${reasonOf(cause)}); tried again with backoff`);
        const { log, skipped } = this.failureLog.take(what);
        if (log) {
          this.ctx.warn?.(
            `event log compaction: LMDB did not commit ${what} (${reasonOf(cause)}); tried again in ${delay} ms${skipped > 0 ? ` (${skipped} more failures)` : ''}`,
          );
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, delay);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.wake = undefined;
        if (this.ctx.closed()) return false;
      }
    }
  }

  /** A segment was sealed or an event deleted: the next look may find something to compact. */
  changed(): void {
    this.changedSinceLook = true;
  }

  /** Stops looking, and waits for a compaction under way to stop. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.wake?.();
    await this.compacting?.catch(() => {});
  }

  /**
   * Rewrites the sealed segments in which at least `minDeadRatio` (default 0.5, or the store's
   * option) of the bytes are replaced or deleted events, without those records. How much of each
   * segment is live comes from one pass over the index (in steps, between which other work goes
   * on); each chosen segment is then compacted on its own (`compactSegment`). One compaction runs
   * at a time: a call while one runs gets its result.
   */
  compact(minDeadRatio = this.ctx.options?.minDeadRatio ?? 0.5): Promise<CompactionResult> {
    this.compacting ??= this.compactAll(minDeadRatio).finally(() => {
      this.compacting = undefined;
    });
    return this.compacting;
  }

  private async compactAll(minDeadRatio: number): Promise<CompactionResult> {
    const { segments, writer } = this.ctx;
    const result: CompactionResult = { compacted: [], removed: [], reclaimedBytes: 0 };
    // The index changes waiting for their batch go now: a segment is compacted only once the
    // index and its checkpoint have moved past it.
    await writer.flush();
    // Index commits failing: compaction waits until they succeed (looked at again next time).
    if (writer.retrying) {
      this.changedSinceLook = true;
      return result;
    }
    const live = await this.liveBytes();
    for (const n of segments.segs.filter((x) => x < segments.seg)) {
      if (this.ctx.closed()) break;
      const size = fs.fstatSync(segments.fdOf(n)).size;
      if (size === 0 || 1 - (live.get(n) ?? 0) / size < minDeadRatio) continue;
      const done = await this.compactSegment(n, minDeadRatio);
      if (done === undefined) continue;
      (done.removed ? result.removed : result.compacted).push(n);
      (result as { reclaimedBytes: number }).reclaimedBytes += done.reclaimed;
    }
    return result;
  }

  /**
   * Bytes of live records in each segment, by the index (and the changes not committed to it yet);
   * short by 8 bytes for a put that carries its acceptance time (record.ts), which the index does not tell.
   */
  private async liveBytes(): Promise<Map<number, number>> {
    const { index, writer } = this.ctx;
    const live = new Map<number, number>();
    const add = (k: string, pos: Pos) => {
      if (pos.len >= 0) live.set(pos.seg, (live.get(pos.seg) ?? 0) + HEADER + 3 + Buffer.byteLength(k) + pos.len);
    };
    let start: string | undefined;
    for (;;) {
      let last: string | undefined;
      for (const { key, value } of index.getRange({ start, limit: 2_000 })) {
        if (key === start) continue; // `start` is where the previous step ended
        last = key;
        if (!writer.recent.has(key)) add(key, decodePos(value));
      }
      if (last === undefined || this.ctx.closed()) break;
      start = last;
      await new Promise((r) => setImmediate(r));
    }
    for (const [k, pos] of writer.recent) add(k, pos);
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
    const { index, meta, segments, writer, options } = this.ctx;
    // Not while index changes that point into the segment, or the checkpoint, are uncommitted.
    if (Number(writer.committed.split(':')[0]) <= n) return undefined;
    for (const p of writer.recent.values()) if (p.seg === n) return undefined;
    const oldGen = segments.genOf(n);
    if (oldGen >= MAX_GEN) return undefined;
    const oldFile = path.join(segments.dir, segmentName(n, oldGen));
    let newFile: string | undefined;
    let src: fs.promises.FileHandle | undefined;
    try {
      src = await fs.promises.open(oldFile, 'r');
      const size = (await src.stat()).size;
      // Which records stay: live puts, and deletions while an older segment exists.
      const older = segments.segs[0]! < n;
      const kept: SegmentRecord[] = [];
      let bytes = 0;
      await this.eachRecord(src, n, size, (r) => {
        if (r.put ? this.isAt(r.k, n, oldGen, r.off) : older) {
          r.to = bytes;
          kept.push(r);
          bytes += r.end - r.start;
        }
      });
      if (this.ctx.closed() || (size - bytes) / size < minDeadRatio) return undefined;

      const newGen = oldGen + 1;
      if (kept.length > 0) {
        newFile = path.join(segments.dir, segmentName(n, newGen));
        await this.copyRecords(src, size, kept, newFile);
        await segments.syncDirAsync();
      }
      await options?.onStep?.('written', n);
      // Closed while it ran (a shutdown): the same compaction can run again after the next start.
      if (this.ctx.closed()) throw new AdapterError('event-log', 'event store closed', { retryable: true });
      if (kept.length > 0) {
        // Each LMDB step is tried until it commits (`step`), or the store closes.
        if (!(await this.step(`the start of segment ${n}'s move`, () => meta.put(movingKey(n), String(newGen))))) return undefined; // nothing points at the new file: removed below
        newFile = undefined; // part of the log from here on: a start finishes the move
        const chunk = Math.max(1, options?.moveChunk ?? MOVE_CHUNK);
        const puts = kept.filter((r) => r.put);
        for (let i = 0; i < puts.length; i += chunk) {
          // One turn: these entries go to LMDB together. Until they are committed, reads find the
          // old positions, in the old file, which stays until the move is over. Tried again, an
          // entry already moved is not at the old place any more and is left alone.
          const moveChunk = (): Promise<unknown> => {
            let committed: Promise<boolean> | undefined;
            for (let j = i; j < Math.min(puts.length, i + chunk); j++) {
              const r = puts[j]!;
              if (!this.isAt(r.k, n, oldGen, r.off)) continue;
              committed = index.put(r.k, encodePos({ seg: n, gen: newGen, off: r.to + (r.off - r.start), len: r.len }));
            }
            return committed ?? Promise.resolve(true);
          };
          // Reads go on from the old positions meanwhile; a stop: the next start finishes the move.
          if (!(await this.step(`a step of segment ${n}'s move`, moveChunk))) return undefined;
          await options?.onStep?.('moved', n);
          if (this.ctx.closed()) return undefined; // the next start finishes the move
        }
        // No position names the old generation now: the new one becomes the segment's.
        segments.gens.set(n, newGen);
        const flipped = await this.step(`the end of segment ${n}'s move`, () =>
          Promise.all([meta.put(genKey(n), String(newGen)), meta.remove(movingKey(n))]),
        );
        if (!flipped) return undefined; // the next start finishes the move
      } else {
        // Nothing in it is live: the segment goes.
        segments.gens.delete(n);
        segments.segs = segments.segs.filter((x) => x !== n);
        // A stop before it commits: the next start keeps the segment (nothing in it is live).
        if (!(await this.step(`segment ${n}'s removal`, () => meta.put(genKey(n), GONE)))) return undefined;
      }
      segments.retire(n, oldGen);
      await options?.onStep?.('committed', n);

      await src.close();
      src = undefined;
      // In the thread pool: removing a large file takes long enough to hold up the event loop.
      await fs.promises.unlink(oldFile);
      await segments.syncDirAsync();
      // Left behind should this fail: a start removes the marks of segments that are gone.
      if (kept.length === 0) {
        const removed = meta.remove(genKey(n));
        holdTurn(meta);
        await removed.catch(() => {});
      }
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
    const pos = this.ctx.writer.lookup(k);
    return pos !== undefined && pos.len >= 0 && pos.seg === n && pos.gen === gen && pos.off === off;
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
        const op = buf[i + HEADER];
        fn({
          start,
          end: start + HEADER + len,
          put: isPut(op),
          k: buf.toString('utf8', i + HEADER + 3, i + HEADER + 3 + kb),
          off: start + HEADER + docStart(op, kb),
          len: len - docStart(op, kb),
          to: 0,
        });
        i += HEADER + len;
      }
      // A record that is not whole in a sealed segment: damage, which a retry does not mend.
      if (i === 0) {
        throw new AdapterError(
          'event-log',
          `event log ${segmentName(n, this.ctx.segments.gens.get(n))}: a damaged record at byte ${at}; not compacted`,
          { retryable: false },
        );
      }
      at += i;
      await new Promise((r) => setImmediate(r));
      if (this.ctx.closed()) return;
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
}
