/**
 * The record format of the event log.
 *
 * Record: u32 body length, u32 CRC-32 of the body, then the body: u8 operation (1 put, 2 delete),
 * u16 key length, the key (UTF-8), and for a put the document (UTF-8 JSON, as answered). A put's
 * key is `tenant|kind|key|rank`; a delete's is `tenant|kind|key|` and removes every rank.
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

/** Encodes the records of one call into one buffer. */
export function encodeRecords(writes: readonly DocumentWrite[]): { buf: Buffer; ops: IndexOp[] } {
  const keys: string[] = [];
  const keyBytes: number[] = [];
  const jsonBytes: number[] = [];
  /** Each put's document bytes, when it has them (asked for once: a TextPut makes a view a call). */
  const docBytes: (Buffer | undefined)[] = [];
  let total = 0;
  for (const w of writes) {
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
export function readRecordSync(fd: number, at: number, size: number, head: Buffer): Buffer | string {
  if (size - at < HEADER || fs.readSync(fd, head, 0, HEADER, at) !== HEADER) return 'a torn record header';
  const len = head.readUInt32LE(0);
  if (len < 3 || len > size - at - HEADER) return 'a torn record';
  const body = Buffer.allocUnsafe(len);
  if (fs.readSync(fd, body, 0, len, at + HEADER) !== len) return 'a torn record';
  if (zlib.crc32(body) !== head.readUInt32LE(4)) return 'a record whose checksum does not match';
  return body;
}
