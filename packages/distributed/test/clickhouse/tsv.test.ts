/** The TabSeparated encoding of insert rows (no I/O): the compiled encoder against the reference. */
import { describe, expect, it } from 'vitest';
import { AdapterError } from '@otm/core';
import { EVENT_COLUMNS, tsvEncoder, tsvLine } from '../../src/index.js';
import { dateTime64 } from '../../src/clickhouse/time.js';

type Row = Record<(typeof EVENT_COLUMNS)[number], string | number | null>;

/** A row of otm_events with every column set: `value(i)` for the i-th column. */
const rowOf = (value: (i: number) => string | number | null): Row => Object.fromEntries(EVENT_COLUMNS.map((c, i) => [c, value(i)])) as Row;

describe('tsvEncoder', () => {
  const encode = tsvEncoder<Row>([...EVENT_COLUMNS]);

  it('writes the line tsvLine writes: nulls, numbers, escapes of tab, newline, return, NUL and backslash', () => {
    const rows = [
      rowOf((i) => (i % 3 === 0 ? null : i % 3 === 1 ? i * 1.5 : `v${i}`)),
      rowOf((i) => ['a\tb', 'line\nbreak', 'cr\r', 'nul\0', 'back\\slash', '{"q":"\\"x\\""}', '', 1e-7, -0, 2 ** 53, null][i % 11]!),
      rowOf(() => 'ünïcødé ✓'),
    ];
    for (const row of rows) expect(encode(row)).toBe(tsvLine(row, EVENT_COLUMNS));
    expect(encode(rows[1]!).split('\t')).toHaveLength(EVENT_COLUMNS.length);
    expect(encode(rows[1]!).endsWith('\n')).toBe(true);
    expect(encode(rows[1]!).slice(0, -1)).not.toMatch(/[\n\r\0]/);
  });

  it('takes only plain column names', () => {
    expect(() => tsvEncoder<Record<string, string>>(['tenant', 'x); process.exit(1); (y'])).toThrow(/not a column name/);
    expect(() => tsvEncoder<Record<string, string>>(['a.b'])).toThrow(/not a column name/);
  });
});

describe('dateTime64', () => {
  it("writes an instant as DateTime64(3, 'UTC') text, clamped to the type's range", () => {
    expect(dateTime64(Date.parse('2024-03-01T10:00:00.25Z'))).toBe('2024-03-01 10:00:00.250');
    expect(dateTime64(0)).toBe('1970-01-01 00:00:00.000');
    expect(dateTime64(12.9)).toBe('1970-01-01 00:00:00.012');
    expect(dateTime64(Date.parse('1850-01-01T00:00:00Z'))).toBe('1900-01-01 00:00:00.000');
    expect(dateTime64(Number.MAX_SAFE_INTEGER)).toBe('2299-12-31 23:59:59.999');
    expect(() => dateTime64(Number.NaN)).toThrow(AdapterError);
  });

  it('sends DateTime64 columns of a row as such', () => {
    const encode = tsvEncoder<{ a: string; t: number }>(['a', 't'], new Set(['t']));
    expect(encode({ a: 'x', t: 1_709_287_200_005 })).toBe('x\t2024-03-01 10:00:00.005\n');
  });
});
