/** Texts of the fleet page: times, counts, error answers. Pure (no page, no map): unit-tested in test/format.test.ts. */

/** A time as `2024-03-11 07:00:05 UTC`. */
export function fmtSecond(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** A document's time (an ISO string) to the minute, `2024-03-11 07:00` (UTC); a string that is no time as it is; '' for no string. */
export function fmtTime(v: unknown): string {
  if (typeof v !== 'string') return '';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? v : d.toISOString().slice(0, 16).replace('T', ' ');
}

/** `n` and the noun, plural unless n is 1: `1 trip`, `3 trips`. */
export function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** A value if it is a string, else ''. */
export const str = (v: unknown): string => (typeof v === 'string' ? v : '');

/** One item of the API's error answers. */
export interface ErrorItem {
  type: string;
  field?: string;
  message: string;
}

/** An error answer's items in one line: `field: message; message`. */
export function errorLine(items: readonly ErrorItem[]): string {
  return items.map((i) => (i.field ? `${i.field}: ${i.message}` : i.message)).join('; ');
}
