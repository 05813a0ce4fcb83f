/**
 * The record format of the event log.
 *
 * Record: u32 body length, u32 CRC-32 of the body, then the body: u8 operation (1 put, 2 delete,
 * 3 put with its acceptance time), u16 key length, the key (UTF-8), for operation 3 the time the
 * put was accepted (f64 LE, ms), and for a put the document (UTF-8 JSON, as answered). A put's key
 * is `tenant|kind|key|rank`; a delete's is `tenant|kind|key|` and removes every rank.
 *
 * Why operation 3: an event without an event time of its own is listed, tracked and positioned at
 * the time it was accepted (effects.ts). The index commit that records that follows the answer by up
 * to 50 ms; when a kill comes first, the replay at the next start records the event again from its
 * record, and must find there the same time, or the event would move to the time of the replay: a
 * different place in its lists and its vehicle's track, and a latest position newer than it is. Only
 * such puts carry it (the others' time is in their document), so the common record is unchanged.
 *
 * Invariants: a record is whole when its body length fits in what the file holds after its header
 * and the body's checksum matches. Anything else is either a write cut off by a crash (at the tail
 * of the log, where recovery cuts it off) or damage (anywhere else: the log is refused).
 */
import fs from 'node:fs';
import zlib from 'node:zlib';
import { AdapterError, type DocumentWrite } from '@otm/core';
import { prefixOf } from '../keys.js';
import { IndexEntry, type IndexOp } from './index-writer.js';

export const HEADER = 8;
export const OP_PUT = 1;
export const OP_DELETE = 2;
/** A put with the time it was accepted after its key (see above). */
export const OP_PUT_AT = 3;
const AT_BYTES = 8;

/** Whether a record's operation is a put (of either form). */
export const isPut = (op: number | undefined): boolean => op === OP_PUT || op === OP_PUT_AT;
/** Where a put's document starts in its record's body, from its operation and key length in bytes. */
export const docStart = (op: number | undefined, keyBytes: number): number => 3 + keyBytes + (op === OP_PUT_AT ? AT_BYTES : 0);
/** The acceptance time a put's record carries (operation 3), else undefined. */
export const acceptedAtOf = (body: Buffer, keyBytes: number): number | undefined =>
  body[0] === OP_PUT_AT ? body.readDoubleLE(3 + keyBytes) : undefined;

/**
 * Encodes the records of one call into one buffer. `acceptedAt[i]`, when given, is kept in the
 * record of put `i` (operation 3): the time it is listed at, which its document does not say.
 */
export function encodeRecords(
  writes: readonly DocumentWrite[],
  acceptedAt?: ReadonlyArray<number | undefined>,
): { buf: Buffer; ops: IndexOp[] } {
  const keys: string[] = [];
  const keyBytes: number[] = [];
  const jsonBytes: number[] = [];
  /** Each put's document bytes, when it has them (asked for once: a TextPut makes a view a call). */
  const docBytes: (Buffer | undefined)[] = [];
  let total = 0;
  writes.forEach((w, i) => {
    const k = w.op === 'put' ? prefixOf(w.tenant, w.doc.kind, w.doc.key) + w.doc.lifecycleRank : prefixOf(w.tenant, w.kind, w.key);
    const kb = Buffer.byteLength(k);
    // The same write can never be stored: not retryable.
    if (kb > 0xffff) throw new AdapterError('event-log', `event key too long (${kb} bytes)`, { retryable: false });
    const bytes = w.op === 'put' ? w.doc.bytes : undefined;
    const jb = w.op === 'put' ? (bytes?.length ?? Buffer.byteLength(w.doc.json)) : 0;
    docBytes.push(bytes);
    keys.push(k);
    keyBytes.push(kb);
    jsonBytes.push(jb);
    total += HEADER + 3 + kb + jb + (w.op === 'put' && acceptedAt?.[i] !== undefined ? AT_BYTES : 0);
  });
  const buf = Buffer.allocUnsafe(total);
  const ops: IndexOp[] = [];
  let at = 0;
  writes.forEach((w, i) => {
    const body = at + HEADER;
    const kb = keyBytes[i]!;
    const jb = jsonBytes[i]!;
    const accepted = w.op === 'put' ? acceptedAt?.[i] : undefined;
    const op = w.op === 'delete' ? OP_DELETE : accepted === undefined ? OP_PUT : OP_PUT_AT;
    const doc = body + docStart(op, kb);
    const end = doc + jb;
    buf[body] = op;
    buf.writeUInt16LE(kb, body + 1);
    buf.write(keys[i]!, body + 3, kb, 'utf8');
    if (w.op === 'put') {
      if (accepted !== undefined) buf.writeDoubleLE(accepted, body + 3 + kb);
      const bytes = docBytes[i];
      if (bytes !== undefined) bytes.copy(buf, doc);
      else buf.write(w.doc.json, doc, jb, 'utf8');
      ops.push(new IndexEntry(keys[i]!, doc, jb));
    } else ops.push({ prefix: keys[i]! });
    buf.writeUInt32LE(end - body, at);
    buf.writeUInt32LE(zlib.crc32(buf.subarray(body, end)), at + 4);
    at = end;
  });
  return { buf, ops };
}

/** The body of the record at `at` of a segment file of `size` bytes, or what is wrong there. */
export function readRecordSync(fd: number, at: number, size: number, head: Buffer): Buffer | string {
  if (size - at < HEADER || fs.readSync(fd, head, 0, HEADER, at) !== HEADER) return 'a torn record header';
  const len = head.readUInt32LE(0);
  if (len < 3 || len > size - at - HEADER) return 'a torn record';
  const body = Buffer.allocUnsafe(len);
  if (fs.readSync(fd, body, 0, len, at + HEADER) !== len) return 'a torn record';
  if (zlib.crc32(body) !== head.readUInt32LE(4)) return 'a record whose checksum does not match';
  return body;
}
