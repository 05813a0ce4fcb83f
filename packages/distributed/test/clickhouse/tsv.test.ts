/** The TabSeparated encoding of insert rows (no I/O): the compiled encoder against the reference. */
import { describe, expect, it } from 'vitest';
import { EVENT_COLUMNS, tsvEncoder, tsvLine } from '../../src/index.js';

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
