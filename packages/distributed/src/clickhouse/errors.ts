/**
 * Which ClickHouse failures a retry can help: every request of the event store goes through
 * `clickhouseFailure` when it fails.
 * - Refused as malformed: ClickHouse answered with an error code that says the request itself is
 *   wrong (a value it cannot parse, SQL it cannot parse or type, a column or function it does not
 *   know). The same request would be refused again: a non-retryable AdapterError, and the worker
 *   sends the message that caused it to the dead-letter topic.
 * - Anything else (ClickHouse unreachable, a timeout, a connection closed under way, the server
 *   busy or out of memory, a table not created yet): a retryable 503 (`unavailable`); the worker
 *   retries, then the batch is replayed, and an HTTP caller is told to come back later.
 * - Refused for lack of room: NOT_ENOUGH_SPACE (243; also any failure that says "No space left on
 *   device", e.g. CANNOT_WRITE_TO_FILE_DESCRIPTOR), TOO_MANY_PARTS (252: inserts come faster than
 *   merges): a StorageRefused (core/storage.ts), retryable, which marks the store's write state
 *   down (the worker's /readyz names it) until an insert succeeds; the worker retries without
 *   committing its offsets, so the lag grows and nothing acknowledged is lost.
 * ClickHouse answers `Code: 27. DB::Exception: … (TYPE)`: @clickhouse/client parses an error
 * answer into a ClickHouseError with `code`; an exception that arrives within a streamed answer
 * may reach the store as a plain Error with that text. Both are read here.
 */
import { AdapterError, OtmServiceError, StorageRefused, unavailable, type RefusalCause, type WriteState } from '@otm/core';
import { errorText } from '../error-text.js';

/** ClickHouse error codes that say the request is malformed (the names are ClickHouse's). */
const MALFORMED: ReadonlySet<number> = new Set([
  6, // CANNOT_PARSE_TEXT
  16, // NO_SUCH_COLUMN_IN_TABLE
  26, // CANNOT_PARSE_QUOTED_STRING
  27, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
  38, // CANNOT_PARSE_DATE
  41, // CANNOT_PARSE_DATETIME
  43, // ILLEGAL_TYPE_OF_ARGUMENT
  46, // UNKNOWN_FUNCTION
  47, // UNKNOWN_IDENTIFIER
  53, // TYPE_MISMATCH
  62, // SYNTAX_ERROR
  70, // CANNOT_CONVERT_TYPE
  72, // CANNOT_PARSE_NUMBER
  117, // INCORRECT_DATA
]);

/** The ClickHouse error code of a failure, when ClickHouse answered with one. */
export function clickhouseErrorCode(e: unknown): number | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^\d+$/.test(code)) return Number(code);
  const m = /^Code: (\d+)\./.exec(errorText(e));
  return m ? Number(m[1]) : undefined;
}

/** Why ClickHouse refused a write for lack of room, if it did. */
export function clickhouseRefusal(e: unknown): RefusalCause | undefined {
  const code = clickhouseErrorCode(e);
  if (code === 252) return 'too-many-parts'; // TOO_MANY_PARTS
  if (code === 243) return 'no-space'; // NOT_ENOUGH_SPACE
  const text = errorText(e);
  if (/No space left on device/i.test(text)) return 'no-space';
  if (/Too many parts/i.test(text)) return 'too-many-parts';
  return undefined;
}

/**
 * The error to throw for a failed ClickHouse request: non-retryable when refused as malformed, a
 * StorageRefused when refused for lack of room (`writes` marked down), else a retryable 503.
 */
export function clickhouseFailure(e: unknown, writes?: WriteState): Error {
  if (e instanceof AdapterError || e instanceof OtmServiceError) return e; // classified already
  const refusal = clickhouseRefusal(e);
  if (refusal !== undefined) {
    return writes === undefined ? new StorageRefused('clickhouse', refusal, errorText(e), e) : writes.refuse(refusal, errorText(e), e);
  }
  const code = clickhouseErrorCode(e);
  if (code !== undefined && MALFORMED.has(code)) {
    return new AdapterError('clickhouse', `refused as malformed: ${errorText(e)}`, { retryable: false, cause: e });
  }
  return unavailable(`clickhouse: ${errorText(e)}`, 5, e);
}
