/** How change messages travel as Kafka records (no I/O): packing on the way out, decoding on the way in. */
import { describe, expect, it } from 'vitest';
import type { KafkaMessage } from 'kafkajs';
import { encodeMessage, type ChangeMessage } from '@otm/core';
import { PACK_HEADER, packRecords } from '../../src/index.js';
import { decodeRecord } from '../../src/kafka/record-pack.js';

/** A record as kafkajs hands it to the consumer. */
const record = (value: string | Buffer | null, headers?: Record<string, string>): KafkaMessage =>
  ({
    key: Buffer.from('k'),
    value: typeof value === 'string' ? Buffer.from(value) : value,
    headers,
    offset: '7',
    timestamp: '0',
    attributes: 0,
    size: 0,
  }) as KafkaMessage;

const change = (n: number): ChangeMessage => ({ v: 1, op: 'delete', tenant: 't', kind: 'trips', key: `k#${n}`, acceptedAt: n });

describe('record-pack', () => {
  it('packRecords: one record per key and pack, in order per key, under the pack size; a message with a newline alone', () => {
    const recs = packRecords(
      [
        { key: 'a', value: 'a1' },
        { key: 'b', value: 'b1' },
        { key: 'a', value: Buffer.from('a2') },
        { key: 'a', value: 'a\n3' },
        { key: 'a', value: 'a4' },
        { key: 'a', value: 'a5' },
        { key: 'a', value: 'a6' },
      ],
      5,
    );
    const shown = recs.map((r) => ({ key: r.key, value: r.value.toString(), pack: r.headers?.[PACK_HEADER] }));
    expect(shown).toEqual([
      { key: 'a', value: 'a1\na2', pack: '2' },
      { key: 'a', value: 'a\n3', pack: undefined },
      { key: 'a', value: 'a4\na5', pack: '2' },
      { key: 'a', value: 'a6', pack: undefined },
      { key: 'b', value: 'b1', pack: undefined },
    ]);
    // A key sent once stays as it was given.
    const one = { key: 'k', value: 'v' };
    expect(packRecords([one])).toEqual([one]);
  });

  it('decodeRecord: a packed record gives its messages in order, only the last one marked last', () => {
    const [packed] = packRecords([1, 2, 3].map((n) => ({ key: 'k', value: encodeMessage(change(n)) })));
    const decoded = decodeRecord('otm.entities', record(packed!.value, packed!.headers));
    expect(decoded.map((d) => d.envelope?.message.acceptedAt)).toEqual([1, 2, 3]);
    expect(decoded.map((d) => d.last)).toEqual([false, false, true]);
    expect(decoded.map((d) => d.part)).toEqual([0, 1, 2].map((index) => ({ index, of: 3 })));
    expect(decoded[0]!.envelope).toMatchObject({ topic: 'otm.entities', key: 'k' });
    const [plain] = decodeRecord('otm.entities', record(encodeMessage(change(4))));
    expect(plain).toMatchObject({ last: true, envelope: { message: { acceptedAt: 4 } } });
    expect(plain!.part).toBeUndefined();
  });

  it('decodeRecord: what cannot be decoded is a parse error, never an exception', () => {
    expect(decodeRecord('t', record('not json'))[0]!.parseError).toBeTruthy();
    expect(decodeRecord('t', record('{"no":"op"}'))[0]!.parseError).toBe('not a change message');
    expect(decodeRecord('t', record(null))[0]!.parseError).toBe('not a change message');
    const miscounted = decodeRecord('t', record('{}\n{}', { [PACK_HEADER]: '3' }));
    expect(miscounted).toHaveLength(1);
    expect(miscounted[0]).toMatchObject({ last: true, parseError: 'a packed record of 3 messages holds 2 lines' });
  });
});
