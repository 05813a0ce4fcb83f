// Issue 42's fill, as an operator would run it: `otm serve` (a process of its own) with its data
// folder on a small tmpfs; bulk requests and PUTs of location events until the disk is full, then
// on: every refusal must be a 503 with Retry-After and insufficientStorage items, the process must
// live, /readyz must name the store. Then a restart on the still-full disk (it must start and serve
// every acknowledged event), the disk grown (`mount -o remount,size=`), /readyz green by itself, and
// every acknowledged event read back. N runs; one line each, and a summary. Needs root (mount);
// after `npm run build`.
//
//   node bench/diag/disk/fill.mjs [runs=20] [size=8m] [grown=16m]
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const OTM = path.join(ROOT, 'services/otm/bin/otm.js');
const [runs = 20, size = '8m', grown = '16m'] = [Number(process.argv[2] ?? 20), process.argv[3], process.argv[4]];
const TOKEN = 'fill-token-0123456789';
const AUTH = { authorization: `Bearer ${TOKEN}` };

const freePort = () =>
  new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** `otm serve` on `dataDir`: its process, base URL, and its output (stderr and stdout). */
async function serve(dataDir) {
  const port = await freePort();
  const child = spawn(process.execPath, [OTM, 'serve'], {
    env: { ...process.env, PORT: String(port), OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:acme:read+write`, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = `http://127.0.0.1:${port}`;
  // A start takes a few seconds; on a machine shared with other work, up to a minute or two.
  const started = Date.now();
  for (;;) {
    const up = await fetch(`${url}/healthz`).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (child.exitCode !== null)
      throw Object.assign(new Error(`otm serve exited at start (${child.exitCode}):\n${output.slice(-2000)}`), { crash: true });
    if (Date.now() - started > 180_000) {
      child.kill('SIGKILL');
      throw new Error(`otm serve did not answer /healthz within 180 s of its start:\n${output.slice(-2000)}`);
    }
    await sleep(100);
  }
  return { child, url, exited, output: () => output, stop: async () => (child.kill('SIGTERM'), await exited) };
}

let seq = 0;
const location = () => {
  const i = seq++;
  return {
    eventType: 'locationUpdateEvent',
    id: `5f${String(process.pid % 1e6).padStart(6, '0')}-0000-4000-8000-${String(i).padStart(12, '0')}`,
    lifecycle: 'actual',
    creationDate: new Date(Date.UTC(2026, 2, 1) + i * 1000).toISOString(),
    vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: `7c000000-0000-4000-8000-${String(i % 64).padStart(12, '0')}` },
    geoReference: { type: 'latLonPointGeoReference', lat: 52 + (i % 1000) / 1000, lon: 5 },
  };
};

/** Checks a refusal: 503, Retry-After, every error item insufficientStorage. Returns a problem, or undefined. */
function badRefusal(res, items) {
  if (res.status !== 503) return `status ${res.status}`;
  if (!(Number(res.headers.get('retry-after')) > 0)) return 'no Retry-After';
  const bad = items.find((e) => e.type !== 'insufficientStorage');
  return bad === undefined ? undefined : `item ${JSON.stringify(bad)}`;
}

async function run(n) {
  const mnt = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-fill-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', mnt]);
  const dataDir = path.join(mnt, 'data');
  const out = { run: n, acknowledged: 0, refused: 0, problems: [], crashed: false };
  const acknowledged = [];
  let svc;
  try {
    svc = await serve(dataDir);
    // Fill: until 20 requests in a row were refused, each refusal checked.
    let inARow = 0;
    for (let i = 0; i < 2000 && inARow < 20; i++) {
      if (svc.child.exitCode !== null) break;
      const docs = Array.from({ length: 200 }, location);
      const bulk = await fetch(`${svc.url}/api/v5/bulk/events`, {
        method: 'POST',
        headers: { ...AUTH, 'content-type': 'application/json' },
        body: JSON.stringify(docs),
      });
      const body = await bulk.json();
      let refusedNow = false;
      if (bulk.status === 200) acknowledged.push(...docs.map((d) => d.id));
      else {
        refusedNow = true;
        for (const item of body.items ?? []) if (item.id !== undefined) acknowledged.push(item.id);
        const problem = badRefusal(
          bulk,
          (body.items ?? []).flatMap((it) => it.errors ?? []),
        );
        if (problem) out.problems.push(`bulk: ${problem}`);
        out.refused += body.rejected ?? docs.length;
      }
      const doc = location();
      const put = await fetch(`${svc.url}/api/v5/events`, {
        method: 'PUT',
        headers: { ...AUTH, 'content-type': 'application/json' },
        body: JSON.stringify(doc),
      });
      const answer = await put.json();
      if (put.status === 200) acknowledged.push(doc.id);
      else {
        refusedNow = true;
        const problem = badRefusal(put, Array.isArray(answer) ? answer : []);
        if (problem) out.problems.push(`put: ${problem}`);
        out.refused++;
      }
      inARow = refusedNow ? inARow + 1 : 0;
    }
    if (svc.child.exitCode !== null) throw Object.assign(new Error('otm serve exited while filling'), { crash: true });
    const ready = await fetch(`${svc.url}/readyz`).then((r) => r.json().then((b) => ({ status: r.status, b })));
    if (ready.status !== 503 || !(ready.b.down ?? []).some((d) => /^store (lmdb|event-log)$/.test(d.name)))
      out.problems.push(`readyz ${ready.status} ${JSON.stringify(ready.b.down)}`);
    out.acknowledged = acknowledged.length;

    // A restart on the still-full disk: it starts, serves reads, refuses writes.
    const stopped = await svc.stop();
    if (stopped.code !== 0) out.problems.push(`stop: exit ${stopped.code} ${stopped.signal}`);
    svc = await serve(dataDir);
    const sample = acknowledged.filter((_, i) => i % 97 === 0);
    for (const id of sample) {
      const r = await fetch(`${svc.url}/api/v5/events/${id}`, { headers: AUTH });
      if (r.status !== 200) out.problems.push(`on the full disk: GET ${id} ${r.status}`);
    }
    out.startedFull = /cannot write in|has [\d.]+ (bytes|KiB|MiB) free/.test(svc.output()) ? 'said so' : 'silent';

    // Room: the disk grown; green by itself, then every acknowledged event read back.
    execFileSync('mount', ['-o', `remount,size=${grown}`, mnt]);
    let green = false;
    for (let i = 0; i < 100 && !green; i++) {
      green = (await fetch(`${svc.url}/readyz`)).status === 200;
      if (!green) await sleep(100);
    }
    if (!green) out.problems.push('readyz not green 10 s after the disk grew');
    let readable = 0;
    for (const id of acknowledged) if ((await fetch(`${svc.url}/api/v5/events/${id}`, { headers: AUTH })).status === 200) readable++;
    out.readable = readable;
    if (readable !== acknowledged.length) out.problems.push(`${acknowledged.length - readable} acknowledged events not readable`);
    if (svc.child.exitCode !== null) throw Object.assign(new Error('otm serve exited'), { crash: true });
  } catch (e) {
    out.crashed = e.crash === true || svc?.child.exitCode != null;
    out.problems.push(`${e.message}${svc ? `\n${svc.output().slice(-1500)}` : ''}`);
  } finally {
    if (svc?.child.exitCode === null) await svc.stop();
    execFileSync('umount', ['-l', mnt]);
    fs.rmSync(mnt, { recursive: true, force: true });
  }
  return out;
}

const results = [];
for (let n = 1; n <= runs; n++) {
  const r = await run(n);
  results.push(r);
  console.log(
    `run ${n}: ${r.crashed ? 'CRASHED' : 'alive'}; acknowledged ${r.acknowledged}, refused ${r.refused}, readable after ${r.readable ?? '-'}; ` +
      `start on the full disk ${r.startedFull ?? '-'}${r.problems.length ? `; problems: ${r.problems.join(' | ')}` : ''}`,
  );
}
const crashed = results.filter((r) => r.crashed).length;
const troubled = results.filter((r) => r.problems.length > 0).length;
console.log(
  `${runs} runs on a ${size} tmpfs: ${crashed} crashed, ${troubled} with problems; ` +
    `${results.reduce((a, r) => a + r.acknowledged, 0)} events acknowledged, ${results.reduce((a, r) => a + (r.readable ?? 0), 0)} read back`,
);
process.exitCode = crashed + troubled > 0 ? 1 : 0;
