/**
 * Real Kafka, ClickHouse, Redis and nginx for integration tests, started on loopback by the tests
 * themselves (no Docker). See test/infra/README.md for the packages, env vars and quirks.
 *
 *   Kafka:      librdkafka's mock cluster, via the small C program kafka-mock.c (compiled once
 *               with gcc into node_modules/.cache/otm-test/).
 *   ClickHouse: Debian's clickhouse-server 18.16 with a private config, data folder and ports;
 *               or the server named by CLICKHOUSE_URL.
 *   Redis:      REDIS_URL; else the Redis on 127.0.0.1:6379; else a private redis-server.
 *   nginx:      Debian's nginx with a private prefix folder (conf, pid, logs, temp files) and
 *               the http-level configuration the test gives (e.g. deploy/nginx/otm.conf).
 *
 * Every process started here binds to 127.0.0.1 only and is killed when the Node process exits
 * (and, through PR_SET_PDEATHSIG, when it dies without running its exit handlers).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export type ServiceName = 'kafka' | 'clickhouse' | 'redis' | 'nginx';

export interface KafkaService {
  /** Bootstrap servers, `127.0.0.1:port` each (one per mock broker). */
  readonly brokers: string[];
  /** The mock cluster's process (for diagnostics that read its CPU time from /proc). */
  readonly pid: number;
  /** SIGTERM, wait for the mock to exit (SIGKILL after 5 s). Idempotent. */
  stop(): Promise<void>;
  /** Abrupt stop (SIGKILL): every broker disappears at once, e.g. to test "Kafka unreachable". */
  kill(): Promise<void>;
  /**
   * Freezes the whole cluster (SIGSTOP): connections stay open but nothing answers, as when Kafka
   * is unreachable; `resume()` (SIGCONT) brings it back with every message it had.
   */
  pause(): void;
  resume(): void;
}

export interface UrlService {
  /** `http://127.0.0.1:port` for ClickHouse, `redis://127.0.0.1:port` for Redis. */
  readonly url: string;
  /** True when the server is not ours (env URL or the shared Redis on 6379): stop() leaves it. */
  readonly external: boolean;
  /** The server's process id when we started it (for CPU figures of the diagnostics). */
  readonly pid?: number;
  stop(): Promise<void>;
}

export interface NginxService {
  /** `http://127.0.0.1:port`, where nginx listens. */
  readonly url: string;
  /** The `listen` address given to the configuration, `127.0.0.1:port`. */
  readonly listen: string;
  /** The nginx process (one process: no master with workers). */
  readonly pid: number;
  /** The prefix folder: nginx.conf, the test's http.conf, error.log, access.log, temp folders. */
  readonly prefix: string;
  /** What nginx wrote to its error log so far (for assertions and failure messages). */
  errorLog(): string;
  /** SIGTERM (nginx's fast shutdown), wait, SIGKILL after 5 s; removes the prefix folder. Idempotent. */
  stop(): Promise<void>;
}

export interface RedisService extends UrlService {
  /** Stops and starts our own redis-server on the same port and data folder (appendonly yes,
   * appendfsync always, so every acknowledged write survives). Throws for an external Redis. */
  restart(): Promise<void>;
}

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = path.resolve(HERE, '../..');
const KAFKA_MOCK_SRC = path.join(HERE, 'kafka-mock.c');
const CACHE_DIR = path.join(REPO_ROOT, 'node_modules', '.cache', 'otm-test');
const LOOPBACK = '127.0.0.1';

// ---------------------------------------------------------------------------------------------
// Policy: missing software fails loudly; skipping only with OTM_SKIP_INTEGRATION=1.

interface Requirement {
  what: string;
  packages: string[];
  present: () => boolean;
}

const SBIN_DIRS = ['/usr/local/sbin', '/usr/sbin', '/sbin', '/usr/local/bin', '/usr/bin', '/bin'];

/** Absolute path of an executable found in PATH (plus the sbin folders), or undefined. */
export function findExecutable(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean), ...SBIN_DIRS];
  for (const dir of dirs) {
    const file = path.join(dir, name);
    try {
      fs.accessSync(file, fs.constants.X_OK);
      if (fs.statSync(file).isFile()) return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

const RDKAFKA_MOCK_HEADERS = ['/usr/include/librdkafka/rdkafka_mock.h', '/usr/local/include/librdkafka/rdkafka_mock.h'];

const REQUIREMENTS: Record<ServiceName, Requirement[]> = {
  kafka: [
    { what: 'gcc', packages: ['gcc', 'libc6-dev'], present: () => findExecutable('gcc') !== undefined },
    {
      what: 'librdkafka headers (rdkafka_mock.h)',
      packages: ['librdkafka-dev'],
      present: () => RDKAFKA_MOCK_HEADERS.some((f) => fs.existsSync(f)),
    },
  ],
  clickhouse: [
    {
      what: 'clickhouse-server',
      packages: ['clickhouse-server', 'clickhouse-client'],
      present: () => findExecutable('clickhouse-server') !== undefined,
    },
  ],
  redis: [{ what: 'redis-server', packages: ['redis-server'], present: () => findExecutable('redis-server') !== undefined }],
  nginx: [{ what: 'nginx', packages: ['nginx'], present: () => findExecutable('nginx') !== undefined }],
};

const ALL_SERVICES: readonly ServiceName[] = ['kafka', 'clickhouse', 'redis', 'nginx'];

/** Missing software for the given services, as `{ what, packages }`. Honours CLICKHOUSE_URL and
 * REDIS_URL (then nothing local is needed for that service). */
export function missingSoftware(services: readonly ServiceName[] = ALL_SERVICES): Requirement[] {
  const missing: Requirement[] = [];
  for (const s of services) {
    if (s === 'clickhouse' && process.env.CLICKHOUSE_URL) continue;
    if (s === 'redis' && process.env.REDIS_URL) continue;
    for (const r of REQUIREMENTS[s]) if (!r.present()) missing.push(r);
  }
  return missing;
}

/**
 * Throws an Error naming the Debian packages to install when software needed to start the given
 * services (default: all of them) is missing, e.g.
 * "clickhouse-server is not installed: apt-get install -y clickhouse-server clickhouse-client".
 * Redis: redis-server is only needed when REDIS_URL is unset and nothing answers on 6379, so
 * startRedis() checks that itself; here it is required like the others (CI installs it).
 */
export function requireServices(services: readonly ServiceName[] = ALL_SERVICES): void {
  const missing = missingSoftware(services);
  if (missing.length === 0) return;
  const lines = missing.map((m) => `${m.what} is not installed: apt-get install -y ${m.packages.join(' ')}`);
  const all = [...new Set(missing.flatMap((m) => m.packages))];
  throw new Error(
    `${lines.join('\n')}\n` +
      `(integration tests need real services; install all with: apt-get update && apt-get install -y ${all.join(' ')}; ` +
      'or set OTM_SKIP_INTEGRATION=1 to skip them explicitly; `npm run test:unit` runs only the tests that need none)',
  );
}

let skipWarned = false;
const skippedSuites = new Set<string>();

/**
 * False only when OTM_SKIP_INTEGRATION=1. Then it prints, loudly and to stderr, that the
 * integration tests are skipped (once per test file: vitest loads this module afresh for each),
 * naming `suite` when given (once per suite name).
 * Use: `describe.skipIf(!integrationEnabled('kafka bus'))(...)`, so that vitest reports the
 * suite's tests as skipped (never return early from a test or leave it empty).
 */
export function integrationEnabled(suite?: string): boolean {
  if (process.env.OTM_SKIP_INTEGRATION !== '1') return true;
  if (!skipWarned) {
    skipWarned = true;
    const missing = missingSoftware();
    const bar = '!'.repeat(78);
    process.stderr.write(
      `\n${bar}\n!! OTM_SKIP_INTEGRATION=1: integration tests against REAL Kafka, ClickHouse, Redis and nginx are SKIPPED.\n` +
        `!! Nothing about the Kafka/ClickHouse/Redis adapters or the nginx proxy is proven by this run.\n` +
        (missing.length > 0
          ? `!! Missing here: ${missing.map((m) => m.what).join(', ')} (apt-get install -y ${[...new Set(missing.flatMap((m) => m.packages))].join(' ')})\n`
          : '') +
        `${bar}\n\n`,
    );
  }
  if (suite !== undefined && !skippedSuites.has(suite)) {
    skippedSuites.add(suite);
    process.stderr.write(`!! SKIPPED (OTM_SKIP_INTEGRATION=1): ${suite}\n`);
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Child processes: all tracked, all killed on exit.

const children = new Set<ChildProcess>();
const scratchDirs = new Set<string>();
let exitHookInstalled = false;

function killAllChildren(signal: NodeJS.Signals): void {
  for (const child of children) {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // A test worker whose runner died (IPC channel closed) may linger: do not let services linger
  // with it.
  if (typeof process.send === 'function') process.once('disconnect', () => killAllChildren('SIGTERM'));
  process.on('exit', () => {
    killAllChildren('SIGKILL');
    for (const dir of scratchDirs) {
      try {
        fs.rmSync(dir, { recursive: true, force: true });
      } catch {
        // best effort
      }
    }
  });
}

const SETPRIV = findExecutable('setpriv');

/** Spawns a service process that dies with us: tracked for the exit hook, and wrapped in
 * `setpriv --pdeathsig TERM` (util-linux) when available, so it also goes if we are SIGKILLed. */
function spawnService(file: string, args: string[], opts: { cwd?: string; pdeathsig?: boolean } = {}): ChildProcess {
  installExitHook();
  const [cmd, argv] = opts.pdeathsig !== false && SETPRIV ? [SETPRIV, ['--pdeathsig', 'TERM', '--', file, ...args]] : [file, args];
  const child = spawn(cmd, argv, {
    cwd: opts.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LC_ALL: 'C' },
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  // Do not keep the test process alive because of a service someone forgot to stop.
  child.unref();
  (child.stdout as net.Socket | null)?.unref?.();
  (child.stderr as net.Socket | null)?.unref?.();
  return child;
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function waitExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (exited(child)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolve(false);
    }, ms);
    const onExit = () => {
      clearTimeout(timer);
      resolve(true);
    };
    child.once('exit', onExit);
  });
}

/** SIGTERM, wait up to `graceMs`, then SIGKILL and wait for the exit. */
async function terminate(child: ChildProcess, graceMs: number): Promise<void> {
  if (exited(child)) return;
  child.kill('SIGTERM');
  if (await waitExit(child, graceMs)) return;
  child.kill('SIGKILL');
  await waitExit(child, 5_000);
}

async function killNow(child: ChildProcess): Promise<void> {
  if (exited(child)) return;
  child.kill('SIGKILL');
  await waitExit(child, 5_000);
}

/** Keeps the last `max` characters of a stream, for error messages. */
function tail(stream: NodeJS.ReadableStream | null, max = 8_000): () => string {
  let buf = '';
  stream?.on('data', (d: Buffer) => {
    buf = (buf + d.toString()).slice(-max);
  });
  return () => buf;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

const SCRATCH_PREFIXES = ['otm-clickhouse-', 'otm-redis-', 'otm-nginx-'];
const OWNER_FILE = 'otm-owner.json';
let swept = false;

function pidAlive(pid: unknown): boolean {
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes scratch folders left behind by test processes that were killed (vitest ends its
 * workers with a signal, so their 'exit' hooks do not run; the servers themselves die through
 * PDEATHSIG, but their folders stay). A folder is stale when neither its owner nor its server
 * process is alive. */
function sweepStaleScratchDirs(): void {
  if (swept) return;
  swept = true;
  const entries: string[] = [];
  for (const base of new Set([os.tmpdir(), memoryBase()])) {
    try {
      entries.push(...fs.readdirSync(base).map((name) => path.join(base, name)));
    } catch {
      // not there
    }
  }
  for (const dir of entries) {
    if (!SCRATCH_PREFIXES.some((p) => path.basename(dir).startsWith(p))) continue;
    try {
      const owner = JSON.parse(fs.readFileSync(path.join(dir, OWNER_FILE), 'utf8')) as { owner?: unknown; server?: unknown };
      if (pidAlive(owner.owner) || pidAlive(owner.server)) continue;
    } catch {
      // No owner file: only remove it once it is clearly abandoned (or being created right now).
      try {
        if (Date.now() - fs.statSync(dir).mtimeMs < 3_600_000) continue;
      } catch {
        continue;
      }
    }
    fs.rmSync(dir, { recursive: true, force: true, maxRetries: 2 });
  }
}

/**
 * A folder in memory (tmpfs) when the machine has one, else the temporary folder
 * (OTM_TEST_CLICKHOUSE_ON_DISK=1 forces the latter). The test ClickHouse keeps its data there:
 * 18.16 writes every insert as a part of ~70 files (two per column; a current ClickHouse writes
 * small inserts as compact parts of 3 files), and creating a file on a shared virtual disk costs
 * several times what it costs on tmpfs, so an insert does too (bench/diag/clickhouse/
 * clickhouse-insert.mjs compares both; strace of the server: openat dominated, nothing is fsynced).
 */
function memoryBase(): string {
  if (process.env.OTM_TEST_CLICKHOUSE_ON_DISK === '1') return os.tmpdir();
  try {
    fs.accessSync('/dev/shm', fs.constants.W_OK);
    return '/dev/shm';
  } catch {
    return os.tmpdir();
  }
}

function makeScratchDir(prefix: string, base = os.tmpdir()): string {
  installExitHook();
  try {
    sweepStaleScratchDirs();
  } catch {
    // best effort
  }
  const dir = fs.mkdtempSync(path.join(base, prefix));
  fs.writeFileSync(path.join(dir, OWNER_FILE), JSON.stringify({ owner: process.pid }));
  scratchDirs.add(dir);
  return dir;
}

/** Records the server pid in the scratch folder, for sweepStaleScratchDirs(). */
function recordServer(dir: string, child: ChildProcess): void {
  try {
    fs.writeFileSync(path.join(dir, OWNER_FILE), JSON.stringify({ owner: process.pid, server: child.pid }));
  } catch {
    // best effort
  }
}

function removeScratchDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
  scratchDirs.delete(dir);
}

// ---------------------------------------------------------------------------------------------
// Ports

/** A free TCP port on 127.0.0.1 (bind port 0, read it, close). Another process may take it
 * before it is used; the starters below retry on "address in use". */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen({ host: LOOPBACK, port: 0, exclusive: true }, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port > 0 ? resolve(port) : reject(new Error('could not get a free port'))));
    });
  });
}

async function freePorts(n: number): Promise<number[]> {
  // Hold all sockets open together so the n ports are distinct.
  const servers: net.Server[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const srv = net.createServer();
      srv.unref();
      servers.push(srv);
      await new Promise<void>((resolve, reject) => {
        srv.once('error', reject);
        srv.listen({ host: LOOPBACK, port: 0, exclusive: true }, () => resolve());
      });
    }
    return servers.map((s) => {
      const a = s.address();
      if (typeof a !== 'object' || !a) throw new Error('could not get a free port');
      return a.port;
    });
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
  }
}

// ---------------------------------------------------------------------------------------------
// Kafka: librdkafka mock cluster

let kafkaMockBinary: Promise<string> | undefined;

/** Compiles kafka-mock.c once per source version into node_modules/.cache/otm-test/. Safe when
 * several test processes do it at once (compile to a private name, then rename). */
function kafkaMockBinaryPath(): Promise<string> {
  kafkaMockBinary ??= (async () => {
    const src = fs.readFileSync(KAFKA_MOCK_SRC);
    const hash = createHash('sha256').update(src).update(process.arch).digest('hex').slice(0, 16);
    const bin = path.join(CACHE_DIR, `kafka-mock-${hash}`);
    if (fs.existsSync(bin)) return bin;
    requireServices(['kafka']);
    fs.mkdirSync(CACHE_DIR, { recursive: true });
    const tmp = `${bin}.${process.pid}.${Date.now()}.tmp`;
    const gcc = findExecutable('gcc') ?? 'gcc';
    await new Promise<void>((resolve, reject) => {
      execFile(gcc, ['-O2', '-Wall', '-o', tmp, KAFKA_MOCK_SRC, '-lrdkafka'], (err, _stdout, stderr) => {
        if (err) {
          reject(
            new Error(
              `compiling ${KAFKA_MOCK_SRC} failed (needs gcc and librdkafka-dev >= 1.4: apt-get install -y gcc libc6-dev librdkafka-dev):\n${stderr}`,
            ),
          );
        } else resolve();
      });
    });
    fs.renameSync(tmp, bin);
    return bin;
  })();
  kafkaMockBinary.catch(() => (kafkaMockBinary = undefined));
  return kafkaMockBinary;
}

const TOPIC_NAME = /^[A-Za-z0-9._-]{1,249}$/;

/**
 * Starts a mock Kafka cluster on loopback (random ports) with the given topics pre-created.
 * Topics not listed are auto-created on first produce with 4 partitions.
 * The mock's limits (no admin CreateTopics, no idempotent producer, ...) are in README.md.
 */
export async function startKafka(opts: { topics: Record<string, number>; brokers?: number }): Promise<KafkaService> {
  const brokers = opts.brokers ?? 1;
  if (!Number.isInteger(brokers) || brokers < 1 || brokers > 16) throw new Error(`startKafka: brokers must be 1..16, got ${brokers}`);
  const topicArgs = Object.entries(opts.topics).map(([name, partitions]) => {
    if (!TOPIC_NAME.test(name)) throw new Error(`startKafka: bad topic name ${JSON.stringify(name)}`);
    if (!Number.isInteger(partitions) || partitions < 1) throw new Error(`startKafka: bad partition count for ${name}: ${partitions}`);
    return `${name}:${partitions}`;
  });
  const bin = await kafkaMockBinaryPath();
  // The mock prints its address within a few milliseconds. Once, in a CI run with the machine
  // fully loaded, it printed nothing for 10 s; a start that stalls is killed (with what /proc says
  // about it in the error) and tried again with a new process.
  const errors: string[] = [];
  for (let attempt = 1; attempt <= KAFKA_START_ATTEMPTS; attempt++) {
    try {
      return await startKafkaOnce(bin, [String(brokers), ...topicArgs]);
    } catch (e) {
      errors.push(`attempt ${attempt}: ${(e as Error).message}`);
    }
  }
  throw new Error(`kafka-mock did not start:\n${errors.join('\n')}`);
}

const KAFKA_START_ATTEMPTS = 3;
const KAFKA_START_TIMEOUT_MS = 10_000;

/** What the kernel says about a process that stalls: its state, where it waits, its threads. */
function procState(pid: number | undefined): string {
  if (pid === undefined) return 'no pid';
  const read = (f: string) => {
    try {
      return fs.readFileSync(`/proc/${pid}/${f}`, 'utf8').trim();
    } catch {
      return '?';
    }
  };
  const status = read('status');
  const pick = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(status)?.[1] ?? '?';
  return `state ${pick('State')}, threads ${pick('Threads')}, waiting in ${read('wchan')}`;
}

async function startKafkaOnce(bin: string, args: string[]): Promise<KafkaService> {
  // prctl(PR_SET_PDEATHSIG) is done by the program itself.
  const child = spawnService(bin, args, { pdeathsig: false });
  const stderr = tail(child.stderr);
  const bootstrap = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () =>
        fail(new Error(`no bootstrap servers printed within ${KAFKA_START_TIMEOUT_MS / 1000} s (${procState(child.pid)}): ${stderr()}`)),
      KAFKA_START_TIMEOUT_MS,
    );
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /^BOOTSTRAP (\S+)$/m.exec(out);
      if (m?.[1]) {
        cleanup();
        resolve(m[1]);
      }
    };
    const onExit = (code: number | null, signal: string | null) =>
      fail(new Error(`kafka-mock exited (code ${code}, signal ${signal}) before starting: ${stderr()}`));
    const onError = (err: Error) => fail(new Error(`kafka-mock could not be started: ${err.message}`));
    function cleanup() {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.off('exit', onExit);
      child.off('error', onError);
    }
    function fail(err: Error) {
      cleanup();
      child.kill('SIGKILL');
      reject(err);
    }
    child.stdout?.on('data', onData);
    child.once('exit', onExit);
    child.once('error', onError);
  });
  return {
    brokers: bootstrap.split(','),
    pid: child.pid!,
    stop: async () => {
      child.kill('SIGCONT');
      await terminate(child, 5_000);
    },
    kill: () => killNow(child),
    pause: () => void child.kill('SIGSTOP'),
    resume: () => void child.kill('SIGCONT'),
  };
}

// ---------------------------------------------------------------------------------------------
// ClickHouse 18.16 (Debian)

async function httpOk(url: string, timeoutMs: number): Promise<string | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const body = await res.text();
    return res.ok ? body : undefined;
  } catch {
    return undefined;
  }
}

function clickHouseConfig(original: string, dir: string, ports: { http: number; tcp: number; interserver: number }): string {
  let xml = original.replace(/<!--[\s\S]*?-->/g, '');
  const top = (tag: string, value: string) => `<yandex>\n    <${tag}>${value}</${tag}>`;
  const setTag = (tag: string, value: string) => {
    const re = new RegExp(`<${tag}>[^<]*</${tag}>`, 'g');
    xml = re.test(xml) ? xml.replace(re, `<${tag}>${value}</${tag}>`) : xml.replace('<yandex>', top(tag, value));
  };
  // Paths: every /var/lib/clickhouse/... (path, tmp_path, user_files_path, format_schema_path)
  // and the log files go into the scratch folder. (The distributed DDL <path> is a ZooKeeper
  // path and stays as it is.)
  xml = xml.split('/var/lib/clickhouse/').join(`${dir}/data/`);
  xml = xml.split('/var/log/clickhouse-server/').join(`${dir}/log/`);
  if (!xml.includes(`<path>${dir}/data/</path>`)) xml = xml.replace('<yandex>', top('path', `${dir}/data/`));
  if (!xml.includes('<tmp_path>')) xml = xml.replace('<yandex>', top('tmp_path', `${dir}/data/tmp/`));
  setTag('http_port', String(ports.http));
  setTag('tcp_port', String(ports.tcp));
  setTag('interserver_http_port', String(ports.interserver));
  xml = xml.replace(/<(https_port|tcp_port_secure|mysql_port|postgresql_port|interserver_http_host|listen_host)>[^<]*<\/\1>/g, '');
  xml = xml.replace('<yandex>', top('interserver_http_host', LOOPBACK));
  xml = xml.replace('<yandex>', top('listen_host', LOOPBACK));
  // The defaults (8 GB / 5 GB) are only upper bounds, but keep a test server modest.
  setTag('uncompressed_cache_size', String(64 * 1024 * 1024));
  setTag('mark_cache_size', String(64 * 1024 * 1024));
  setTag('users_config', `${dir}/users.xml`);
  return xml;
}

/**
 * Starts a private clickhouse-server (Debian's 18.16) on free loopback ports with its data in a
 * temp folder, and returns its HTTP URL once /ping answers. With CLICKHOUSE_URL set, returns that
 * server instead (stop() then does nothing).
 */
export async function startClickHouse(): Promise<UrlService> {
  const envUrl = process.env.CLICKHOUSE_URL;
  if (envUrl) return { url: envUrl.replace(/\/+$/, ''), external: true, stop: async () => {} };
  requireServices(['clickhouse']);
  const server = findExecutable('clickhouse-server')!;
  let lastError: Error | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const dir = makeScratchDir('otm-clickhouse-', memoryBase());
    try {
      const [http, tcp, interserver] = (await freePorts(3)) as [number, number, number];
      fs.mkdirSync(path.join(dir, 'data'), { recursive: true });
      fs.mkdirSync(path.join(dir, 'log'), { recursive: true });
      const config = clickHouseConfig(fs.readFileSync('/etc/clickhouse-server/config.xml', 'utf8'), dir, { http, tcp, interserver });
      fs.writeFileSync(path.join(dir, 'config.xml'), config);
      fs.copyFileSync('/etc/clickhouse-server/users.xml', path.join(dir, 'users.xml'));
      const child = spawnService(server, [`--config-file=${path.join(dir, 'config.xml')}`], { cwd: dir });
      recordServer(dir, child);
      const stderr = tail(child.stderr);
      const stdout = tail(child.stdout);
      let spawnError: Error | undefined;
      child.once('error', (e) => (spawnError = e));
      const url = `http://${LOOPBACK}:${http}`;
      const deadline = Date.now() + 30_000;
      let ready = false;
      while (Date.now() < deadline) {
        if (spawnError || exited(child)) break;
        if ((await httpOk(`${url}/ping`, 1_000))?.startsWith('Ok')) {
          // Someone else's server on a port taken meanwhile would answer too: ours must be alive.
          await sleep(20);
          ready = !exited(child);
          break;
        }
        await sleep(50);
      }
      if (ready) {
        let stopped = false;
        return {
          url,
          external: false,
          pid: child.pid!,
          stop: async () => {
            if (stopped) return;
            stopped = true;
            await terminate(child, 10_000);
            removeScratchDir(dir);
          },
        };
      }
      const died = exited(child);
      const errLog = readTail(path.join(dir, 'log', 'clickhouse-server.err.log'));
      await killNow(child);
      const detail = `${spawnError?.message ?? ''}\n${stderr()}\n${stdout()}\n${errLog}`.trim();
      lastError = new Error(
        died
          ? `clickhouse-server exited before answering /ping: ${detail}`
          : `clickhouse-server did not answer ${url}/ping within 30 s: ${detail}`,
      );
      removeScratchDir(dir);
      if (!/Address already in use/i.test(detail)) break;
    } catch (e) {
      removeScratchDir(dir);
      throw e;
    }
  }
  throw lastError ?? new Error('clickhouse-server did not start');
}

function readTail(file: string, max = 4_000): string {
  try {
    return fs.readFileSync(file, 'utf8').slice(-max);
  } catch {
    return '';
  }
}

// ---------------------------------------------------------------------------------------------
// Redis

/** Sends PING; resolves true on +PONG (or an auth error: something Redis-like answers). */
function redisPing(host: string, port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port });
    let buf = '';
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.once('error', () => done(false));
    sock.once('connect', () => sock.write('PING\r\n'));
    sock.on('data', (d) => {
      buf += d.toString();
      if (buf.includes('\r\n')) done(buf.startsWith('+PONG'));
    });
  });
}

/**
 * Redis for tests: REDIS_URL if set; else the shared Redis on 127.0.0.1:6379 if it answers PING
 * (stop() leaves it running; tests must use their own key prefix and never FLUSHALL); else, or
 * with `{ own: true }`, a private redis-server on a free loopback port with a temp data folder
 * (appendonly yes, so restart() keeps the data).
 */
export async function startRedis(opts: { own?: boolean } = {}): Promise<RedisService> {
  if (!opts.own) {
    const external = (url: string): RedisService => ({
      url,
      external: true,
      stop: async () => {},
      restart: async () => {
        throw new Error(`startRedis: cannot restart the external Redis at ${url}; use startRedis({ own: true })`);
      },
    });
    if (process.env.REDIS_URL) return external(process.env.REDIS_URL);
    if (await redisPing(LOOPBACK, 6379)) return external(`redis://${LOOPBACK}:6379`);
  }
  if (!findExecutable('redis-server')) {
    throw new Error(
      'redis-server is not installed and no Redis answers on 127.0.0.1:6379 (REDIS_URL is unset): apt-get install -y redis-server',
    );
  }
  const server = findExecutable('redis-server')!;
  const dir = makeScratchDir('otm-redis-');

  const launch = async (port: number): Promise<ChildProcess> => {
    const child = spawnService(
      server,
      [
        '--port',
        String(port),
        '--bind',
        LOOPBACK,
        '--protected-mode',
        'yes',
        '--dir',
        dir,
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
        '--save',
        '',
        '--daemonize',
        'no',
        '--logfile',
        '',
        '--loglevel',
        'warning',
      ],
      { cwd: dir },
    );
    recordServer(dir, child);
    const out = tail(child.stdout);
    let spawnError: Error | undefined;
    child.once('error', (e) => (spawnError = e));
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !spawnError && !exited(child)) {
      if (await redisPing(LOOPBACK, port, 300)) return child;
      await sleep(20);
    }
    await killNow(child);
    throw new Error(`redis-server did not start on ${LOOPBACK}:${port}: ${spawnError?.message ?? ''} ${out()}`.trim());
  };

  let port = 0;
  let child: ChildProcess | undefined;
  let lastError: unknown;
  for (let attempt = 0; attempt < 3 && !child; attempt++) {
    port = await freePort();
    try {
      child = await launch(port);
    } catch (e) {
      lastError = e;
    }
  }
  if (!child) {
    removeScratchDir(dir);
    throw lastError instanceof Error ? lastError : new Error('redis-server did not start');
  }
  let current: ChildProcess = child;
  let stopped = false;
  return {
    url: `redis://${LOOPBACK}:${port}`,
    external: false,
    get pid() {
      return current.pid;
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await terminate(current, 10_000);
      removeScratchDir(dir);
    },
    restart: async () => {
      if (stopped) throw new Error('startRedis: restart() after stop()');
      await terminate(current, 10_000);
      current = await launch(port);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// nginx (Debian)

/**
 * The main configuration around the test's http-level text. One process (`master_process off`):
 * it serves requests with the same modules and event loop as a worker, runs as the user who
 * started it, and dies with us through PDEATHSIG. A master with workers would leave its workers
 * running when the master is SIGKILLed, and as root its workers would run as `nobody`, who cannot
 * write request bodies into the private temp folders (nginx answers 500).
 */
function nginxMainConfig(prefix: string): string {
  const p = (name: string) => path.join(prefix, name);
  return [
    'daemon off;',
    'master_process off;',
    `pid ${p('nginx.pid')};`,
    `error_log ${p('error.log')} info;`,
    'events {',
    '    worker_connections 256;',
    '}',
    'http {',
    `    access_log ${p('access.log')};`,
    `    client_body_temp_path ${p('temp/client_body')};`,
    `    proxy_temp_path ${p('temp/proxy')};`,
    `    fastcgi_temp_path ${p('temp/fastcgi')};`,
    `    uwsgi_temp_path ${p('temp/uwsgi')};`,
    `    scgi_temp_path ${p('temp/scgi')};`,
    `    include ${p('http.conf')};`,
    '}',
    '',
  ].join('\n');
}

/**
 * Starts Debian's nginx on a free loopback port with a private prefix folder (its configuration,
 * pid file, logs and temp folders), and returns once it answers. `http(listen)` gives the
 * http-level configuration (upstreams, maps, server blocks); its servers must listen on `listen`
 * (`127.0.0.1:port`). Retries with a new port if the port was taken meanwhile.
 */
export async function startNginx(opts: { http: (listen: string) => string }): Promise<NginxService> {
  requireServices(['nginx']);
  const nginx = findExecutable('nginx')!;
  let lastError: Error | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const dir = makeScratchDir('otm-nginx-');
    try {
      const port = await freePort();
      const listen = `${LOOPBACK}:${port}`;
      fs.mkdirSync(path.join(dir, 'temp'));
      fs.writeFileSync(path.join(dir, 'http.conf'), opts.http(listen));
      fs.writeFileSync(path.join(dir, 'nginx.conf'), nginxMainConfig(dir));
      const errorLog = path.join(dir, 'error.log');
      const conf = path.join(dir, 'nginx.conf');
      // -e: the error log from the start, before the configuration is read.
      const child = spawnService(nginx, ['-p', `${dir}/`, '-c', conf, '-e', errorLog], { cwd: dir });
      recordServer(dir, child);
      const stderr = tail(child.stderr);
      let spawnError: Error | undefined;
      child.once('error', (e) => (spawnError = e));
      const url = `http://${listen}`;
      const deadline = Date.now() + 10_000;
      let ready = false;
      while (Date.now() < deadline) {
        if (spawnError || exited(child)) break;
        // Any answer will do: the test's configuration decides what `/` is.
        if (await httpAnswers(url, 1_000)) {
          // Someone else's server on a port taken meanwhile would answer too: ours must be alive.
          await sleep(20);
          ready = !exited(child);
          break;
        }
        await sleep(20);
      }
      if (ready) {
        let stopped = false;
        return {
          url,
          listen,
          pid: child.pid!,
          prefix: dir,
          errorLog: () => readTail(errorLog, 64_000),
          stop: async () => {
            if (stopped) return;
            stopped = true;
            await terminate(child, 5_000);
            removeScratchDir(dir);
          },
        };
      }
      const died = exited(child);
      await killNow(child);
      const detail = `${spawnError?.message ?? ''}\n${stderr()}\n${readTail(errorLog)}`.trim();
      lastError = new Error(died ? `nginx exited before answering: ${detail}` : `nginx did not answer ${url} within 10 s: ${detail}`);
      removeScratchDir(dir);
      if (!/Address already in use/i.test(detail)) break;
    } catch (e) {
      removeScratchDir(dir);
      throw e;
    }
  }
  throw lastError ?? new Error('nginx did not start');
}

/** True when something answers HTTP at `url` (any status). */
async function httpAnswers(url: string, timeoutMs: number): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await res.arrayBuffer();
    return true;
  } catch {
    return false;
  }
}
