/**
 * A position in the event log, as the index stores it: where an event's document lies (segment,
 * generation of the segment's file, offset and length of its JSON), and the meta key of how far
 * into the log the index has been applied. Shared by the event loop's modules and the index thread.
 */
import { AdapterError } from '@otm/core/basics';

/**
 * Where a document lies in the log: segment number, the generation of the segment's file, byte
 * offset and byte length of its JSON.
 */
export interface Pos {
  readonly seg: number;
  readonly gen: number;
  readonly off: number;
  readonly len: number;
}

/** Meta key of how far into the log the index has been applied (`seg:offset`). */
export const CHECKPOINT = 'checkpoint';

/**
 * An index value: u32 segment, u32 offset, u32 length, u32 generation. Into `b` when given: only
 * for a put inside a write transaction, where LMDB copies the value at once (lmdb-js writes there
 * and then), so that one buffer serves every put of an index commit.
 */
export const encodePos = (p: Pos, b = Buffer.allocUnsafe(16)): Buffer => {
  b.writeUInt32LE(p.seg, 0);
  b.writeUInt32LE(p.off, 4);
  b.writeUInt32LE(p.len, 8);
  b.writeUInt32LE(p.gen, 12);
  return b;
};
export const decodePos = (b: Buffer): Pos => {
  if (b.length !== 16)
    throw new AdapterError('event-log', `event index: a position of ${b.length} bytes, not 16; the index is damaged`, { retryable: false });
  return { seg: b.readUInt32LE(0), gen: b.readUInt32LE(12), off: b.readUInt32LE(4), len: b.readUInt32LE(8) };
};
