/** Which ClickHouse failures a retry can help (no I/O): ClickHouse's error texts and codes, and the SQL builders' refusals. */
import { describe, expect, it } from 'vitest';
import { AdapterError, OtmServiceError, StorageRefused, WriteState } from '@otm/core';
import { ClickHouseEventStore, eventGetSql, eventPlacementsSql, eventStoreDdl } from '../../src/index.js';
import { clickhouseErrorCode, clickhouseFailure } from '../../src/clickhouse/errors.js';

/** What @clickhouse/client hands on for a ClickHouse error answer: an Error with the parsed `code` and `type`. */
const current = (code: string, type: string, message: string) => Object.assign(new Error(message), { code, type });

describe('clickhouseFailure', () => {
  it.each([
    ['Code: 27. DB::Exception: Cannot parse input: expected \\t before: NaN. (CANNOT_PARSE_INPUT_ASSERTION_FAILED) (version 25.8.1.1)'],
    ['Code: 41. DB::Exception: Cannot parse datetime: (at row 1). (CANNOT_PARSE_DATETIME) (version 25.8.1.1)'],
    ['Code: 62. DB::Exception: Syntax error: failed at position 1. (SYNTAX_ERROR) (version 25.8.1.1)'],
    ['Code: 47. DB::Exception: Unknown identifier: nope. (UNKNOWN_IDENTIFIER) (version 25.8.1.1)'],
  ])('ClickHouse refusing the request as malformed, in its text: not retryable (%s)', (text) => {
    const e = clickhouseFailure(new Error(text));
    expect(e).toBeInstanceOf(AdapterError);
    expect(e).toMatchObject({ adapter: 'clickhouse', retryable: false, message: `refused as malformed: ${text}` });
  });

  it('ClickHouse refusing the request as malformed, as the client parsed it: not retryable', () => {
    const e = clickhouseFailure(current('27', 'CANNOT_PARSE_INPUT_ASSERTION_FAILED', 'Cannot parse input'));
    expect(e).toMatchObject({ name: 'AdapterError', retryable: false });
  });

  it.each([
    [new Error('connect ECONNREFUSED 127.0.0.1:1')],
    [new Error('Timeout error.')],
    [new Error('socket hang up')],
    [new Error("Code: 60. DB::Exception: Table otm.otm_events doesn't exist. (UNKNOWN_TABLE) (version 25.8.1.1)")],
    [new Error('Code: 241. DB::Exception: Memory limit (for query) exceeded. (MEMORY_LIMIT_EXCEEDED) (version 25.8.1.1)')],
    ['a string'],
  ])('anything else is a retryable 503 (%s)', (failure) => {
    const e = clickhouseFailure(failure);
    expect(e).toBeInstanceOf(OtmServiceError);
    expect(e).toMatchObject({ status: 503, retryable: true, cause: failure });
  });

  it.each([
    [
      'too-many-parts',
      new Error(
        'Code: 252. DB::Exception: Too many parts (300). Merges are processing significantly slower than inserts. (TOO_MANY_PARTS) (version 25.8.1.1)',
      ),
    ],
    [
      'too-many-parts',
      current(
        '252',
        'TOO_MANY_PARTS',
        'Too many parts (300 with average size of 820.86 KiB). Merges are processing significantly slower than inserts. ',
      ),
    ],
    [
      'no-space',
      current(
        '243',
        'NOT_ENOUGH_SPACE',
        'Could not perform insert: less than 1048576 free bytes left in the disk space (0). Configure this limit with user settings min_free_disk_bytes_to_perform_insert or min_free_disk_ratio_to_perform_insert',
      ),
    ],
    ['no-space', new Error('Code: 243. DB::Exception: Not enough space for merging parts. (NOT_ENOUGH_SPACE) (version 25.8.1.1)')],
    [
      'no-space',
      new Error(
        'Code: 75. DB::ErrnoException: Cannot write to file /var/lib/clickhouse/data/otm/otm_events/tmp_insert_1_2_2_0/data.bin, errno: 28, strerror: No space left on device. (CANNOT_WRITE_TO_FILE_DESCRIPTOR) (version 25.8.1.1)',
      ),
    ],
  ])('refused for lack of room (%s): a retryable StorageRefused, and the write state down', (cause, failure) => {
    const writes = new WriteState('clickhouse');
    const e = clickhouseFailure(failure, writes);
    expect(e).toBeInstanceOf(StorageRefused);
    expect(e).toMatchObject({ store: 'clickhouse', refusal: cause, retryable: true, cause: failure });
    expect(writes.part.status()).toMatchObject({ up: false, reason: expect.stringMatching(/^refuses writes: /) });
    // Without a write state (a caller that keeps none): the same refusal.
    expect(clickhouseFailure(failure)).toMatchObject({ refusal: cause, retryable: true });
  });

  it('an error classified already is kept as it is', () => {
    const own = new AdapterError('clickhouse', 'eventGetSql: no ids', { retryable: false });
    expect(clickhouseFailure(own)).toBe(own);
  });

  it('clickhouseErrorCode reads the text and the parsed code, and nothing else', () => {
    expect(clickhouseErrorCode(new Error('Code: 62. DB::Exception: Syntax error (SYNTAX_ERROR)'))).toBe(62);
    expect(clickhouseErrorCode(current('62', 'SYNTAX_ERROR', 'Syntax error'))).toBe(62);
    expect(clickhouseErrorCode(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBeUndefined();
    expect(clickhouseErrorCode(new Error('the server said Code: 62. somewhere'))).toBeUndefined();
  });
});

describe('the SQL builders', () => {
  it('refuse what they cannot write safely with non-retryable AdapterErrors', () => {
    const refused = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return e;
      }
      return undefined;
    };
    for (const f of [
      () => eventStoreDdl('otm; DROP'),
      () => eventGetSql('otm', 't', []),
      () => eventGetSql('otm', 't', ['a'], -1),
      () => eventPlacementsSql('otm', 't', []),
      () => new ClickHouseEventStore({ url: 'http://127.0.0.1:1', database: 'a.b' }),
    ]) {
      const e = refused(f);
      expect(e).toBeInstanceOf(AdapterError);
      expect(e).toMatchObject({ adapter: 'clickhouse', retryable: false });
    }
  });
});
