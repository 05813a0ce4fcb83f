/** Helpers shared by the bench scripts: load runs, HTTP calls, ids, statistics, the table. */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** One line of the bench's progress output. */
export const log = (s) => process.stdout.write(`${s}\n`);

/** Deterministic UUID-shaped ids: `<8 hex prefix>-0000-4000-8000-<12 hex counter>`. */
export function idMaker(
  prefix = Math.floor(Math.random() * 0xffffffff)
    .toString(16)
    .padStart(8, '0'),
) {
  let n = 0;
  const at = (i) => `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
  return {
    prefix,
    at,
    next: () => at(n++),
    get count() {
      return n;
    },
  };
}

/**
 * One autocannon run. `body` is a fixed string; `bodyFn` makes the body of each request (e.g. a
 * fresh id each time), `pathFn` its path; the same functions serve the baseline and the service.
 * Returns the figures used.
 */
export async function load({
  url,
  method = 'GET',
  path: p = '/',
  token,
  body,
  bodyFn,
  connections = 50,
  duration = 10,
  overallRate,
  pathFn,
}) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined || bodyFn) headers['content-type'] = 'application/json';
  const parts = bodyFn;
  const setupRequest = (req) => {
    const out = { ...req };
    if (bodyFn) out.body = bodyFn();
    if (pathFn) out.path = pathFn();
    return out;
  };
  const r = await autocannon({
    url: url + p,
    method,
    headers,
    body: parts ? undefined : body,
    connections,
    duration,
    pipelining: 1,
    overallRate,
    requests: parts || pathFn ? [{ method, path: p, headers, setupRequest }] : undefined,
  });
  return {
    rps: r.requests.average,
    total: r.requests.total,
    ok: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    p50: r.latency.p50,
    p99: r.latency.p99,
    bytesPerReq: r.requests.total ? r.throughput.total / r.requests.total : 0,
  };
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/** A plain HTTP request on loopback; resolves { status, body, ms }. */
export function request(url, { method = 'GET', token, body, contentType = 'application/json' } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const headers = {};
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) {
      headers['content-type'] = contentType;
      headers['content-length'] = Buffer.byteLength(body);
    }
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers, agent }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.setTimeout(120_000, () => req.destroy(new Error(`timeout: ${method} ${url}`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return percentile(s, 50);
}

/** Starts bench/lib/baseline-server.mjs; resolves { url, child, stop(), post(body) }. */
export async function startBaseline() {
  const child = spawn(process.execPath, [fileURLToPath(new URL('./baseline-server.mjs', import.meta.url))], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`baseline did not start: ${out}`)), 15_000);
    child.stdout.on('data', () => {
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1]);
      }
    });
    child.on('exit', (c) => reject(new Error(`baseline exited ${c}: ${out}`)));
  });
  return {
    url,
    child,
    setGetBody: (body) => request(`${url}/__get-body`, { method: 'POST', body, contentType: 'text/plain' }),
    stop: () => stopChild(child),
  };
}

export function stopChild(child, signal = 'SIGTERM', graceMs = 15_000) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    child.kill(signal);
  });
}

/**
 * Peak resident set (VmHWM) and current (VmRSS) of a process, in MB, from /proc, with the current
 * split of VmRSS into anonymous memory (heap, buffers: RssAnon) and file-backed pages (RssFile:
 * the node binary and, for the embedded service, the LMDB database file that lmdb maps).
 */
export function memoryOf(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(s)?.[1] ?? NaN);
    return { hwmMB: kb('VmHWM') / 1024, rssMB: kb('VmRSS') / 1024, anonMB: kb('RssAnon') / 1024, fileMB: kb('RssFile') / 1024 };
  } catch {
    return { hwmMB: NaN, rssMB: NaN, anonMB: NaN, fileMB: NaN };
  }
}

/** Resident pages of one mapped file in a process, in MB (from /proc/<pid>/smaps). */
export function mappedMB(pid, file) {
  try {
    let kb = 0;
    let inFile = false;
    for (const line of fs.readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
      if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inFile = line.trimEnd().endsWith(` ${file}`);
      else if (inFile && line.startsWith('Rss:')) kb += Number(/(\d+)/.exec(line)?.[1] ?? 0);
    }
    return kb / 1024;
  } catch {
    return NaN;
  }
}

/** Samples memoryOf(pid) every `ms` until stopped; stop() gives the peaks of RssAnon and RssFile. */
export function sampleMemory(pid, ms = 100) {
  let peakAnonMB = 0;
  let peakFileMB = 0;
  const take = () => {
    const m = memoryOf(pid);
    if (m.anonMB > peakAnonMB) peakAnonMB = m.anonMB;
    if (m.fileMB > peakFileMB) peakFileMB = m.fileMB;
  };
  take();
  const timer = setInterval(take, ms);
  return {
    stop() {
      clearInterval(timer);
      take();
      return { peakAnonMB, peakFileMB };
    },
  };
}

export function fmt(x, digits) {
  if (x === undefined || x === null || (typeof x === 'number' && !Number.isFinite(x))) return '—';
  if (typeof x !== 'number') return String(x);
  const d = digits ?? (Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 10 ? 1 : 2);
  return x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
}

/** Pass/fail of a ratio against a target like '>= 0.5' or '<= 1.0'. */
export function judge(ratio, target) {
  if (typeof ratio !== 'number' || !Number.isFinite(ratio) || !target) return null;
  const m = /^(>=|<=)\s*([\d.]+)/.exec(target);
  if (!m) return null;
  return m[1] === '>=' ? ratio >= Number(m[2]) : ratio <= Number(m[2]);
}

export function printTable(rows, write = (s) => process.stdout.write(s)) {
  const head = ['scenario', 'figure', 'baseline', 'ratio', 'target', 'result'];
  const cells = rows.map((r) => [
    r.scenario,
    r.figure === undefined ? '—' : `${fmt(r.figure)} ${r.unit ?? ''}`.trim(),
    r.baseline === undefined ? '—' : `${fmt(r.baseline)} ${r.baselineUnit ?? r.unit ?? ''}`.trim(),
    fmt(r.ratio, 2),
    r.target ?? '—',
    r.pass === true ? 'pass' : r.pass === false ? 'FAIL' : (r.status ?? 'info'),
  ]);
  const [header, rule, ...lines] = alignColumns(head, cells);
  write(`${header}\n${rule}\n`);
  for (let i = 0; i < rows.length; i++) {
    write(`${lines[i]}\n`);
    if (rows[i].note) write(`${' '.repeat(4)}↳ ${rows[i].note}\n`);
  }
}

/** A text table: the header, a rule, then one line per row; the first column left-aligned, the others right. */
export function alignColumns(head, cells) {
  const w = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c) => c.map((x, i) => (i === 0 ? x.padEnd(w[i]) : x.padStart(w[i]))).join('  ');
  return [line(head), w.map((n) => '-'.repeat(n)).join('  '), ...cells.map(line)];
}

export function mkTemp(prefix) {
  return fs.mkdtempSync(path.join(process.env.TMPDIR ?? '/tmp', prefix));
}
