/**
 * What a GET of an event by id costs ClickHouse: the event store's own `get` on a fresh test
 * ClickHouse (test/infra/services.ts) holding N location events of 64 vehicles (the bench's
 * documents, written by the store in batches of 10,000), measured as the server's CPU (user and
 * system time from /proc) per GET:
 * - lone GETs, one after the other;
 * - 32 GETs at once, as the bench's visibility probes send them, with the store answering each
 *   with its own query (`getBatch: 1`) and with the store's default (the GETs that arrive in one
 *   event-loop turn share one query).
 * Alternated rounds; prints the medians and the ratio of the shared query to the lone queries.
 * OTM_DIAG_GRANULARITY=8192 creates both tables with that index_granularity instead of the
 * store's (1,024 and 256), e.g. ClickHouse's default, as tables made by earlier versions of the store have.
 * After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/clickhouse/clickhouse-get.mjs [events=100000] [rounds=3]
 *
 * Loopback only.
 */
import { createClient, ClickHouseLogLevel } from '@clickhouse/client';
import { startClickHouse } from '../../../test/infra/services.ts';
import { ClickHouseEventStore, eventStoreDdl } from '../../../packages/distributed/dist/index.js';
import { locationBodies, writeLocationEvents } from '../../lib/documents.mjs';
import { cpuSeconds } from '../../lib/proc.mjs';
import { fmt, median } from '../../lib/util.mjs';

const EVENTS = Number(process.argv[2] ?? 100_000);
const ROUNDS = Number(process.argv[3] ?? 3);
const GETS = 320; // the bench's distributed bulk probes: 5 batches x 64 vehicles

const ch = await startClickHouse();
if (ch.pid === undefined) throw new Error('this diagnostic starts its own ClickHouse: unset CLICKHOUSE_URL');
const cpu = () => {
  const { user, sys } = cpuSeconds(`/proc/${ch.pid}/stat`);
  return user + sys;
};
const alone = new ClickHouseEventStore({ url: ch.url, database: 'otm_get_diag', getBatch: 1 });
const shared = new ClickHouseEventStore({ url: ch.url, database: 'otm_get_diag' });
try {
  const granularity = process.env.OTM_DIAG_GRANULARITY;
  if (granularity === undefined) await alone.migrate();
  else {
    const client = createClient({ url: ch.url, log: { level: ClickHouseLogLevel.OFF } });
    for (const sql of eventStoreDdl('otm_get_diag')) {
      await client.command({
        query: sql.replace(/SETTINGS index_granularity = \d+/, `SETTINGS index_granularity = ${Number(granularity)}`),
      });
    }
    await client.close();
  }
  const docs = locationBodies();
  await writeLocationEvents(alone, docs, EVENTS);
  const parts = await alone.query(
    "SELECT table, count() AS parts FROM system.parts WHERE database = 'otm_get_diag' AND active GROUP BY table ORDER BY table",
  );
  console.log(
    `${fmt(EVENTS, 0)} events stored (index_granularity ${granularity ?? 'of the store'}); active parts: ${parts.map((p) => `${p.table} ${p.parts}`).join(', ')}`,
  );
  const someIds = () => Array.from({ length: GETS }, () => docs.ids.at(Math.floor(Math.random() * EVENTS)));
  /** ClickHouse CPU ms and wall ms a GET. */
  const measure = async (store, concurrency) => {
    const ids = someIds();
    const c0 = cpu();
    const t0 = performance.now();
    for (let i = 0; i < ids.length; i += concurrency) {
      const got = await Promise.all(ids.slice(i, i + concurrency).map((id) => store.get('acme', 'events', id)));
      if (got.some((d) => d === undefined)) throw new Error('a stored event was not found');
    }
    return { cpu: ((cpu() - c0) * 1000) / ids.length, wall: (performance.now() - t0) / ids.length };
  };
  const ways = {
    'lone GETs, one after the other': () => measure(alone, 1),
    '32 at once, a query each (getBatch 1)': () => measure(alone, 32),
    '32 at once, sharing a query (default)': () => measure(shared, 32),
  };
  await measure(shared, 32); // warm-up
  const results = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [name, run] of Object.entries(ways)) {
      const r = await run();
      results[name].push(r);
      console.log(`round ${round}: ${name}: ClickHouse CPU ${fmt(r.cpu)} ms a GET, ${fmt(r.wall)} ms a GET of wall time`);
    }
  }
  console.log('\nmedians (ClickHouse CPU a GET, ratio to lone GETs):');
  const lone = median(results['lone GETs, one after the other'].map((r) => r.cpu));
  for (const [name, rs] of Object.entries(results)) {
    const m = median(rs.map((r) => r.cpu));
    console.log(`  ${name}: ${fmt(m)} ms (${fmt(m / lone)})`);
  }
} finally {
  await alone.dropDatabase().catch(() => {});
  await alone.close();
  await shared.close();
  await ch.stop();
}
