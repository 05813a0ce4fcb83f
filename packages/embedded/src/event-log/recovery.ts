/**
 * What the event log does at start, before it answers anything: it brings the index and the
 * segment files back to one consistent log.
 *
 * - Generations: of each segment, the generation the index names is kept and the others are
 *   removed (left by a compaction that a stop cut short: before its LMDB commit the new one, after
 *   it the old one). A move of index entries to a new generation that a `moving` mark says was
 *   under way is finished first (`rollForward`).
 * - Replay: the log is replayed into the index from the index's checkpoint, so an index behind the
 *   log after a crash (its last changes not committed yet) catches up; with it, what the index
 *   commit records besides (effects.ts: lists and tracks, feed entries, positions), each record's
 *   document parsed once. A batch of the replay moves the checkpoint in its own transaction, so
 *   that a stop during the replay does not make the next start record the same changes twice.
 * - Torn tail: a record at the tail of the last segment that is not whole (a write cut off by a
 *   crash: never answered, because its write never returned) is cut off, with a warning.
 * - Layout: an index and lists written in another layout of their keys (index-keys.ts; before it,
 *   none was recorded) are removed and rebuilt from the whole log (`relayout`), with a warning.
 *   The records the old index covered have their feed entries and latest positions stored already:
 *   their replay records the lists only (`rebuild-until`, kept until the replay is over, so that a
 *   stop during the rebuild resumes it alike).
 *
 * Invariant: damage anywhere else (a record that is not whole before the end of the log, a
 * generation the index names that is missing) is never repaired by guessing: the start is refused
 * with an AdapterError that is not retryable, since the same start would fail again.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Database, RootDatabase } from 'lmdb';
import { AdapterError, fileRefusal, type RefusalCause } from '@otm/core';
import { RANKS_DOWN } from '../keys.js';
import type { KindSegment } from '@otm/model';
import { putChange, type EventChange, type EventEffects } from './effects.js';
import { CHECKPOINT, IndexEntry, decodePos, encodePos } from './index-writer.js';
import { eventLogBytes } from './metrics.js';
import { HEADER, OP_DELETE, acceptedAtOf, docStart, isPut, readRecordSync } from './record.js';
import { GONE, SEGMENT_NAME, genKey, movingKey, segmentName, type SegmentFiles } from './segments.js';

export interface RecoveryContext {
  /** The LMDB environment, for the synchronous transactions of the start. */
  readonly root: RootDatabase;
  readonly index: Database<Buffer, string>;
  readonly meta: Database<string, string>;
  readonly segments: SegmentFiles;
  readonly warn: ((message: string) => void) | undefined;
  /** What the index commit records besides the index, recorded again for the records replayed. */
  readonly effects: EventEffects;
}

/**
 * The layout of the keys of the index and the lists (index-keys.ts). A data folder's index of
 * another layout is rebuilt from the log at start. 2: UUIDs as 16 bytes and times as 7 (before it:
 * text keys, and no layout recorded).
 */
export const INDEX_LAYOUT = '2';
/** Meta key of the index's layout. */
export const LAYOUT_KEY = 'index-layout';
/** Meta key, during a rebuild: where the index it replaces ended (`seg:offset`); records before it have their feed entries. */
export const REBUILD_KEY = 'rebuild-until';

/** The log is damaged in a way no start can repair: not retryable. */
const damaged = (message: string) => new AdapterError('event-log', message, { retryable: false });

/** What the start did: how far the log goes, and how far the index covers it. */
export interface Recovered {
  /** The end of the log (`seg:offset`). */
  readonly end: string;
  /** How far the index covers the log, durably (`end` unless the disk was full). */
  readonly committed: string;
  /**
   * Changes replayed that LMDB could not commit (a full disk): the writer holds them, readable from
   * memory, and commits them once it can; empty on any other start.
   */
  readonly pending: IndexEntry[];
  /** Why they could not be committed. */
  readonly refusal?: RefusalCause;
}

/**
 * At start: replays the log from the index's checkpoint (an index behind the log catches up) and
 * cuts a torn record off the tail of the last segment. Returns the end of the log (`seg:offset`),
 * up to which the index now covers it, durably; on a full disk, the changes it could not commit,
 * for the index writer to hold (the start goes on: reads are served).
 */
export function recover(ctx: RecoveryContext): Recovered {
  const { segments, meta } = ctx;
  relayout(ctx);
  const segs = pickGenerations(ctx);
  segments.segs = [...segs];
  const rebuilt = meta.get(REBUILD_KEY);
  const replayed: Replayed = { pending: [] };
  const before = meta.get(CHECKPOINT);
  if (segs.length === 0) {
    segments.seg = segments.create(1);
    segments.size = 0;
    if (rebuilt !== undefined) ctx.root.transactionSync(() => meta.removeSync(REBUILD_KEY));
  } else {
    const [cpSeg, cpOff] = (before ?? `${segs[0]}:0`).split(':').map(Number) as [number, number];
    const until = rebuilt === undefined ? undefined : (rebuilt.split(':').map(Number) as [number, number]);
    for (const n of segs) {
      if (n < cpSeg) continue;
      const last = n === segs[segs.length - 1];
      const end = replay(ctx, n, n === cpSeg ? cpOff : 0, last, replayed, until);
      if (last) {
        segments.seg = n;
        segments.size = end;
      }
    }
    const end = `${segments.seg}:${segments.size}`;
    // Nothing to write when the index covered the whole log already (a start on a full disk
    // after a clean stop writes nothing).
    if (replayed.refusal === undefined && (end !== before || rebuilt !== undefined)) {
      ctx.root.transactionSync(() => {
        meta.putSync(CHECKPOINT, end);
        if (rebuilt !== undefined) meta.removeSync(REBUILD_KEY);
      });
    }
  }
  eventLogBytes.set(
    fs
      .readdirSync(segments.dir)
      .filter((f) => SEGMENT_NAME.test(f))
      .reduce((a, f) => a + fs.statSync(path.join(segments.dir, f)).size, 0),
  );
  const end = `${segments.seg}:${segments.size}`;
  if (replayed.refusal === undefined) return { end, committed: end, pending: [] };
  ctx.warn?.(
    `event log: the disk is full: ${replayed.pending.length} changes replayed from the log are held in memory, readable, until the index can commit them (from ${replayed.committed ?? before ?? 'the start'})`,
  );
  return { end, committed: replayed.committed ?? before ?? `${segs[0] ?? 1}:0`, pending: replayed.pending, refusal: replayed.refusal };
}

/** What the replay could not commit (a full disk), for `recover`'s answer. */
interface Replayed {
  pending: IndexEntry[];
  refusal?: RefusalCause;
  /** The checkpoint of the last batch committed before the refusal. */
  committed?: string;
}

/**
 * An index and lists of another layout than INDEX_LAYOUT (or of none recorded: before layouts were)
 * are removed, in one transaction with the checkpoint, which goes too: the replay that follows
 * rebuilds them from the whole log. How far the old index went is kept (REBUILD_KEY): the feed
 * entries and positions of the records up to there are stored, and are not recorded again.
 */
function relayout(ctx: RecoveryContext): void {
  const { meta } = ctx;
  if (meta.get(LAYOUT_KEY) === INDEX_LAYOUT) return;
  // A rebuild that a stop cut short keeps its mark: the feed entries go as far as it says.
  const covered = meta.get(REBUILD_KEY) ?? meta.get(CHECKPOINT);
  ctx.root.transactionSync(() => {
    ctx.index.clearSync();
    ctx.effects.clear();
    meta.removeSync(CHECKPOINT);
    if (covered !== undefined) meta.putSync(REBUILD_KEY, covered);
    meta.putSync(LAYOUT_KEY, INDEX_LAYOUT);
  });
  if (covered !== undefined) {
    ctx.warn?.(
      `event log: rebuilding the event index and lists from the log, in their new layout (${INDEX_LAYOUT}); the start takes as long as reading the log once`,
    );
  }
}

/**
 * Finds the segment files and the generation of each that the index names; removes the other
 * generations (left by a compaction that a stop cut short: before its LMDB commit the new one,
 * after it the old one). Returns the segment numbers in log order.
 */
function pickGenerations(ctx: RecoveryContext): number[] {
  const { meta, segments } = ctx;
  const files = new Map<number, Map<number, string>>();
  for (const f of fs.readdirSync(segments.dir)) {
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
    fs.unlinkSync(path.join(segments.dir, f));
    ctx.warn?.(`event log: removed ${f}, left by a compaction that a stop cut short`);
    removed = true;
  };
  for (const [n, byGen] of files) {
    const want = meta.get(genKey(n));
    if (want === GONE) {
      byGen.forEach(remove);
      continue;
    }
    // Without a mark (a segment never compacted, or an index lost with its marks) the lowest
    // generation: the older one is whole until the newer is named by the index, and either
    // holds every event that was live in the segment.
    let gen = want === undefined ? Math.min(...byGen.keys()) : Number(want);
    if (!byGen.has(gen)) {
      throw damaged(`event log: segment ${n} is generation ${gen} by the index, but ${segmentName(n, gen)} is missing; the log is damaged`);
    }
    // A move to a new generation that a stop cut short: index entries point at both; finish it.
    const moving = meta.get(movingKey(n));
    if (moving !== undefined) {
      const to = Number(moving);
      if (!byGen.has(to))
        throw damaged(`event log: segment ${n} was being moved to ${segmentName(n, to)}, which is missing; the log is damaged`);
      rollForward(ctx, n, gen, to);
      // Named as the segment's before the old file goes: a stop in between finds a whole log.
      ctx.root.transactionSync(() => {
        meta.putSync(genKey(n), String(to));
        meta.removeSync(movingKey(n));
      });
      gen = to;
    } else if (want === undefined && gen > 0) marks.push([genKey(n), String(gen)]);
    for (const [g, f] of byGen) if (g !== gen) remove(f);
    segments.gens.set(n, gen);
  }
  if (removed) segments.syncDir();
  // Segments that compaction removed whole: their files are gone, their mark can go too; and so
  // can the mark of a move whose segment has no file left.
  const stale = [
    ...[...meta.getRange({ start: 'gen:', end: 'gen;' })].filter((e) => e.value === GONE).map((e) => e.key),
    ...[...meta.getRange({ start: 'moving:', end: 'moving;' })].map((e) => e.key),
  ];
  if (stale.length > 0 || marks.length > 0) {
    ctx.root.transactionSync(() => {
      stale.forEach((k) => meta.removeSync(k));
      marks.forEach(([k, v]) => meta.putSync(k, v));
    });
  }
  return [...segments.gens.keys()].sort((a, b) => a - b);
}

/**
 * At start, finishes a compaction's move of segment `n` from generation `from` to `to` that a
 * stop cut short: every index entry that still points at `from` points at the same record in
 * `to` afterwards (the new generation holds a copy of each record the move was to take over).
 */
function rollForward(ctx: RecoveryContext, n: number, from: number, to: number): void {
  const { index } = ctx;
  const name = segmentName(n, to);
  const fd = fs.openSync(path.join(ctx.segments.dir, name), 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const head = Buffer.allocUnsafe(HEADER);
    let batch: [string, Buffer][] = [];
    let moved = 0;
    const apply = () => {
      const todo = batch;
      batch = [];
      ctx.root.transactionSync(() => todo.forEach(([k, v]) => index.putSync(k, v)));
    };
    for (let at = 0; at < size;) {
      const body = readRecordSync(fd, at, size, head);
      if (typeof body === 'string')
        throw damaged(`event log ${name}: ${body} at byte ${at} of ${size} in a compacted segment; the log is damaged`);
      const kb = body.readUInt16LE(1);
      if (isPut(body[0])) {
        const k = body.toString('utf8', 3, 3 + kb);
        const raw = index.get(k);
        const pos = raw === undefined ? undefined : decodePos(raw);
        if (pos !== undefined && pos.seg === n && pos.gen === from) {
          const doc = docStart(body[0], kb);
          batch.push([k, encodePos({ seg: n, gen: to, off: at + HEADER + doc, len: body.length - doc })]);
          moved++;
          if (batch.length >= 10_000) apply();
        }
      }
      at += HEADER + body.length;
    }
    apply();
    ctx.warn?.(`event log: finished moving segment ${n}'s index to ${name} (${moved} entries), which a stop had cut short`);
  } finally {
    fs.closeSync(fd);
  }
}

/** The tenant, kind and key of a record's key (`tenant|kind|key|` and, for a put, the rank). */
function partsOf(k: string): { tenant: string; kind: KindSegment; key: string } {
  const first = k.indexOf('|');
  const second = k.indexOf('|', first + 1);
  return { tenant: k.slice(0, first), kind: k.slice(first + 1, second) as KindSegment, key: k.slice(second + 1, k.lastIndexOf('|')) };
}

/**
 * Applies segment `n` from `from` to the index, and records the effects of its records again (of
 * those before `until`, a rebuild's, the lists only: see `relayout`); returns where its last whole
 * record ends.
 */
function replay(
  ctx: RecoveryContext,
  n: number,
  from: number,
  last: boolean,
  replayed: Replayed,
  until?: readonly [number, number],
): number {
  const { index, segments, effects } = ctx;
  const fd = segments.fdOf(n);
  const fileSize = fs.fstatSync(fd).size;
  let at = from;
  /** The batch: each change's index entry (a put's position; a deletion's ranks go), and its effects. */
  let batch: IndexEntry[] = [];
  let changes: EventChange[] = [];
  /** Whether the batch's changes record their feed entries and positions (not before `until`). */
  let telemetry = true;
  const apply = () => {
    if (batch.length === 0) return;
    const todo = batch;
    const done = changes;
    const checkpoint = `${n}:${at}`;
    batch = [];
    changes = [];
    // A full disk: the rest of the replay is held in memory (`replayed.pending`) for the index
    // writer, which commits it once it can (its effects with it, the feed's and positions' too).
    if (replayed.refusal === undefined) {
      let stored: ReturnType<EventEffects['apply']> = [];
      try {
        ctx.root.transactionSync(() => {
          for (const e of todo) {
            if (e.len >= 0) index.putSync(e.k, encodePos(e));
            else RANKS_DOWN.forEach((r) => index.removeSync(e.k + r));
          }
          stored = effects.apply(done, Date.now(), telemetry);
          ctx.meta.putSync(CHECKPOINT, checkpoint);
        });
        effects.committed(stored);
        replayed.committed = checkpoint;
        return;
      } catch (e) {
        const refusal = fileRefusal(e);
        if (refusal === undefined) throw e;
        replayed.refusal = refusal;
      }
    }
    // Held for the writer: as entries of the log's writes are (a deletion's entries, one a rank).
    for (const e of todo) {
      if (e.len >= 0) replayed.pending.push(e);
      else {
        RANKS_DOWN.forEach((r, i) => {
          const d = new IndexEntry(e.k + r, 0, -1);
          if (i === 0) d.change = e.change;
          replayed.pending.push(d);
        });
      }
    }
  };
  // A put listed at the time it was accepted (no event time of its own) carries that time in its
  // record (record.ts, operation 3), and is listed there again. Only a record written before
  // records carried it has none: it is listed at the time of the replay.
  const now = Date.now();
  const head = Buffer.allocUnsafe(HEADER);
  const name = segmentName(n, segments.genOf(n));
  while (at < fileSize) {
    const torn = (why: string) => {
      if (!last) throw damaged(`event log ${name}: ${why} at byte ${at} of ${fileSize}, not at the end of the log; the log is damaged`);
      ctx.warn?.(
        `event log ${name}: ${why} at byte ${at}; cutting off the last ${fileSize - at} bytes (a write cut off by a crash, never acknowledged)`,
      );
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
    const covered = until !== undefined && (n < until[0] || (n === until[0] && at < until[1]));
    if (covered === telemetry) {
      // A batch records the feed entries and positions of all its changes or of none.
      apply();
      telemetry = !covered;
    }
    if (isPut(body[0])) {
      const doc = docStart(body[0], kb);
      const entry = new IndexEntry(k, 0, len - doc);
      entry.seg = n;
      entry.gen = segments.genOf(n);
      entry.off = at + HEADER + doc;
      const { tenant, kind, key } = partsOf(k);
      const rank = Number(k.slice(k.lastIndexOf('|') + 1));
      const change = putChange(tenant, kind, key, rank, acceptedAtOf(body, kb) ?? now, undefined, () => body.toString('utf8', doc));
      if (change.op === 'put') change.where = entry;
      // Held for the writer's commit only on a full disk, which records the effects of the changes it carries.
      entry.change = change;
      batch.push(entry);
      changes.push(change);
    } else if (body[0] === OP_DELETE) {
      // A deletion: its prefix, every rank of which goes.
      const entry = new IndexEntry(k, 0, -1);
      const change: EventChange = { op: 'delete', ...partsOf(k) };
      entry.change = change;
      batch.push(entry);
      changes.push(change);
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
