/**
 * Group `bulk`: bulk ingest end to end (POST /api/v5/bulk/events until every batch is visible by
 * GET), in both deployments, against the raw store without the service: `bulkEmbedded` against
 * raw LMDB puts and the service's own event store alone, `bulkDistributed` against raw ClickHouse
 * inserts of the service's own rows. Each records every process's CPU an event in the run's
 * capacity table, from the first request until all were visible.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { createClient, ClickHouseLogLevel } from '@clickhouse/client';
import { open as openLmdb } from 'lmdb';
import { EVENT_COLUMNS, tsvLine } from '../../packages/distributed/dist/index.js';
import { openEmbeddedStores } from '../../packages/embedded/dist/index.js';
import { recordCpu, warmBulkEndToEnd } from '../lib/measure.mjs';
import { clusterPids, cpuPerUnit } from '../lib/proc.mjs';
import { DIST_TOKEN, EMB_TOKEN, TENANT, startDistributed, startEmbedded } from '../lib/services.mjs';
import { fmt, log, mkTemp } from '../lib/util.mjs';

export async function bulkEmbedded(ctx) {
  const { cfg } = ctx;
  log('\n== bulk ingest end to end, embedded');
  await ctx.echoReference();
  const emb = await startEmbedded(ctx);
  try {
    const r = await warmBulkEndToEnd(
      ctx,
      {
        writeUrl: emb.url,
        readUrl: emb.url,
        token: EMB_TOKEN,
        n: cfg.bulkEvents,
        batch: cfg.bulkBatchEmbedded,
        concurrency: cfg.bulkConcurrency,
      },
      { service: emb.svc.child.pid },
    );
    if (r.invisible) throw new Error(`${r.invisible} of ${r.probeCount} probe events not visible after ${cfg.visibleTimeoutS} s`);
    const cpu = cpuPerUnit(r.cpu, cfg.bulkEvents, 'an event', r.seconds);
    log(`    ${cpu}`);
    // The raw rate moves by up to 2× from one run to the next on these VMs' disks (each batch
    // waits for its flush): the best of three fresh runs is the baseline, the stricter choice.
    // Two raw stores, the faster counting: plain LMDB puts of the documents, and the service's
    // event store (log and index) on its own.
    const raws = [];
    const logs = [];
    for (let i = 0; i < 3; i++) raws.push(await rawLmdb(r.batches, cfg.bulkConcurrency));
    for (let i = 0; i < 3; i++) logs.push(await rawEventStore(r.batches, cfg.bulkConcurrency));
    const raw = Math.max(...raws, ...logs);
    const scenario = `bulk ingest ${fmt(cfg.bulkEvents, 0)} location events → visible by GET, embedded (batches of ${fmt(cfg.bulkBatchEmbedded, 0)})`;
    ctx.addRow({
      scenario,
      figure: r.rate,
      unit: 'events/s',
      baseline: raw,
      baselineUnit: 'puts/s',
      status: 'retired: see capacity',
      note:
        `baseline: the faster of raw LMDB puts of the same JSON (same batches, committed and flushed: ${raws.map((x) => fmt(x)).join(', ')} puts/s) ` +
        `and the service's event store alone (log and index, same batches: ${logs.map((x) => fmt(x)).join(', ')} events/s), best of 3 runs each; answered at ${fmt(r.answeredRate)} events/s` +
        (cfg.bulkWarmupEvents > 0
          ? `; after a warm-up of ${fmt(cfg.bulkWarmupEvents, 0)} events in batches of ${fmt(Math.round(cfg.bulkBatchEmbedded / 10), 0)} on the same service`
          : '') +
        `; ${cpu} (the bodies sent, the answers and the probe GETs)`,
      rawLmdb: raws,
      rawEventStore: logs,
    });
    recordCpu(ctx, {
      scenario,
      op: 'an event',
      ops: cfg.bulkEvents,
      seconds: r.seconds,
      spent: r.cpu,
      window: 'from the first request until all were visible (with the probe GETs)',
      locationEvents: true,
    });
  } finally {
    await emb.stop();
  }
}

export async function bulkDistributed(ctx) {
  const { cfg } = ctx;
  log('\n== bulk ingest end to end, distributed');
  await ctx.echoReference();
  const { cluster, ingress, query } = await startDistributed(ctx);
  try {
    const n = cfg.bulkEventsDistributed;
    const r = await warmBulkEndToEnd(
      ctx,
      { writeUrl: ingress, readUrl: query, token: DIST_TOKEN, n, batch: cfg.bulkBatchDistributed, concurrency: cfg.bulkConcurrency },
      clusterPids(cluster),
    );
    const cpu = cpuPerUnit(r.cpu, n, 'an event', r.seconds);
    log(`    ${cpu}`);
    const ch = createClient({ url: cluster.clickhouse.url, log: { level: ClickHouseLogLevel.OFF } });
    const inCh = Number(
      (
        await (
          await ch.query({
            query: `SELECT count() AS c FROM otm.otm_events WHERE tenant = '${TENANT}' AND event_id LIKE '${r.ids.prefix}-%'`,
            format: 'JSONEachRow',
          })
        ).json()
      )[0].c,
    );
    await ch.close();
    const raw = inCh > 0 ? await rawClickHouse(cluster.clickhouse.url, r.ids.prefix, inCh) : undefined;
    const rawNote = raw ? `, the faster of JSONEachRow (${fmt(raw.json)} rows/s) and TabSeparated (${fmt(raw.tabs)} rows/s)` : '';
    const scenario = `bulk ingest ${fmt(n, 0)} location events → visible by GET, distributed (batches of ${fmt(cfg.bulkBatchDistributed, 0)})`;
    ctx.addRow({
      scenario,
      figure: r.rate,
      unit: 'events/s',
      baseline: raw?.rate,
      baselineUnit: 'rows/s',
      status: 'retired: see capacity',
      ...(r.invisible ? { pass: false } : {}),
      note: `${r.invisible ? `UPPER BOUND: ${r.invisible} of ${r.probeCount} probe events still not visible after ${cfg.visibleTimeoutS} s (${fmt(inCh, 0)} of ${fmt(n, 0)} rows in otm_events); ` : ''}baseline: ${fmt(inCh, 0)} of the service's own otm_events rows re-inserted in batches of 10,000 into a copy of the table${rawNote}; answered at ${fmt(r.answeredRate)} events/s; visible = last event of every vehicle key of every batch found by GET; ${cpu} (the bodies sent, the answers and the probe GETs)${cfg.bulkWarmupEvents > 0 ? `; after a warm-up of ${fmt(cfg.bulkWarmupEvents, 0)} events in batches of ${fmt(Math.round(cfg.bulkBatchDistributed / 10), 0)}` : ''}`,
    });
    recordCpu(ctx, {
      scenario,
      op: 'an event',
      ops: n,
      seconds: r.seconds,
      spent: r.cpu,
      window: 'from the first request until all were visible (the query and Redis: the probe GETs)',
      locationEvents: true,
    });
  } finally {
    await cluster.close();
  }
}

/** Plain LMDB puts of the same documents, batches and concurrency, committed and flushed: puts/s. */
async function rawLmdb(batches, concurrency) {
  const dir = mkTemp('otm-bench-lmdb-');
  const root = openLmdb({ path: path.join(dir, 'otm.mdb'), maxDbs: 8, compression: false });
  const db = root.openDB({ name: 'telemetry', encoding: 'string' });
  try {
    const n = batches.reduce((a, b) => a + b.docs.length, 0);
    const t0 = performance.now();
    let next = 0;
    const worker = async () => {
      while (next < batches.length) {
        const b = batches[next++];
        // Plain puts, which lmdb's write thread applies: faster than puts in a transaction callback.
        const done = [];
        for (let i = 0; i < b.docs.length; i++) done.push(db.put(`${TENANT}|events|${b.keys[i]}|4`, b.docs[i]));
        await Promise.all(done);
        await root.flushed;
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return (n * 1000) / (performance.now() - t0);
  } finally {
    await root.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The service's own event store without the service: the same documents, batches and
 * concurrency handed straight to its `write` (appended to the log and synced, then indexed).
 */
async function rawEventStore(batches, concurrency) {
  const dir = mkTemp('otm-bench-events-');
  const stores = openEmbeddedStores(dir);
  try {
    const writes = batches.map((b) =>
      b.docs.map((json, i) => ({ op: 'put', tenant: TENANT, doc: { kind: 'events', key: b.keys[i], lifecycleRank: 4, json } })),
    );
    const n = batches.reduce((a, b) => a + b.docs.length, 0);
    const t0 = performance.now();
    let next = 0;
    const worker = async () => {
      while (next < writes.length) await stores.events.write(writes[next++]);
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return (n * 1000) / (performance.now() - t0);
  } finally {
    await stores.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The service's own `otm_events` rows of this run read back and inserted again, in batches of
 * 10,000, into a copy of the table, once as JSONEachRow and once as TabSeparated: rows/s of each
 * and the faster (`rate`).
 */
async function rawClickHouse(url, prefix, n) {
  const ch = createClient({ url, log: { level: ClickHouseLogLevel.OFF }, request_timeout: 600_000 });
  try {
    const rs = await ch.query({
      query: `SELECT * FROM otm.otm_events WHERE tenant = '${TENANT}' AND event_id LIKE '${prefix}-%' LIMIT ${n}`,
      format: 'JSONEachRow',
    });
    const rowsRead = await rs.json();
    if (rowsRead.length < n) throw new Error(`only ${rowsRead.length} of ${n} rows found in otm.otm_events`);
    await ch.command({ query: 'DROP TABLE IF EXISTS otm.bench_raw_events' });
    await ch.command({ query: 'CREATE TABLE otm.bench_raw_events AS otm.otm_events' });
    // Both formats the client and the service know; the faster one is the baseline. TabSeparated
    // text is made before the clock starts, as the client makes JSONEachRow of ready objects.
    const jsonBatches = [];
    for (let i = 0; i < rowsRead.length; i += 10_000) jsonBatches.push(rowsRead.slice(i, i + 10_000));
    const tsvBatches = jsonBatches.map((batch) => batch.map((r) => tsvLine(r, EVENT_COLUMNS)).join(''));
    const timed = async (insertBatch, batches) => {
      await ch.command({ query: 'TRUNCATE TABLE otm.bench_raw_events' });
      const t0 = performance.now();
      for (const b of batches) await insertBatch(b);
      return (rowsRead.length * 1000) / (performance.now() - t0);
    };
    const json = await timed((values) => ch.insert({ table: 'otm.bench_raw_events', values, format: 'JSONEachRow' }), jsonBatches);
    const tabs = await timed(async (text) => {
      const { stream } = await ch.exec({
        query: `INSERT INTO otm.bench_raw_events (${EVENT_COLUMNS.join(', ')}) FORMAT TabSeparated`,
        values: Readable.from([text]),
      });
      for await (const _ of stream); // the empty answer, read to the end
    }, tsvBatches);
    const stored = Number(
      (await (await ch.query({ query: 'SELECT count() AS c FROM otm.bench_raw_events', format: 'JSONEachRow' })).json())[0].c,
    );
    if (stored !== rowsRead.length) throw new Error(`the TabSeparated baseline stored ${stored} of ${rowsRead.length} rows`);
    await ch.command({ query: 'DROP TABLE IF EXISTS otm.bench_raw_events' });
    return { rate: Math.max(json, tabs), json, tabs };
  } finally {
    await ch.close();
  }
}
