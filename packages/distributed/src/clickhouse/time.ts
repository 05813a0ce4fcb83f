/**
 * Event and change times as the ClickHouse tables hold them: DateTime64(3, 'UTC'), milliseconds
 * from 1900-01-01 to 2299-12-31. Pure functions, no I/O.
 */
import { AdapterError } from '@otm/core';

const DATETIME64_MIN = Date.UTC(1900, 0, 1);
const DATETIME64_MAX = Date.UTC(2300, 0, 1) - 1;

/** An instant (ms since the epoch) as a whole millisecond clamped to what a DateTime64 holds. */
export const clampDateTime64 = (ms: number): number => Math.min(DATETIME64_MAX, Math.max(DATETIME64_MIN, Math.floor(ms)));

/**
 * An instant (ms since the epoch) as DateTime64(3) text, `YYYY-MM-DD hh:mm:ss.sss` in UTC (how a
 * row's field and a query parameter are sent: a bare number is read as seconds or as
 * milliseconds depending on its digits), clamped to the type's range. NaN is a caller's bug: a
 * non-retryable AdapterError.
 */
export function dateTime64(ms: number): string {
  if (Number.isNaN(ms)) throw new AdapterError('clickhouse', 'not a time: NaN', { retryable: false });
  const iso = new Date(clampDateTime64(ms)).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 23)}`;
}
