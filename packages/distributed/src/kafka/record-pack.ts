/**
 * How change messages travel as Kafka records, both ways.
 *
 * A record's value is one change message as JSON (`encodeMessage`), its key `envelope.key` (so one
 * key stays on one partition, in order). Several messages of one key in one produce request go as
 * one record, their texts one a line, with the header `otm-pack: <count>` (`packRecords`).
 * Invariants:
 * - a packed record holds messages of one key, in publish order, and exactly `<count>` lines; a
 *   message whose text holds a raw newline is never packed (a change message's JSON never does);
 * - the consumer takes a packed record apart into its messages (`decodeRecord`), hands them over
 *   in order and commits the record's offset only after its last message (`Decoded.last`);
 * - a record that cannot be decoded (not JSON, not a change message, a count that does not match
 *   its lines) is decoded as a `parseError`: it goes to the dead-letter topic, never retried.
 */
import type { KafkaMessage } from 'kafkajs';
import { AdapterError, decodeMessage, type Envelope, type Topic } from '@otm/core';
import { errorText } from '../error-text.js';

/** Header of a Kafka record that packs several change messages of one key (its value: their texts, one a line). */
export const PACK_HEADER = 'otm-pack';
/** Largest value of a packed record: far under any broker's message.max.bytes. */
export const PACK_MAX_BYTES = 256 * 1024;
const NEWLINE = 0x0a;
const LINE_BREAK = Buffer.from([NEWLINE]);

/** A record to produce: one message, or several of one key packed into one. */
export interface ProduceRecord {
  readonly key: string;
  readonly value: string | Buffer;
  readonly headers?: Record<string, string>;
}

/**
 * The records to produce for messages of one topic, in publish order per key: the messages of a
 * key that appears more than once in the publish are packed, in order, into records of up to
 * `maxPackBytes`, their texts one a line (one that holds a raw newline goes alone). Kafka, the
 * producer and the consumers then handle one record where they handled each message: kafkajs
 * encodes every record into its own buffer, which is much of the cost of a bulk request's events
 * (docs/PERFORMANCE.md). A key sent once stays one plain record.
 */
export function packRecords(
  messages: readonly { readonly key: string; readonly value: string | Buffer }[],
  maxPackBytes = PACK_MAX_BYTES,
): ProduceRecord[] {
  const byKey = new Map<string, (string | Buffer)[]>();
  for (const m of messages) {
    const list = byKey.get(m.key);
    if (list === undefined) byKey.set(m.key, [m.value]);
    else list.push(m.value);
  }
  const out: ProduceRecord[] = [];
  for (const [key, values] of byKey) {
    if (values.length === 1) {
      out.push({ key, value: values[0]! });
      continue;
    }
    let pack: Buffer[] = [];
    let bytes = 0;
    const flush = () => {
      if (pack.length === 1) out.push({ key, value: pack[0]! });
      else if (pack.length > 1) {
        const parts: Buffer[] = [];
        pack.forEach((b, i) => (i === 0 ? parts.push(b) : parts.push(LINE_BREAK, b)));
        out.push({ key, value: Buffer.concat(parts, bytes), headers: { [PACK_HEADER]: String(pack.length) } });
      }
      pack = [];
      bytes = 0;
    };
    for (const v of values) {
      const b = typeof v === 'string' ? Buffer.from(v) : v;
      if (b.includes(NEWLINE)) {
        flush();
        out.push({ key, value: v });
        continue;
      }
      if (pack.length > 0 && bytes + 1 + b.length > maxPackBytes) flush();
      pack.push(b);
      bytes += pack.length === 1 ? b.length : b.length + 1;
    }
    flush();
  }
  return out;
}

/** One change message taken from a Kafka record (a packed record gives several). */
export interface Decoded {
  readonly message: KafkaMessage;
  /** The change message's own text: the record's value, or its line of a packed record. */
  readonly value: Buffer | null;
  /** For a packed record: which of its messages this is, and how many it holds. */
  readonly part?: { readonly index: number; readonly of: number };
  /** Whether this is the record's last message: the record's offset may be committed after it. */
  readonly last: boolean;
  readonly envelope?: Envelope;
  readonly parseError?: string;
}

/** The change messages of a record: one, or each line of a packed record (`packRecords`). */
export function decodeRecord(topic: string, m: KafkaMessage): Decoded[] {
  const count = m.headers?.[PACK_HEADER];
  if (count === undefined || m.value === null) return [decodeOne(topic, m, m.value, undefined, true)];
  const lines: Buffer[] = [];
  for (let from = 0; ;) {
    const at = m.value.indexOf(NEWLINE, from);
    lines.push(m.value.subarray(from, at === -1 ? m.value.length : at));
    if (at === -1) break;
    from = at + 1;
  }
  if (String(count) !== String(lines.length)) {
    return [
      { message: m, value: m.value, last: true, parseError: `a packed record of ${String(count)} messages holds ${lines.length} lines` },
    ];
  }
  return lines.map((line, i) => decodeOne(topic, m, line, { index: i, of: lines.length }, i === lines.length - 1));
}

function decodeOne(topic: string, m: KafkaMessage, value: Buffer | null, part: Decoded['part'], last: boolean): Decoded {
  try {
    const message = decodeMessage(value?.toString('utf8') ?? 'null');
    if (typeof message !== 'object' || message === null || typeof message.op !== 'string') {
      throw new AdapterError('kafka', 'not a change message', { retryable: false });
    }
    return { message: m, value, part, last, envelope: { topic: topic as Topic, key: m.key?.toString('utf8') ?? '', message } };
  } catch (e) {
    return { message: m, value, part, last, parseError: errorText(e) };
  }
}
