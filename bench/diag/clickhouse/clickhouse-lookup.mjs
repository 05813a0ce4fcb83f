/**
 * What the telemetry worker's lookup costs ClickHouse: before writing a batch, the event store asks
 * otm_event_ids where each of the batch's ids sits already (`eventPlacementsSql`), so that an event
 * moved to another vehicle or time leaves no live row behind. Measured on a fresh test ClickHouse
 * 18.16 (test/infra/services.ts) holding N location events written by the store in batches of
 * 10,000, as the server's CPU (user and system time from /proc) per query, for
 * - the store's SQL: the ids as one array literal unrolled by a subquery, `IN (SELECT arrayJoin([...]))`;
 * - the same SQL with the ids as an IN list of literals, `IN ('…', '…', …)`, as the store sent it
 *   before;
 * each for ids not stored yet (a fresh bulk load: the common case) and for stored ids, in
 * alternated rounds; prints the medians, per query and per id. After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/clickhouse/clickhouse-lookup.mjs [events=100000] [rounds=3] [ids=1000]
 *
 * Loopback only.
 */
import { createClient, ClickHouseLogLevel } from '@clickhouse/client';
import { startClickHouse } from '../../../test/infra/services.ts';
import { ClickHouseEventStore, eventPlacementsSql, sqlString } from '../../../packages/distributed/dist/index.js';
import { locationBodies, writeLocationEvents } from '../../lib/documents.mjs';
import { cpuSeconds } from '../../lib/proc.mjs';
import { fmt, idMaker, median } from '../../lib/util.mjs';

const EVENTS = Number(process.argv[2] ?? 100_000);
const ROUNDS = Number(process.argv[3] ?? 3);
const IDS = Number(process.argv[4] ?? 1000);
const QUERIES = 20;
const DB = 'otm_lookup_diag';

const ch = await startClickHouse();
if (ch.pid === undefined) throw new Error('this diagnostic starts its own ClickHouse: unset CLICKHOUSE_URL');
const cpu = () => {
  const { user, sys } = cpuSeconds(`/proc/${ch.pid}/stat`);
  return user + sys;
};
const store = new ClickHouseEventStore({ url: ch.url, database: DB });
const client = createClient({ url: ch.url, log: { level: ClickHouseLogLevel.OFF } });

/** The lookup as the store sent it before: the ids as an IN list of literals. */
const literalListSql = (ids) =>
  eventPlacementsSql(DB, 'acme', ids).replace(/IN \(SELECT arrayJoin\(\[(.*)\]\)\)/s, (_, list) => `IN (${list})`);

try {
  await store.migrate();
  const docs = locationBodies();
  await writeLocationEvents(store, docs, EVENTS);
  const parts = await store.query(
    `SELECT table, count() AS parts FROM system.parts WHERE database = '${DB}' AND active GROUP BY table ORDER BY table`,
  );
  console.log(
    `${fmt(EVENTS, 0)} events stored; active parts: ${parts.map((p) => `${p.table} ${p.parts}`).join(', ')}; ${IDS} ids a lookup`,
  );

  // Ids not stored yet come from the bench's own id maker (sequential after a random prefix), as a
  // bulk load's would; stored ones are picked at random.
  const fresh = idMaker();
  const freshIds = () => Array.from({ length: IDS }, () => fresh.next());
  const storedIds = () => Array.from({ length: IDS }, () => docs.ids.at(Math.floor(Math.random() * EVENTS)));
  if (literalListSql(['a']) === eventPlacementsSql(DB, 'acme', ['a'])) throw new Error('could not rewrite the lookup as an IN list');
  if (!literalListSql(['a', 'b']).includes(`IN (${sqlString('a')},${sqlString('b')})`)) throw new Error('unexpected IN list');

  /** ClickHouse CPU ms a query, and rows found. */
  const measure = async (sqlOf, idsOf) => {
    let found = 0;
    const c0 = cpu();
    for (let q = 0; q < QUERIES; q++) {
      const rs = await client.query({ query: sqlOf(idsOf()), format: 'JSONEachRow' });
      found += (await rs.json()).length;
    }
    return { ms: ((cpu() - c0) * 1000) / QUERIES, found: found / QUERIES };
  };
  const ways = {
    'array subquery (the store), ids not stored': () => measure((ids) => eventPlacementsSql(DB, 'acme', ids), freshIds),
    'IN list of literals, ids not stored': () => measure(literalListSql, freshIds),
    'array subquery (the store), stored ids': () => measure((ids) => eventPlacementsSql(DB, 'acme', ids), storedIds),
    'IN list of literals, stored ids': () => measure(literalListSql, storedIds),
  };
  for (const run of Object.values(ways)) await run(); // warm-up
  const results = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [name, run] of Object.entries(ways)) {
      const r = await run();
      results[name].push(r.ms);
      console.log(`round ${round}: ${name}: ClickHouse CPU ${fmt(r.ms)} ms a lookup of ${IDS} ids (${fmt(r.found, 0)} rows found)`);
    }
  }
  console.log(`\nmedians (ClickHouse CPU a lookup of ${IDS} ids, µs an id):`);
  for (const [name, ms] of Object.entries(results))
    console.log(`  ${name}: ${fmt(median(ms))} ms (${fmt((median(ms) * 1000) / IDS)} µs an id)`);
} finally {
  await store.dropDatabase().catch(() => {});
  await store.close();
  await client.close();
  await ch.stop();
}
