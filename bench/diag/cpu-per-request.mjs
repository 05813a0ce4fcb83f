/**
 * CPU time per request of the embedded service and of the bare fastify baseline, from
 * /proc/<pid>/stat (user and system time) around an autocannon run of a fixed number of requests:
 * a figure that depends much less on what else the machine is doing than requests per second.
 * After `npm run build`:
 *
 *   node bench/diag/cpu-per-request.mjs [get-trip|put-event] [requests=100000] [rounds=2]
 *
 * PUT ids are sequential within a run like the bench's; OTM_DIAG_RANDOM_IDS=1 sends random v4
 * UUIDs instead (as a fleet's own ids would be). Also prints the service's memory at the end
 * (VmHWM, anonymous, file-backed). Loopback only.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { idMaker } from '../lib/util.mjs';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const [scenario = 'get-trip', requestsArg = '100000', roundsArg = '2'] = process.argv.slice(2);
if (!['get-trip', 'put-event'].includes(scenario)) throw new Error(`scenario: get-trip or put-event, got ${scenario}`);
const REQUESTS = Number(requestsArg);
const ROUNDS = Number(roundsArg);
const TOKEN = 'cpu-diag-token-1';
const HEADERS = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const TICKS = 100; // USER_HZ

function cpuSeconds(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return { user: Number(f[11]) / TICKS, sys: Number(f[12]) / TICKS };
}

function start(args, env) {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited with ${code}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve({ child, url: m[1] });
    });
  });
}

// Ids as the bench makes them (sequential within a run), or random v4 UUIDs with OTM_DIAG_RANDOM_IDS=1.
const ids = idMaker();
const nextId = process.env.OTM_DIAG_RANDOM_IDS === '1' ? randomUUID : ids.next;

function locationEvent(i) {
  return JSON.stringify({
    eventType: 'locationUpdateEvent',
    id: nextId(),
    lifecycle: 'actual',
    creationDate: '2026-03-01T06:41:12.345Z',
    geoReference: { type: 'latLonPointGeoReference', lat: 52 + (i % 1000) / 10000, lon: 5.4 + (i % 977) / 10000, speed: { value: 50 + (i % 30), unit: 'km/h' } },
    vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: '6b3e1f40-0c1a-4f7e-9a51-000000000100' },
  });
}

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-cpu-diag-'));
const svc = await start([path.join(REPO, 'services/otm/bin/otm.js'), 'serve'], { OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:t1:read+write`, PORT: '0', LOG_LEVEL: 'warn' });
const base = await start([path.join(REPO, 'bench/lib/baseline-server.mjs')], {});
try {
  let request;
  if (scenario === 'get-trip') {
    const trip = fs.readFileSync(path.join(REPO, 'packages/model/test/fixtures/typical-trip.json'), 'utf8');
    const id = JSON.parse(trip).id;
    const put = await fetch(`${svc.url}/api/v5/trips`, { method: 'PUT', headers: HEADERS, body: trip });
    if (put.status !== 200) throw new Error(`PUT trip answered ${put.status}`);
    const body = await (await fetch(`${svc.url}/api/v5/trips/${id}`, { headers: HEADERS })).text();
    await fetch(`${base.url}/__get-body`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body });
    request = { method: 'GET', path: `/api/v5/trips/${id}`, headers: HEADERS };
  } else {
    let i = 0;
    request = { method: 'PUT', path: '/api/v5/events', headers: HEADERS, setupRequest: (r) => ({ ...r, body: locationEvent(i++) }) };
  }
  const run = async (name, target, pid, amount) => {
    const before = cpuSeconds(pid);
    const res = await autocannon({ url: target, connections: 50, amount, requests: [request] });
    const after = cpuSeconds(pid);
    const n = res.requests.total;
    const us = (s) => ((s * 1e6) / n).toFixed(1);
    if (res.non2xx || res.errors) throw new Error(`${name}: ${res.non2xx} non-2xx answers, ${res.errors} errors`);
    return { name, user: after.user - before.user, sys: after.sys - before.sys, n, line: `${name}: user ${us(after.user - before.user)} µs, system ${us(after.sys - before.sys)} µs, total ${us(after.user - before.user + after.sys - before.sys)} µs per request` };
  };
  await run('warm-up', base.url, base.child.pid, 20_000);
  await run('warm-up', svc.url, svc.child.pid, 20_000);
  console.log(`${scenario}: ${REQUESTS} requests, 50 connections, ${ROUNDS} rounds`);
  for (let r = 1; r <= ROUNDS; r++) {
    const b = await run('baseline', base.url, base.child.pid, REQUESTS);
    const s = await run('service ', svc.url, svc.child.pid, REQUESTS);
    console.log(`  round ${r}\n    ${b.line}\n    ${s.line}\n    baseline / service CPU: ${((b.user + b.sys) / b.n / ((s.user + s.sys) / s.n)).toFixed(2)}`);
  }
  const status = fs.readFileSync(`/proc/${svc.child.pid}/status`, 'utf8');
  const mb = (k) => (Number(new RegExp(`${k}:\\s+(\\d+)`).exec(status)?.[1]) / 1024).toFixed(0);
  console.log(`service memory: VmHWM ${mb('VmHWM')} MB, RSS ${mb('VmRSS')} MB (anonymous ${mb('RssAnon')} MB, file-backed ${mb('RssFile')} MB)`);
} finally {
  svc.child.removeAllListeners('exit');
  base.child.removeAllListeners('exit');
  svc.child.kill('SIGTERM');
  base.child.kill('SIGTERM');
  await new Promise((r) => svc.child.once('exit', r));
  fs.rmSync(dataDir, { recursive: true, force: true });
}
