/**
 * Check for the model's custom string format `recurrence`: an iCalendar recurrence rule
 * (RFC 5545 section 3.3.10, `RRULE` value), optionally prefixed with `RRULE:`.
 *
 * Accepted: `;`-separated `NAME=value` parts (names case-insensitive), `FREQ` required, each name at
 * most once, not both `UNTIL` and `COUNT`, every value checked against the RFC's grammar:
 * `FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,WE;UNTIL=20251231T235959Z`.
 */
const DAY = '(?:[+-]?(?:[1-9]|[1-4][0-9]|5[0-3]))?(?:MO|TU|WE|TH|FR|SA|SU)';
const list = (item: string): RegExp => new RegExp(`^${item}(?:,${item})*$`);
const signed = (max: number): string => {
  // 1..max with optional sign, plain decimal without leading zeros
  const digits = String(max).length;
  return `[+-]?[1-9][0-9]{0,${digits - 1}}`;
};
const RULES: ReadonlyMap<string, { re: RegExp; max?: number; min?: number }> = new Map([
  ['FREQ', { re: /^(?:SECONDLY|MINUTELY|HOURLY|DAILY|WEEKLY|MONTHLY|YEARLY)$/ }],
  ['UNTIL', { re: /^[0-9]{8}(?:T[0-9]{6}Z?)?$/ }],
  ['COUNT', { re: /^[1-9][0-9]*$/ }],
  ['INTERVAL', { re: /^[1-9][0-9]*$/ }],
  ['BYSECOND', { re: list('[0-9]{1,2}'), min: 0, max: 60 }],
  ['BYMINUTE', { re: list('[0-9]{1,2}'), min: 0, max: 59 }],
  ['BYHOUR', { re: list('[0-9]{1,2}'), min: 0, max: 23 }],
  ['BYDAY', { re: list(DAY) }],
  ['BYMONTHDAY', { re: list(signed(31)), max: 31 }],
  ['BYYEARDAY', { re: list(signed(366)), max: 366 }],
  ['BYWEEKNO', { re: list(signed(53)), max: 53 }],
  ['BYMONTH', { re: list('[1-9][0-9]?'), min: 1, max: 12 }],
  ['BYSETPOS', { re: list(signed(366)), max: 366 }],
  ['WKST', { re: /^(?:MO|TU|WE|TH|FR|SA|SU)$/ }],
]);

export function isRecurrenceRule(value: string): boolean {
  if (value.length === 0 || value.length > 1000) return false;
  let s = value.toUpperCase();
  if (s.startsWith('RRULE:')) s = s.slice(6);
  const seen = new Set<string>();
  for (const part of s.split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) return false;
    const name = part.slice(0, eq);
    const val = part.slice(eq + 1);
    const rule = RULES.get(name);
    if (!rule || seen.has(name) || !rule.re.test(val)) return false;
    if (rule.max !== undefined) {
      for (const n of val.split(',')) {
        const v = Math.abs(Number(n));
        if (v > rule.max || v < (rule.min ?? 1)) return false;
      }
    }
    seen.add(name);
  }
  return seen.has('FREQ') && !(seen.has('UNTIL') && seen.has('COUNT'));
}
