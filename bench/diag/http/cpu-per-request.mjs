/**
 * CPU time per request of the embedded service and of the bare fastify baseline, from
 * /proc/<pid>/stat (user and system time) around an autocannon run of a fixed number of requests:
 * a figure that depends much less on what else the machine is doing than requests per second.
 * The same service start, baseline, documents and ids as `npm run bench`. After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/http/cpu-per-request.mjs [get-trip|get-trip-redis|get-event|put-event] [requests=100000] [rounds=2]
 *
 * get-event: GETs of location events by id (telemetry, in the event log) in a scattered order, after
 * OTM_DIAG_EVENTS (default 100,000) were stored by POST /api/v5/bulk/events in batches of 5,000;
 * the baseline answers one of them.
 *
 * get-trip-redis: the same GET with the entity store on Redis (OTM_ENTITY_STORE=redis, as the
 * distributed query service reads it), database 9 of the Redis at 127.0.0.1:6379 or
 * OTM_DIAG_REDIS_URL; the database is emptied before and after. OTM_REDIS_CACHE=off (passed on to
 * the service) measures it without its client-side cache, so that every GET asks Redis.
 *
 * OTM_DIAG_RANDOM_IDS=1 sends random v4 UUIDs as event ids (a fleet's own) instead of the bench's
 * sequential ones. OTM_CHILD_NODE_OPTIONS becomes the service's NODE_OPTIONS (test/process.ts), e.g.
 * --perf-basic-prof for `perf record`.
 * Also prints the service's memory at the end. Loopback only.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { startServe, stop } from '../../../test/process.ts';
import { bulkEndToEnd } from '../../lib/bulk.mjs';
import { TRIP, TRIP_BODY, locationEvent } from '../../lib/documents.mjs';
import { cpuSeconds } from '../../lib/proc.mjs';
import { idMaker, memoryOf, mkTemp, request, startBaseline } from '../../lib/util.mjs';

const [scenario = 'get-trip', requestsArg = '100000', roundsArg = '2'] = process.argv.slice(2);
if (!['get-trip', 'get-trip-redis', 'get-event', 'put-event'].includes(scenario))
  throw new Error(`scenario: get-trip, get-trip-redis, get-event or put-event, got ${scenario}`);
const REQUESTS = Number(requestsArg);
const ROUNDS = Number(roundsArg);
const TOKEN = 'cpu-diag-token-1';
const cpuSplit = (pid) => cpuSeconds(`/proc/${pid}/stat`);

const dataDir = mkTemp('otm-cpu-diag-');
const redisUrl = process.env.OTM_DIAG_REDIS_URL ?? 'redis://127.0.0.1:6379/9';
const flushRedis = async () => {
  const redis = new Redis(redisUrl);
  await redis.flushdb();
  redis.disconnect();
};
if (scenario === 'get-trip-redis') await flushRedis();
const svc = await startServe({
  OTM_DATA_DIR: dataDir,
  OTM_TOKENS: `${TOKEN}:t1:read+write`,
  ...(scenario === 'get-trip-redis'
    ? { OTM_ENTITY_STORE: 'redis', REDIS_URL: redisUrl, OTM_REDIS_CACHE: process.env.OTM_REDIS_CACHE ?? 'on' }
    : {}),
});
const base = await startBaseline();
try {
  const headers = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
  let spec;
  if (scenario.startsWith('get-trip')) {
    const put = await request(`${svc.url}/api/v5/trips`, { method: 'PUT', token: TOKEN, body: TRIP_BODY });
    if (put.status !== 200) throw new Error(`PUT trip answered ${put.status}`);
    const got = await request(`${svc.url}/api/v5/trips/${TRIP.id}`, { token: TOKEN });
    await base.setGetBody(got.body);
    spec = { method: 'GET', path: `/api/v5/trips/${TRIP.id}`, headers };
  } else if (scenario === 'get-event') {
    const stored = Number(process.env.OTM_DIAG_EVENTS ?? 100_000);
    const { ids, invisible } = await bulkEndToEnd({
      writeUrl: svc.url,
      readUrl: svc.url,
      token: TOKEN,
      n: stored,
      batch: 5_000,
      concurrency: 2,
      visibleTimeoutS: 60,
    });
    if (invisible) throw new Error(`${invisible} stored events not visible`);
    const got = await request(`${svc.url}/api/v5/events/${ids.at(0)}`, { token: TOKEN });
    if (got.status !== 200) throw new Error(`GET event answered ${got.status}`);
    await base.setGetBody(got.body);
    // A scattered order (a stride prime to the count), so that reads do not walk the log in order.
    let i = 0;
    const stride = 7_919;
    spec = {
      method: 'GET',
      path: `/api/v5/events/${ids.at(0)}`,
      headers,
      setupRequest: (r) => ({ ...r, path: `/api/v5/events/${ids.at((i++ * stride) % stored)}` }),
    };
  } else {
    const ids = idMaker();
    const nextId = process.env.OTM_DIAG_RANDOM_IDS === '1' ? randomUUID : ids.next;
    let i = 0;
    spec = { method: 'PUT', path: '/api/v5/events', headers, setupRequest: (r) => ({ ...r, body: locationEvent(nextId(), i++) }) };
  }
  const run = async (name, url, pid, amount) => {
    const before = cpuSplit(pid);
    const res = await autocannon({ url, connections: 50, amount, requests: [spec] });
    const after = cpuSplit(pid);
    if (res.non2xx || res.errors) throw new Error(`${name}: ${res.non2xx} non-2xx answers, ${res.errors} errors`);
    const n = res.requests.total;
    const user = after.user - before.user;
    const sys = after.sys - before.sys;
    const us = (s) => ((s * 1e6) / n).toFixed(1);
    return {
      perRequest: (user + sys) / n,
      line: `${name}: user ${us(user)} µs, system ${us(sys)} µs, total ${us(user + sys)} µs per request`,
    };
  };
  await run('warm-up', base.url, base.child.pid, 20_000);
  await run('warm-up', svc.url, svc.child.pid, 20_000);
  console.log(`${scenario}: ${REQUESTS} requests, 50 connections, ${ROUNDS} rounds`);
  for (let r = 1; r <= ROUNDS; r++) {
    const b = await run('baseline', base.url, base.child.pid, REQUESTS);
    const s = await run('service ', svc.url, svc.child.pid, REQUESTS);
    console.log(`  round ${r}\n    ${b.line}\n    ${s.line}\n    baseline / service CPU: ${(b.perRequest / s.perRequest).toFixed(2)}`);
  }
  const m = memoryOf(svc.child.pid);
  const mb = (x) => x.toFixed(0);
  console.log(
    `service memory: VmHWM ${mb(m.hwmMB)} MB, RSS ${mb(m.rssMB)} MB (anonymous ${mb(m.anonMB)} MB, file-backed ${mb(m.fileMB)} MB)`,
  );
} finally {
  await base.stop();
  await stop(svc);
  fs.rmSync(dataDir, { recursive: true, force: true });
  if (scenario === 'get-trip-redis') await flushRedis();
}
