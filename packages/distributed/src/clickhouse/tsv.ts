/**
 * Rows as ClickHouse's TabSeparated format: the event store's inserts, and the tracks it reads
 * back (`tsvFields`). NULL as `\N`, numbers as JavaScript writes them, strings with backslash
 * escapes of tab, newline, carriage return, NUL and backslash, so that a field never holds a raw
 * separator. TabSeparated rather than JSONEachRow: no member names and no escaping of every quote
 * of the document (bench/diag/clickhouse/clickhouse-row-json.mjs compares them). Pure functions,
 * no I/O.
 */
import { sqlIdent } from './sql.js';
import { dateTime64 } from './time.js';

/** Characters that TabSeparated escapes in a string (its field and row separators, the escape itself). */
const TSV_SPECIAL = /[\\\t\n\r\0]/;
const TSV_SPECIAL_ALL = /[\\\t\n\r\0]/g;
const TSV_ESCAPE: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0' };

/** What a field of a row may hold: NULL, a number, a string, an Array(String). */
type TsvValue = string | number | null | readonly string[];

/**
 * One value as a TabSeparated field: NULL as `\N`, numbers as JavaScript writes them (finite, as
 * they come from JSON; `1e-7` style is read by ClickHouse too), strings with backslash escapes,
 * arrays of strings as `tsvArray`.
 * The document itself (JSON text) rarely holds a backslash, so it is mostly sent as it is, where
 * JSONEachRow escaped every quote in it.
 */
function tsvField(v: TsvValue): string {
  if (v === null) return '\\N';
  if (typeof v === 'number') return String(v);
  if (typeof v !== 'string') return tsvArray(v);
  return TSV_SPECIAL.test(v) ? v.replace(TSV_SPECIAL_ALL, (c) => TSV_ESCAPE[c]!) : v;
}

const ARRAY_ITEM_SPECIAL_ALL = /[\\\t\n\r\0']/g;

/**
 * An Array(String) as a TabSeparated field: `['a','b']`, each string in single quotes with the
 * same backslash escapes as a plain field and `\'` for a quote (ClickHouse reads the field's text as
 * it is, without a second level of escaping).
 */
function tsvArray(items: readonly string[]): string {
  let out = '[';
  for (let i = 0; i < items.length; i++) {
    out += `${i === 0 ? '' : ','}'${items[i]!.replace(ARRAY_ITEM_SPECIAL_ALL, (c) => (c === "'" ? "\\'" : TSV_ESCAPE[c]!))}'`;
  }
  return `${out}]`;
}

/** One row as a TabSeparated line of `columns`. */
export function tsvLine<R>(row: R, columns: readonly (keyof R)[]): string {
  let line = tsvField(row[columns[0]!] as TsvValue);
  for (let i = 1; i < columns.length; i++) line += `\t${tsvField(row[columns[i]!] as TsvValue)}`;
  return `${line}\n`;
}

/**
 * `tsvLine` for one column list, made once as a function that reads each member by its name
 * (`f(r.tenant) + '\t' + f(r.event_id) + …`): V8 then loads the members of rows of one shape
 * directly instead of looking each name up, which makes the encoding, a large part of the
 * telemetry worker's work in bulk ingest, clearly cheaper
 * (bench/diag/clickhouse/clickhouse-row-json.mjs measures both). The names are the store's own
 * column constants, checked to be plain identifiers.
 */
export function tsvEncoder<R>(columns: readonly (keyof R & string)[], times: ReadonlySet<string> = new Set()): (row: R) => string {
  for (const c of columns) sqlIdent(c, 'not a column name');
  const body = `return ${columns.map((c) => `${times.has(c) ? 'd' : 'f'}(r.${c})`).join(" + '\\t' + ")} + '\\n';`;
  // eslint-disable-next-line @typescript-eslint/no-implied-eval -- the generated encoder is the point (see above); the names are checked identifiers
  return new Function('f', 'd', 'r', body).bind(null, tsvField, dateTime64) as (row: R) => string;
}

/** Rows per piece of a streamed insert: small enough to stay in V8's young generation. */
const INSERT_PIECE_ROWS = 64;

/** TabSeparated text of `rows`, a piece of INSERT_PIECE_ROWS rows at a time. */
export function* tsvPieces<R>(rows: readonly R[], line: (row: R) => string): Generator<string> {
  for (let i = 0; i < rows.length; i += INSERT_PIECE_ROWS) {
    let piece = '';
    const end = Math.min(rows.length, i + INSERT_PIECE_ROWS);
    for (let j = i; j < end; j++) piece += line(rows[j]!);
    yield piece;
  }
}

/** A table's columns, in the order an insert sends them, and the encoder of its rows. */
export interface RowFormat<R> {
  readonly columns: readonly (keyof R & string)[];
  readonly line: (row: R) => string;
}

/** The RowFormat of `columns`; those in `times` hold ms since the epoch, sent as DateTime64(3) (`dateTime64`). */
export const rowFormat = <R>(columns: readonly (keyof R & string)[], times: readonly (keyof R & string)[] = []): RowFormat<R> => ({
  columns,
  line: tsvEncoder<R>(columns, new Set(times)),
});

/** What a backslash escape of ClickHouse's TabSeparated output stands for. */
const TSV_UNESCAPE: Record<string, string> = {
  b: '\b',
  f: '\f',
  r: '\r',
  n: '\n',
  t: '\t',
  '0': '\0',
  a: '\x07',
  v: '\v',
  "'": "'",
  '\\': '\\',
};

/** One field of a TabSeparated line as ClickHouse wrote it: `\N` is NULL, escapes undone. */
function tsvValue(field: string): string | null {
  if (field === '\\N') return null;
  if (!field.includes('\\')) return field;
  return field.replace(/\\(.)/g, (_, c: string) => TSV_UNESCAPE[c] ?? c);
}

/** The fields of one line of ClickHouse's TabSeparated output (no line end). */
export function tsvFields(line: string): Array<string | null> {
  return line.split('\t').map(tsvValue);
}
