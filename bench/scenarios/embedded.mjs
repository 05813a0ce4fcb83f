/**
 * Group `embedded`: `otm serve` (in-process bus, event log and LMDB) against the fastify echo:
 * PUT of location events, PUT of a trip with inline entities, GET of that trip, and the service's
 * peak memory after the PUTs. Each pair also records the service's CPU a request in the run's
 * capacity table. Under `--profile` only the chosen scenario runs, with the service under
 * `--cpu-prof`, and the profile is summarised.
 */
import fs from 'node:fs';
import path from 'node:path';
import { cpuPerUnit } from '../lib/proc.mjs';
import { locationBodies, locationEvent, TRIP, TRIP_BODY } from '../lib/documents.mjs';
import { pair, recordPairCpu, throughputRow, bulkEndToEnd } from '../lib/measure.mjs';
import { summarise, printSummary } from '../lib/profile-top.mjs';
import { EMB_TOKEN, startEmbedded } from '../lib/services.mjs';
import { REPO, fmt, log, mappedMB, memoryOf, request, sampleMemory } from '../lib/util.mjs';

export async function embedded(ctx) {
  const { cfg, base, profile } = ctx;
  log('\n== embedded: otm serve (in-process bus, LMDB)');
  const profDir = profile ? path.join(ctx.resultsDir, 'profiles', ctx.stamp) : undefined;
  const emb = await startEmbedded(ctx, {}, profDir);
  const runs = (name) => !profile || profile === name;
  const memory = profile ? undefined : sampleMemory(emb.svc.child.pid);
  const pids = { service: emb.svc.child.pid };
  try {
    if (runs('put-event')) {
      const loc = locationBodies();
      const b = await pair(ctx, 'PUT event', emb.url, EMB_TOKEN, { method: 'PUT', path: '/api/v5/events', bodyFn: loc.next }, pids);
      const cpu = cpuPerUnit(b.cpu, b.service.total, 'a PUT', cfg.duration);
      log(`    ${cpu}`);
      const scenario = `PUT locationUpdateEvent (${locationEvent(loc.ids.at(0), 0).length} B), ${cfg.connections} conn, embedded`;
      throughputRow(ctx, scenario, '>= 0.5', b, `; a new id per request; ${cpu}`);
      recordPairCpu(ctx, scenario, b, { op: 'a PUT', locationEvents: true });
    }
    if (runs('put-trip')) {
      const t = await pair(ctx, 'PUT trip', emb.url, EMB_TOKEN, { method: 'PUT', path: '/api/v5/trips', body: TRIP_BODY }, pids);
      const scenario = `PUT trip with inline entities (${TRIP_BODY.length} B), embedded`;
      throughputRow(ctx, scenario, '>= 0.25', t, '; the same trip id replaced each time');
      recordPairCpu(ctx, scenario, t, { op: 'a PUT' });
    }
    if (memory) memoryRow(ctx, emb, memory);
    if (runs('get-trip')) {
      const put = await request(`${emb.url}/api/v5/trips`, { method: 'PUT', token: EMB_TOKEN, body: TRIP_BODY });
      if (put.status !== 200) throw new Error(`PUT trip answered ${put.status}`);
      const got = await request(`${emb.url}/api/v5/trips/${TRIP.id}`, { token: EMB_TOKEN });
      if (got.status !== 200) throw new Error(`GET trip answered ${got.status}`);
      await base.setGetBody(got.body);
      const g = await pair(ctx, 'GET trip', emb.url, EMB_TOKEN, { method: 'GET', path: `/api/v5/trips/${TRIP.id}` }, pids);
      const scenario = `GET trip by id (${got.body.length} B answer), embedded`;
      throughputRow(ctx, scenario, '>= 0.6', g);
      recordPairCpu(ctx, scenario, g, { op: 'a GET' });
    }
    if (profile === 'bulk') {
      const r = await bulkEndToEnd(ctx, {
        writeUrl: emb.url,
        readUrl: emb.url,
        token: EMB_TOKEN,
        n: cfg.bulkEvents,
        batch: cfg.bulkBatchEmbedded,
        concurrency: cfg.bulkConcurrency,
      });
      log(`    bulk: ${fmt(r.rate)} events/s visible, answered at ${fmt(r.answeredRate)} events/s`);
    }
    if (profile) {
      await emb.stop();
      const file = fs
        .readdirSync(profDir)
        .filter((f) => f.endsWith('.cpuprofile'))
        .map((f) => path.join(profDir, f))[0];
      log(`\n== profile of the embedded service during the ${profile} scenario: ${path.relative(REPO, file)}\n`);
      const s = summarise(file, 15);
      printSummary(s);
      fs.writeFileSync(path.join(profDir, 'summary.json'), JSON.stringify(s, null, 2));
    }
  } finally {
    memory?.stop();
    await emb.stop();
  }
}

/**
 * The service's peak RSS after the PUT scenarios. VmHWM counts the pages of the LMDB file that
 * lmdb maps into the process (page cache the kernel can take back), so it grows with the data
 * written; the note splits it into the mapped file and the service's own (anonymous) memory.
 */
function memoryRow(ctx, emb, memory) {
  const { cfg } = ctx;
  const peaks = memory.stop();
  const mem = memoryOf(emb.svc.child.pid);
  const dbFile = path.join(emb.dataDir, 'store', 'otm.mdb');
  const dbMB = fs.existsSync(dbFile) ? fs.statSync(dbFile).size / 1024 / 1024 : NaN;
  const logDir = path.join(emb.dataDir, 'events');
  const logMB = fs.existsSync(logDir)
    ? fs.readdirSync(logDir).reduce((a, f) => a + fs.statSync(path.join(logDir, f)).size, 0) / 1024 / 1024
    : NaN;
  ctx.addRow({
    scenario: 'peak RSS (VmHWM) of the embedded service after the PUT scenarios',
    figure: mem.hwmMB,
    unit: 'MB',
    target: '<= 300 MB',
    pass: mem.hwmMB <= 300,
    note:
      // The mapped part grows with the events written: shorter PUT runs write less.
      (cfg.duration < 20
        ? `REDUCED: PUT runs of ${cfg.duration} s instead of 20 s write less data, and less of the database is mapped; `
        : '') +
      `RSS now ${fmt(mem.rssMB)} MB, of which the mapped LMDB file ${fmt(mappedMB(emb.svc.child.pid, dbFile))} MB (database ${fmt(dbMB)} MB on disk; the event log, read with pread and not mapped, ${fmt(logMB)} MB); ` +
      `peak anonymous memory (heap, buffers; RssAnon sampled every 100 ms) ${fmt(peaks.peakAnonMB)} MB, peak file-backed ${fmt(peaks.peakFileMB)} MB`,
    memory: { ...mem, ...peaks, dbMB, logMB },
  });
}
