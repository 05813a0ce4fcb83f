/**
 * What encoding one otm_events row for an insert costs (the telemetry worker on ClickHouse):
 * `JSON.stringify` of a row as the worker builds it (eventColumns, then the ids, versions and the
 * document text; 34 columns) for JSONEachRow, of the same row without its `doc` column, of the
 * document text alone (escaping it inside a JSON string), the TabSeparated line by column name
 * (`tsvLine`, which looks up each column by name, kept as the reference) and the same line from the
 * encoder made for the column list (`tsvEncoder`, what the worker sends). After `npm run build`:
 *
 *   node bench/diag/clickhouse/clickhouse-row-json.mjs [rows=100000]
 */
import { EVENT_COLUMNS, eventColumns, tsvEncoder, tsvLine } from '../../../packages/distributed/dist/index.js';
import { locationEvent } from '../../lib/documents.mjs';

const N = Number(process.argv[2] ?? 100_000);
const rows = [];
for (let i = 0; i < N; i++) {
  const text = locationEvent(`00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, i);
  const doc = JSON.parse(text);
  rows.push(
    Object.assign(eventColumns(doc, 1_700_000_000_000), {
      tenant: 't1',
      event_id: doc.id,
      lifecycle_rank: 4,
      event_time: 1_700_000_000 + i,
      accepted_at: 1_700_000_000_000,
      version: 123_456_789 + i,
      deleted: 0,
      doc: text,
    }),
  );
}
const withoutDoc = rows.map(({ doc, ...rest }) => rest);
const time = (name, list, f) => {
  let best = Infinity;
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    let bytes = 0;
    for (const x of list) bytes += f(x).length;
    best = Math.min(best, performance.now() - t0);
    if (bytes === 0) throw new Error('nothing encoded');
  }
  console.log(`${name.padEnd(36)} ${((best * 1000) / list.length).toFixed(2)} µs a row (best of 3 passes over ${list.length})`);
};
time('row, as the worker builds it', rows, (r) => JSON.stringify(r));
time('the same row without doc', withoutDoc, (r) => JSON.stringify(r));
time('the document text alone', rows, (r) => JSON.stringify(r.doc));
time('TabSeparated line (tsvLine)', rows, (r) => tsvLine(r, EVENT_COLUMNS));
const line = tsvEncoder(EVENT_COLUMNS);
if (line(rows[7]) !== tsvLine(rows[7], EVENT_COLUMNS)) throw new Error('tsvEncoder and tsvLine differ');
time('TabSeparated line (tsvEncoder)', rows, line);
