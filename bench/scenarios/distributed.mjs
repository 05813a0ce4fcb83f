/**
 * Group `distributed`: `otm ingress`, `otm worker` and `otm query` on the test Kafka (Apache
 * Kafka, one KRaft node), Redis and the tests' ClickHouse (chdb), all on this machine's cores, against the fastify echo: PUT of
 * location events to the ingress (answered after Kafka acks=-1) and GET of a trip from the query
 * process, each on a fresh cluster. The load goes straight to the ingress or query process.
 *
 * Both record every process's CPU in the run's capacity table. The PUT's entry runs from the start
 * of the timed run until every accepted event is in ClickHouse, so that the worker's and
 * ClickHouse's work on the backlog the PUT run leaves counts too (the row's note counts the timed
 * run only): the ingress and the load generator per PUT of the timed run, the other processes per
 * event written to ClickHouse in that time.
 */
import { createClient, ClickHouseLogLevel } from '@clickhouse/client';
import { locationBodies, TRIP, TRIP_BODY } from '../lib/documents.mjs';
import { echoOf, pair, recordCpu, recordPairCpu, RETIRED, throughputRow } from '../lib/measure.mjs';
import { clusterPids, cpuPerUnit } from '../lib/proc.mjs';
import { DIST_TOKEN, TENANT, startDistributed } from '../lib/services.mjs';
import { fmt, log, request, sleep } from '../lib/util.mjs';

export async function distributed(ctx) {
  const { cfg, base } = ctx;
  log('\n== distributed: otm ingress + otm worker + otm query on Kafka (Apache Kafka, one KRaft node), Redis, ClickHouse (chdb)');
  // A fresh cluster for each part, so that one part's backlog (events not yet in ClickHouse) does
  // not slow the next.
  let { cluster, ingress, query } = await startDistributed(ctx);
  try {
    const loc = locationBodies();
    const rows = eventRows(cluster, loc.ids.prefix);
    try {
      let rowsBefore = 0;
      const b = await pair(
        ctx,
        'PUT event',
        ingress,
        DIST_TOKEN,
        { method: 'PUT', path: '/api/v5/events', bodyFn: loc.next },
        clusterPids(cluster),
        {
          beforeTimed: async () => {
            rowsBefore = await rows.count();
          },
        },
      );
      ctx.maxPutRate = b.service.rps;
      const cpu = cpuPerUnit(b.cpu, b.service.total, 'a PUT', cfg.duration);
      log(`    ${cpu}`);
      const scenario = `PUT locationUpdateEvent, ${cfg.connections} conn, distributed ingress (answered after Kafka acks=-1)`;
      throughputRow(
        ctx,
        scenario,
        RETIRED,
        b,
        `; straight to the ingress process; workers, the Kafka broker, Redis, ClickHouse on the same 2 cores; ${cpu} (the backlog the workers and ClickHouse work off after the run not counted)`,
      );
      await recordPutCpu(ctx, scenario, b, rows, rowsBefore);
    } finally {
      await rows.close();
    }
    // The PUT run leaves the telemetry worker and ClickHouse a backlog; GETs measured meanwhile
    // would share the cores with it.
    await cluster.close();
    ({ cluster, ingress, query } = await startDistributed(ctx));
    const put = await request(`${ingress}/api/v5/trips`, { method: 'PUT', token: DIST_TOKEN, body: TRIP_BODY });
    if (put.status !== 200) throw new Error(`PUT trip answered ${put.status}`);
    let got;
    const until = Date.now() + 60_000;
    while ((got = await request(`${query}/api/v5/trips/${TRIP.id}`, { token: DIST_TOKEN })).status !== 200) {
      if (Date.now() > until) throw new Error('trip not visible within 60 s');
      await sleep(50);
    }
    await base.setGetBody(got.body);
    const g = await pair(ctx, 'GET trip', query, DIST_TOKEN, { method: 'GET', path: `/api/v5/trips/${TRIP.id}` }, clusterPids(cluster));
    const getScenario = `GET trip by id (${got.body.length} B answer), distributed query (Redis)`;
    throughputRow(ctx, getScenario, '>= 0.4', g, '; straight to the query process');
    recordPairCpu(ctx, getScenario, g, { op: 'a GET' });
  } finally {
    await cluster.close();
  }
}

/** The count of this run's rows in otm_events (event ids with `prefix`). */
function eventRows(cluster, prefix) {
  const ch = createClient({ url: cluster.clickhouse.url, log: { level: ClickHouseLogLevel.OFF } });
  return {
    async count() {
      const rs = await ch.query({
        query: `SELECT count() AS c FROM otm.otm_events WHERE tenant = '${TENANT}' AND event_id LIKE '${prefix}-%'`,
        format: 'JSONEachRow',
      });
      return Number((await rs.json())[0].c);
    },
    close: () => ch.close(),
  };
}

/**
 * The PUT scenario's CPU by process from the start of its timed run until every event the ingress
 * accepted (warm-up and timed run) is a row of otm_events: the ingress and the load generator per
 * PUT of the timed run, the others per row written since it started (`rowsBefore` were written
 * before). The pair's echo becomes the run's reference.
 */
async function recordPutCpu(ctx, scenario, b, rows, rowsBefore) {
  const { cfg } = ctx;
  const accepted = (b.warm.service?.ok ?? 0) + b.service.ok;
  const until = Date.now() + cfg.visibleTimeoutS * 1000;
  let rowsNow;
  while ((rowsNow = await rows.count()) < accepted && Date.now() < until) await sleep(1_000);
  const spent = b.serviceMeter.spent();
  const seconds = (performance.now() - b.serviceT0) / 1000;
  const written = rowsNow - rowsBefore;
  if (!(written > 0)) {
    log('    no event reached ClickHouse during the run: no CPU entry');
    return;
  }
  const window =
    rowsNow >= accepted
      ? 'from the timed run until every accepted event was in ClickHouse (ingress and load generator per PUT of the timed run, the others per event written to ClickHouse meanwhile)'
      : `from the timed run until ${cfg.visibleTimeoutS} s after it, when only ${fmt(rowsNow, 0)} of ${fmt(accepted, 0)} accepted events were in ClickHouse`;
  const echo = echoOf(b);
  if (echo) ctx.echo = { ...echo, of: `a PUT of one location event, measured with "${scenario}"` };
  const e = recordCpu(ctx, {
    scenario,
    op: 'an event',
    ops: written,
    opsBy: { ingress: b.service.total, 'load generator': b.service.total },
    seconds,
    spent,
    window,
    locationEvents: true,
    echo: echo && { ...echo, of: 'the same requests' },
  });
  log(
    `    CPU µs an event by process, ${window}: ${e.processes
      .filter((p) => p.us >= 0.5)
      .map((p) => `${p.name} ${Math.round(p.us)}`)
      .join(', ')}; together ${Math.round(e.together.us)} µs`,
  );
}
