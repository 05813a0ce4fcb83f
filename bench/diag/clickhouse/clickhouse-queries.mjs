/**
 * Where ClickHouse's CPU goes in the bench's distributed bulk scenario, by kind of query: a test
 * cluster (test/distributed/cluster.ts) whose roles log their ClickHouse queries
 * (`CLICKHOUSE_URL=…?clickhouse_setting_log_queries=1`, a setting @clickhouse/client takes from the
 * URL), a warm-up of 20,000 location events in bulk requests of 1,000, then rounds of 50,000 in
 * requests of 10,000 (2 in flight) with the bench's visibility probes. After each round, from
 * `system.query_log` (each query's own CPU in its ProfileEvents): the worker's otm_events and
 * otm_event_ids inserts, its lookups of where events sit (`eventPlacementsSql`) and the query
 * service's GETs by id (`eventGetSql`), with their count, CPU, rows read, parts and marks selected
 * and read buffers allocated (`IOBufferAllocBytes`); and the server process's whole CPU over the
 * round (from /proc), of which the rest is merges and HTTP. This is how the lookup's cost was found.
 * After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/clickhouse/clickhouse-queries.mjs [rounds=2]
 *
 * Loopback only.
 */
import { startCluster } from '../../../test/distributed/cluster.ts';
import { startClickHouse } from '../../../test/infra/services.ts';
import { bulkEndToEnd } from '../../lib/bulk.mjs';
import { cpuSeconds } from '../../lib/proc.mjs';
import { fmt, sleep } from '../../lib/util.mjs';

const ROUNDS = Number(process.argv[2] ?? 2);
const TOKEN = 'writer-token-acme'; // one of the cluster's default tokens

if (process.env.CLICKHOUSE_URL) throw new Error('this diagnostic starts its own ClickHouse: unset CLICKHOUSE_URL');
const ch = await startClickHouse();
// The cluster takes this server as given (it starts none of its own); its roles log their queries.
process.env.CLICKHOUSE_URL = ch.url;
const sql = async (query) => {
  const r = await fetch(ch.url, { method: 'POST', body: query });
  const text = await r.text();
  if (!r.ok) throw new Error(text);
  return text;
};
const chCpu = () => {
  const { user, sys } = cpuSeconds(`/proc/${ch.pid}/stat`);
  return user + sys;
};
const profileEvent = (name) => `ProfileEvents.Values[indexOf(ProfileEvents.Names, '${name}')]`;
const KIND = `multiIf(
  query LIKE 'INSERT INTO otm.otm_events %', 'insert otm_events',
  query LIKE 'INSERT INTO otm.otm_event_ids %', 'insert otm_event_ids',
  query LIKE '%argMax(doc, version)%', 'GET by id (probes)',
  query LIKE '%toUnixTimestamp64Milli(argMax(event_time, version))%', 'lookup of a batch''s ids',
  'other')`;

const cluster = await startCluster({ env: { CLICKHOUSE_URL: `${ch.url}/?clickhouse_setting_log_queries=1` } });
try {
  const writeUrl = cluster.processes.get('ingress').url;
  const readUrl = cluster.processes.get('query').url;
  await bulkEndToEnd({ writeUrl, readUrl, token: TOKEN, n: 20_000, batch: 1_000, concurrency: 2, visibleTimeoutS: 120 });
  for (let round = 1; round <= ROUNDS; round++) {
    await sleep(3_000); // the warm-up's or last round's merges
    await sql('SYSTEM FLUSH LOGS');
    const since = (await sql('SELECT now()')).trim();
    const c0 = chCpu();
    const r = await bulkEndToEnd({ writeUrl, readUrl, token: TOKEN, n: 50_000, batch: 10_000, concurrency: 2, visibleTimeoutS: 120 });
    const cpu = chCpu() - c0;
    await sleep(500);
    await sql('SYSTEM FLUSH LOGS');
    const rows = JSON.parse(
      `[${(
        await sql(`SELECT ${KIND} AS kind, count() AS queries,
            round(sum(${profileEvent('UserTimeMicroseconds')} + ${profileEvent('SystemTimeMicroseconds')}) / 1000) AS cpu_ms,
            sum(read_rows) AS read_rows, sum(${profileEvent('SelectedParts')}) AS parts, sum(${profileEvent('SelectedMarks')}) AS marks,
            round(sum(${profileEvent('IOBufferAllocBytes')}) / 1e6) AS buffers_mb
          FROM system.query_log WHERE type = 2 AND event_time >= toDateTime('${since}') AND kind != 'other'
          GROUP BY kind ORDER BY cpu_ms DESC FORMAT JSONEachRow`)
      )
        .trim()
        .split('\n')
        .filter((l) => l !== '')
        .join(',')}]`,
    );
    console.log(
      `round ${round}: ${fmt(r.rate)} events/s visible, ${fmt(r.answeredRate)} answered; ClickHouse used ${fmt(cpu)} s of CPU (its process, /proc), of which its queries:`,
    );
    for (const q of rows) {
      console.log(
        `  ${q.kind.padEnd(26)} ${String(q.queries).padStart(4)} queries, ${String(q.cpu_ms).padStart(5)} ms of CPU, ${fmt(Number(q.read_rows), 0)} rows read, ${q.parts} parts and ${q.marks} marks selected, ${q.buffers_mb} MB of read buffers allocated`,
      );
    }
    const queried = rows.reduce((a, q) => a + Number(q.cpu_ms), 0) / 1000;
    console.log(`  the rest (merges, HTTP, logging): ${fmt(cpu - queried)} s`);
  }
} finally {
  await cluster.close();
  await ch.stop();
}
