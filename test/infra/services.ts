/**
 * Real Kafka, ClickHouse, Redis and nginx for integration tests, started on loopback by the tests
 * themselves (no Docker). See test/infra/README.md for the packages, env vars and quirks.
 *
 *   Kafka:      Apache Kafka's broker at the version docker-compose.yml pins, one KRaft node
 *               (broker and controller) on Java; its jars fetched once from Maven Central into
 *               node_modules/.cache/otm-test/kafka-<version>/ (mvn, ~/.m2).
 *   ClickHouse: a current ClickHouse engine (chdb, npm) behind a thin HTTP front in a Node
 *               process of its own (clickhouse-front.mjs) with a private data folder and port;
 *               or the server named by CLICKHOUSE_URL.
 *   Redis:      REDIS_URL; else the Redis on 127.0.0.1:6379; else a private redis-server.
 *   nginx:      Debian's nginx with a private prefix folder (conf, pid, logs, temp files) and
 *               the http-level configuration the test gives (e.g. deploy/nginx/otm.conf).
 *
 * Every process started here binds to 127.0.0.1 only and is killed when the Node process exits
 * (and, through PR_SET_PDEATHSIG, when it dies without running its exit handlers).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel as KafkaLogLevel } from 'kafkajs';

export type ServiceName = 'kafka' | 'clickhouse' | 'redis' | 'nginx';

export interface KafkaService {
  /** Bootstrap servers: `127.0.0.1:port` of the one broker. */
  readonly brokers: string[];
  /** The Kafka version running (docker-compose.yml's). */
  readonly version: string;
  /** The broker's JVM (for diagnostics that read its CPU time from /proc). Changes on restart(). */
  readonly pid: number;
  /** With `startKafka({ proxied: true })`: where the second listener is, and what it advertises. */
  readonly proxied?: { readonly listen: string; readonly advertised: string };
  /** How long the start took, step by step. */
  readonly times: KafkaStartTimes;
  /** What the broker logged (warnings and errors), for failure messages. */
  output(): string;
  /** SIGKILL and remove the data folder (nothing is kept, so no clean shutdown is needed). Idempotent. */
  stop(): Promise<void>;
  /** Abrupt stop (SIGKILL): the broker disappears, e.g. to test "Kafka unreachable". */
  kill(): Promise<void>;
  /**
   * Freezes the broker (SIGSTOP): connections stay open but nothing answers, as when Kafka is
   * unreachable; `resume()` (SIGCONT) brings it back with every message it had.
   */
  pause(): void;
  resume(): void;
  /**
   * Stops the broker cleanly (SIGTERM) and starts it again on the same ports and data: what it
   * acknowledged (and committed offsets) survives. Resolves once it answers metadata again.
   */
  restart(): Promise<void>;
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

/** A ClickHouse server we started ourselves can be stopped and started again; an external one cannot. */
export interface ClickHouseService extends UrlService {
  /** The server's process; changes on restart(). Undefined for an external server. */
  readonly pid?: number;
  /**
   * Stops our server (SIGCONT first, should it be paused; then SIGTERM) and keeps its data folder
   * and ports: `restart()` starts it again; new connections are refused meanwhile. Resolves once
   * the process is gone: 'exited' when it ended on SIGTERM, 'killed' when it was still there 10 s
   * later and got SIGKILL (the front closes its listening socket at once and finishes the requests
   * it has queued first). Throws for an external server.
   */
  shutdown(): Promise<'exited' | 'killed'>;
  /** Abrupt stop (SIGKILL), keeping the data folder and ports. Throws for an external server. */
  kill(): Promise<void>;
  /**
   * Starts the server again on the same ports and data folder (tables and rows written before are
   * there), first stopping it cleanly if it runs; resolves once /ping answers. Throws for an
   * external server, and after stop().
   */
  restart(): Promise<void>;
}

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = path.resolve(HERE, '../..');
const CACHE_DIR = path.join(REPO_ROOT, 'node_modules', '.cache', 'otm-test');
const LOOPBACK = '127.0.0.1';

// ---------------------------------------------------------------------------------------------
// Policy: missing software fails loudly; skipping only with OTM_SKIP_INTEGRATION=1.

interface Requirement {
  what: string;
  /** Debian packages that bring it. */
  packages: string[];
  /** How to install it when it does not come from Debian. */
  install?: string;
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

/** True when the broker is installed in the cache already (then Maven is not needed). */
function kafkaInstalled(): boolean {
  try {
    return installedKafka(kafkaVersion()) !== undefined;
  } catch {
    return false;
  }
}

const REQUIREMENTS: Record<ServiceName, Requirement[]> = {
  kafka: [
    { what: 'java (a JRE, 11 or newer)', packages: ['openjdk-17-jre-headless'], present: () => findExecutable('java') !== undefined },
    {
      what: 'mvn (to fetch the Kafka broker from Maven Central once)',
      packages: ['maven'],
      present: () => kafkaInstalled() || findExecutable('mvn') !== undefined,
    },
  ],
  clickhouse: [
    {
      what: "chdb (the tests' ClickHouse engine, a devDependency)",
      packages: [],
      install: 'npm ci',
      present: chdbInstalled,
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
  const lines = missing.map((m) => `${m.what} is not installed: ${m.install ?? `apt-get install -y ${m.packages.join(' ')}`}`);
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

const SCRATCH_PREFIXES = ['otm-clickhouse-', 'otm-kafka-', 'otm-redis-', 'otm-nginx-'];
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
 * every insert is a part of a few files, and creating a file on a shared virtual disk costs
 * several times what it costs on tmpfs, so an insert does too (bench/diag/clickhouse/
 * clickhouse-insert.mjs compares both).
 * The test Kafka keeps its data there too: its KRaft metadata log is fsynced on every commit.
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

/**
 * A free TCP port on 127.0.0.1, chosen at random below the kernel's ephemeral range (32768 and up
 * on Linux), bound, read and closed. Below that range, no outgoing connection of any process is
 * given the port as its local one while the service that owns it is down: Redis, Kafka and
 * ClickHouse, killed and started again on the same port by the fault tests, find it free. Another
 * process may still take it before it is used; the starters retry on "address in use".
 */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}

const PORT_LOW = 20_000;
const PORT_HIGH = 32_000;

function listenOn(srv: net.Server, port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException): void => {
      if (err.code === 'EADDRINUSE' || err.code === 'EACCES') resolve(false);
      else reject(err);
    };
    srv.once('error', onError);
    srv.listen({ host: LOOPBACK, port, exclusive: true }, () => {
      srv.off('error', onError);
      resolve(true);
    });
  });
}

async function freePorts(n: number): Promise<number[]> {
  // Hold all sockets open together so the n ports are distinct.
  const servers: net.Server[] = [];
  try {
    for (let i = 0; i < n; i++) {
      for (let attempt = 0; ; attempt++) {
        const srv = net.createServer();
        srv.unref();
        const port = attempt < 50 ? PORT_LOW + Math.floor(Math.random() * (PORT_HIGH - PORT_LOW)) : 0;
        if (await listenOn(srv, port)) {
          servers.push(srv);
          break;
        }
      }
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
// Kafka: Apache Kafka's broker (KRaft, one node that is broker and controller), from Maven Central

/**
 * The Kafka version the deployment pins (`image: apache/kafka:X.Y.Z` in docker-compose.yml), so
 * that the tests run the broker production runs.
 */
export function kafkaVersion(): string {
  const compose = fs.readFileSync(path.join(REPO_ROOT, 'docker-compose.yml'), 'utf8');
  const m = /^\s*image:\s*apache\/kafka:(\d+\.\d+\.\d+)\s*$/m.exec(compose);
  if (!m?.[1]) throw new Error('docker-compose.yml names no `image: apache/kafka:X.Y.Z`: cannot tell which Kafka to test against');
  return m[1];
}

/** Logging for the broker: warnings and errors on stdout (kept for failure messages). */
const KAFKA_LOG4J = [
  'log4j.rootLogger=WARN, stdout',
  'log4j.appender.stdout=org.apache.log4j.ConsoleAppender',
  'log4j.appender.stdout.layout=org.apache.log4j.PatternLayout',
  'log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n',
  '',
].join('\n');

/** The pom whose runtime dependencies are the broker: kafka_2.13 and a logging backend. */
function kafkaPom(version: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by test/infra/services.ts: the Kafka broker for the tests. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>otm.test</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>${version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>${version}</version></dependency>
    <!-- Kafka's own distribution logs through reload4j too. -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
`;
}

/** Pinned, so that the fetch does not depend on which plugin version Maven would pick. */
const MAVEN_DEPENDENCY_PLUGIN = 'org.apache.maven.plugins:maven-dependency-plugin:3.6.1';
const KAFKA_INSTALL_TIMEOUT_MS = 600_000;
/** Changes when what an installation folder holds changes (then it is made anew). */
const KAFKA_INSTALL_MARKER = 'installed-v1';
/** JVM options: a small heap and the serial collector (the machines have 2 cores), no perf files in /tmp. */
const KAFKA_JVM_OPTIONS = [
  '-Xms64m',
  '-Xmx512m',
  '-XX:+UseSerialGC',
  '-XX:-UsePerfData',
  '-XX:+ExitOnOutOfMemoryError',
  '-Djava.awt.headless=true',
];

/** What startKafka starts from: made once per machine and Kafka version (kafkaInstallation()). */
export interface KafkaInstallation {
  readonly version: string;
  /** The folder: node_modules/.cache/otm-test/kafka-<version>/. */
  readonly home: string;
  /** The broker's jars (kafka_2.13 and its runtime dependencies). */
  readonly libs: string;
  /** A store formatted once by `kafka-storage format`, copied for every broker. */
  readonly template: string;
  /** A class-data-sharing archive of the broker's classes (about 1 s off each start), if made. */
  readonly cds?: string;
}

let kafkaInstallationPromise: Promise<KafkaInstallation> | undefined;

/**
 * The broker, ready to start: in node_modules/.cache/otm-test/kafka-<version>/, made on first use:
 * - `libs/`: `mvn dependency:copy-dependencies` on a generated pom naming
 *   org.apache.kafka:kafka_2.13:<version> (Maven keeps its downloads in ~/.m2, so even a fresh
 *   clone then needs no network);
 * - `template/`: a single-node KRaft store formatted by kafka.tools.StorageTool (what
 *   `kafka-storage format` runs), copied into each broker's scratch folder, which saves a JVM
 *   start each time;
 * - `kafka.jsa`: a JVM class-data-sharing archive dumped by one broker run.
 * Test processes that start at once take turns through a lock folder.
 */
export function kafkaInstallation(): Promise<KafkaInstallation> {
  kafkaInstallationPromise ??= installKafka(kafkaVersion());
  kafkaInstallationPromise.catch(() => (kafkaInstallationPromise = undefined));
  return kafkaInstallationPromise;
}

function installedKafka(version: string): KafkaInstallation | undefined {
  const home = path.join(CACHE_DIR, `kafka-${version}`);
  if (!fs.existsSync(path.join(home, KAFKA_INSTALL_MARKER))) return undefined;
  const cds = path.join(home, 'kafka.jsa');
  return {
    version,
    home,
    libs: path.join(home, 'libs'),
    template: path.join(home, 'template'),
    ...(fs.existsSync(cds) ? { cds } : {}),
  };
}

async function installKafka(version: string): Promise<KafkaInstallation> {
  const done = installedKafka(version);
  if (done) return done;
  const home = path.join(CACHE_DIR, `kafka-${version}`);
  fs.mkdirSync(home, { recursive: true });
  const lock = path.join(home, 'lock');
  const deadline = Date.now() + KAFKA_INSTALL_TIMEOUT_MS;
  for (;;) {
    try {
      fs.mkdirSync(lock);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    // Another process installs: wait for it, unless it died.
    let holder: number | undefined;
    try {
      holder = Number(fs.readFileSync(path.join(lock, 'pid'), 'utf8'));
    } catch {
      holder = undefined;
    }
    let stale: boolean;
    try {
      stale = holder === undefined ? Date.now() - fs.statSync(lock).mtimeMs > 30_000 : !pidAlive(holder);
    } catch {
      continue; // the lock went away meanwhile
    }
    if (stale) {
      fs.rmSync(lock, { recursive: true, force: true });
      continue;
    }
    const other = installedKafka(version);
    if (other) return other;
    if (Date.now() > deadline)
      throw new Error(`waited ${KAFKA_INSTALL_TIMEOUT_MS / 1000} s for another process installing Kafka into ${home}`);
    await sleep(250);
  }
  try {
    fs.writeFileSync(path.join(lock, 'pid'), String(process.pid));
    const other = installedKafka(version);
    if (other) return other;
    for (const stale of ['libs', 'template', 'kafka.jsa']) fs.rmSync(path.join(home, stale), { recursive: true, force: true });
    requireServices(['kafka']);
    await fetchKafkaLibs(version, home);
    const libs = path.join(home, 'libs');
    const java = findExecutable('java')!;
    const jvm = [...KAFKA_JVM_OPTIONS, '-cp', `${libs}/*`];
    // The template store: a configuration that names where it goes (and nothing else matters
    // to `format` for a static quorum: no ports or cluster state are written).
    const work = fs.mkdtempSync(path.join(home, 'format-'));
    try {
      const props = path.join(work, 'server.properties');
      fs.writeFileSync(props, kafkaProperties(path.join(home, 'template'), { client: 9092, controller: 9093 }, true));
      fs.writeFileSync(path.join(work, 'log4j.properties'), KAFKA_LOG4J);
      const log4j = `-Dlog4j.configuration=file:${path.join(work, 'log4j.properties')}`;
      await runJava(java, [log4j, ...jvm, 'kafka.tools.StorageTool', 'format', '-t', kafkaClusterId(), '-c', props], work);
    } finally {
      fs.rmSync(work, { recursive: true, force: true });
    }
    const installation: KafkaInstallation = { version, home, libs, template: path.join(home, 'template') };
    await dumpKafkaClassArchive(installation, java).catch((e: unknown) => {
      process.stderr.write(
        `test/infra/services.ts: no class-data-sharing archive for Kafka (starts take ~1 s longer): ${(e as Error).message}\n`,
      );
    });
    fs.writeFileSync(path.join(home, KAFKA_INSTALL_MARKER), `${new Date().toISOString()}\n`);
    return installedKafka(version)!;
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

async function fetchKafkaLibs(version: string, home: string): Promise<void> {
  const mvn = findExecutable('mvn')!;
  const work = fs.mkdtempSync(path.join(home, 'fetch-'));
  try {
    fs.writeFileSync(path.join(work, 'pom.xml'), kafkaPom(version));
    const out = path.join(work, 'libs');
    await new Promise<void>((resolve, reject) => {
      execFile(
        mvn,
        [
          '-B',
          '-q',
          '-f',
          path.join(work, 'pom.xml'),
          `${MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies`,
          `-DoutputDirectory=${out}`,
          '-DincludeScope=runtime',
        ],
        { timeout: KAFKA_INSTALL_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 },
        (err, stdout, stderr) => {
          if (err) {
            const detail = `${stdout}\n${stderr}`.trim().slice(-4_000);
            reject(
              new Error(
                `fetching Kafka ${version} from Maven Central failed (mvn copy-dependencies of org.apache.kafka:kafka_2.13:${version}): ${err.message}\n${detail}`,
              ),
            );
          } else resolve();
        },
      );
    });
    if (!fs.existsSync(path.join(out, `kafka_2.13-${version}.jar`)))
      throw new Error(`mvn did not copy kafka_2.13-${version}.jar into ${out}`);
    fs.renameSync(out, path.join(home, 'libs'));
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Runs one broker with -XX:ArchiveClassesAtExit until it served a group and an idempotent
 * producer, and stops it cleanly: the JVM then writes the classes it loaded into kafka.jsa, which
 * later starts map instead of loading and verifying them again.
 */
async function dumpKafkaClassArchive(inst: KafkaInstallation, java: string): Promise<void> {
  const dir = makeScratchDir('otm-kafka-', memoryBase());
  const archive = path.join(inst.home, `kafka.jsa.${process.pid}.tmp`);
  try {
    const [client, controller] = (await freePorts(2)) as [number, number];
    const props = prepareKafkaDir(dir, inst, { client, controller }, true);
    const args = [...kafkaJvm(dir, inst.libs), `-XX:ArchiveClassesAtExit=${archive}`, 'kafka.Kafka', props];
    const broker = await launchKafka(java, args, dir, client);
    try {
      await warmUpKafka(`${LOOPBACK}:${client}`, { 'otm-warm-up': 1 });
    } finally {
      await terminate(broker.child, 30_000);
    }
    if (!fs.existsSync(archive)) throw new Error(`the JVM wrote no archive: ${broker.output().slice(-2_000)}`);
    fs.renameSync(archive, path.join(inst.home, 'kafka.jsa'));
  } finally {
    fs.rmSync(archive, { force: true });
    removeScratchDir(dir);
  }
}

export interface KafkaStartOptions {
  /** Topics to create before startKafka resolves (name → partitions), replication factor 1. */
  readonly topics?: Record<string, number>;
  /**
   * `auto.create.topics.enable` (default true: a topic first named by a client is created with 4
   * partitions). `false` makes a missing topic an error, as it should be in production.
   */
  readonly autoCreateTopics?: boolean;
  /**
   * A second client listener for fault injection: the broker listens on `proxied.listen` but
   * tells clients that bootstrap there to connect to `proxied.advertised`, where the test runs a
   * proxy to `listen` (kafka-proxy.ts). Clients of `brokers` are not affected.
   */
  readonly proxied?: boolean;
  /** The folder in which the broker's own folder (its properties and data) is made; default: one in memory. */
  readonly base?: string;
}

export interface KafkaStartTimes {
  /** Installing the broker (the Maven fetch, formatting the template, the class archive): the first run on a machine only. */
  readonly installMs: number;
  /** From spawning the JVM to a broker in the cluster metadata. */
  readonly startMs: number;
  /** Loading the group coordinator, a producer id, and creating the requested topics. */
  readonly warmUpMs: number;
}

const KAFKA_START_ATTEMPTS = 3;
const KAFKA_START_TIMEOUT_MS = 60_000;

interface KafkaPorts {
  readonly client: number;
  readonly controller: number;
  readonly proxied?: { readonly listen: number; readonly advertised: number };
}

function kafkaProperties(logDir: string, ports: KafkaPorts, autoCreate: boolean): string {
  const listeners = [`PLAINTEXT://${LOOPBACK}:${ports.client}`, `CONTROLLER://${LOOPBACK}:${ports.controller}`];
  const advertised = [`PLAINTEXT://${LOOPBACK}:${ports.client}`];
  const protocols = ['PLAINTEXT:PLAINTEXT', 'CONTROLLER:PLAINTEXT'];
  if (ports.proxied) {
    listeners.push(`PROXIED://${LOOPBACK}:${ports.proxied.listen}`);
    advertised.push(`PROXIED://${LOOPBACK}:${ports.proxied.advertised}`);
    protocols.push('PROXIED:PLAINTEXT');
  }
  return [
    '# Generated by test/infra/services.ts: one KRaft node, broker and controller, on loopback.',
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.voters=1@${LOOPBACK}:${ports.controller}`,
    `listeners=${listeners.join(',')}`,
    `advertised.listeners=${advertised.join(',')}`,
    `listener.security.protocol.map=${protocols.join(',')}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    `log.dirs=${logDir}`,
    // One broker: replication factor 1 everywhere (docker-compose.yml does the same).
    'default.replication.factor=1',
    'min.insync.replicas=1',
    'offsets.topic.replication.factor=1',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    // Fewer internal partitions than the defaults (50): created faster, and tests need no more.
    'offsets.topic.num.partitions=4',
    'transaction.state.log.num.partitions=4',
    `auto.create.topics.enable=${autoCreate}`,
    'num.partitions=4',
    // Tests join groups with a 3 s session timeout (the broker's default minimum is 6 s) and
    // need no delay before the first rebalance.
    'group.initial.rebalance.delay.ms=0',
    'group.min.session.timeout.ms=1000',
    // As docker-compose.yml: a message holds a whole PUT body (OTM_BODY_LIMIT, 1 MiB).
    'message.max.bytes=2097152',
    // Sized for 2 cores and a small heap.
    'num.network.threads=2',
    'num.io.threads=2',
    'background.threads=2',
    'log.cleaner.dedupe.buffer.size=16777216',
    'log.cleaner.threads=1',
    '',
  ].join('\n');
}

/** A cluster id as `kafka-storage random-uuid` makes it: 16 random bytes, base64url, not starting with '-'. */
function kafkaClusterId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}

/** Writes server.properties and log4j.properties into `dir` and copies the formatted store to `dir/data`; the properties' path. */
function prepareKafkaDir(dir: string, inst: KafkaInstallation, ports: KafkaPorts, autoCreate: boolean): string {
  fs.cpSync(inst.template, path.join(dir, 'data'), { recursive: true });
  const props = path.join(dir, 'server.properties');
  fs.writeFileSync(props, kafkaProperties(path.join(dir, 'data'), ports, autoCreate));
  fs.writeFileSync(path.join(dir, 'log4j.properties'), KAFKA_LOG4J);
  return props;
}

function kafkaJvm(dir: string, libs: string, cds?: string): string[] {
  return [
    ...KAFKA_JVM_OPTIONS,
    ...(cds ? [`-XX:SharedArchiveFile=${cds}`, '-Xshare:auto', '-Xlog:cds=off', '-Xlog:cds+dynamic=off'] : []),
    `-Dlog4j.configuration=file:${path.join(dir, 'log4j.properties')}`,
    '-cp',
    `${libs}/*`,
  ];
}

/**
 * Starts Apache Kafka (the version docker-compose.yml pins) as one KRaft node on free loopback
 * ports, with its data in a scratch folder in memory, and creates `opts.topics`. The first call
 * on a machine installs the broker (kafkaInstallation(): from Maven Central); later ones are
 * offline. Resolves once the broker answers metadata, its group coordinator is loaded and it hands
 * out producer ids, so that the first join and the first idempotent produce of a test are quick.
 */
export async function startKafka(opts: KafkaStartOptions = {}): Promise<KafkaService> {
  const topics = Object.entries(opts.topics ?? {});
  for (const [name, partitions] of topics) {
    if (!TOPIC_NAME.test(name)) throw new Error(`startKafka: bad topic name ${JSON.stringify(name)}`);
    if (!Number.isInteger(partitions) || partitions < 1) throw new Error(`startKafka: bad partition count for ${name}: ${partitions}`);
  }
  requireServices(['kafka']);
  const t0 = Date.now();
  const inst = await kafkaInstallation();
  const installMs = Date.now() - t0;
  const java = findExecutable('java')!;
  const errors: string[] = [];
  for (let attempt = 1; attempt <= KAFKA_START_ATTEMPTS; attempt++) {
    const dir = makeScratchDir('otm-kafka-', opts.base ?? memoryBase());
    try {
      const [client, controller, proxiedListen, proxiedAdvertised] = await freePorts(opts.proxied ? 4 : 2);
      const ports: KafkaPorts = {
        client: client!,
        controller: controller!,
        ...(opts.proxied ? { proxied: { listen: proxiedListen!, advertised: proxiedAdvertised! } } : {}),
      };
      const props = prepareKafkaDir(dir, inst, ports, opts.autoCreateTopics ?? true);
      const args = [...kafkaJvm(dir, inst.libs, inst.cds), 'kafka.Kafka', props];
      const broker = await launchKafka(java, args, dir, ports.client);
      const t1 = Date.now();
      await warmUpKafka(`${LOOPBACK}:${ports.client}`, Object.fromEntries(topics));
      const times: KafkaStartTimes = { installMs, startMs: t1 - broker.spawnedAt, warmUpMs: Date.now() - t1 };
      return kafkaService(broker, { java, args, dir, ports, version: inst.version, times });
    } catch (e) {
      errors.push(`attempt ${attempt}: ${(e as Error).message}`);
      removeScratchDir(dir);
      if (!/Address already in use|BindException/i.test((e as Error).message)) break;
    }
  }
  throw new Error(`Kafka did not start:\n${errors.join('\n')}`);
}

function runJava(java: string, args: string[], cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(java, args, { cwd, timeout: 120_000, env: { ...process.env, LC_ALL: 'C' } }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${args.find((a) => a.startsWith('kafka.'))} failed: ${err.message}\n${stdout}\n${stderr}`.trim()));
      else resolve();
    });
  });
}

interface RunningBroker {
  readonly child: ChildProcess;
  readonly output: () => string;
  readonly spawnedAt: number;
}

/** Spawns the broker's JVM and waits until the broker is in the cluster's metadata. */
async function launchKafka(java: string, args: string[], dir: string, clientPort: number): Promise<RunningBroker> {
  const spawnedAt = Date.now();
  const child = spawnService(java, args, { cwd: dir });
  recordServer(dir, child);
  const out = tail(child.stdout, 16_000);
  const err = tail(child.stderr, 16_000);
  const output = () => `${out()}\n${err()}`.trim();
  let spawnError: Error | undefined;
  child.once('error', (e) => (spawnError = e));
  const deadline = Date.now() + KAFKA_START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (spawnError || exited(child)) break;
    if (await kafkaAnswers(`${LOOPBACK}:${clientPort}`)) {
      // Someone else's broker on a port taken meanwhile would answer too: ours must be alive.
      await sleep(20);
      if (!exited(child)) return { child, output, spawnedAt };
      break;
    }
    await sleep(100);
  }
  const died = exited(child);
  await killNow(child);
  const detail = `${spawnError?.message ?? ''}\n${output()}`.trim();
  throw new Error(
    died
      ? `the Kafka broker exited (code ${child.exitCode}, signal ${child.signalCode}) before answering: ${detail}`
      : `the Kafka broker did not answer on ${LOOPBACK}:${clientPort} within ${KAFKA_START_TIMEOUT_MS / 1000} s (${procState(child.pid)}): ${detail}`,
  );
}

/** True when a Kafka broker at `broker` answers a metadata request listing a broker. */
async function kafkaAnswers(broker: string): Promise<boolean> {
  const admin = new Kafka({
    brokers: [broker],
    logLevel: KafkaLogLevel.NOTHING,
    connectionTimeout: 500,
    requestTimeout: 2_000,
    retry: { retries: 0 },
  }).admin();
  try {
    await admin.connect();
    const cluster = await admin.describeCluster();
    return cluster.brokers.length > 0;
  } catch {
    return false;
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/**
 * Creates `topics`, loads the group coordinator (its topic `__consumer_offsets` is made on first
 * use) and has the broker hand out a producer id (an idempotent producer's first request).
 */
async function warmUpKafka(broker: string, topics: Record<string, number>): Promise<void> {
  const kafka = new Kafka({
    brokers: [broker],
    logLevel: KafkaLogLevel.NOTHING,
    retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 1_000 },
  });
  const admin = kafka.admin();
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  try {
    await admin.connect();
    const list = Object.entries(topics).map(([topic, numPartitions]) => ({ topic, numPartitions, replicationFactor: 1 }));
    if (list.length > 0) await admin.createTopics({ topics: list, waitForLeaders: true, timeout: 30_000 });
    await admin.describeGroups(['otm-test-warm-up']);
    await producer.connect();
  } finally {
    await producer.disconnect().catch(() => {});
    await admin.disconnect().catch(() => {});
  }
}

function kafkaService(
  first: RunningBroker,
  cfg: { java: string; args: string[]; dir: string; ports: KafkaPorts; version: string; times: KafkaStartTimes },
): KafkaService {
  let broker = first;
  let stopped = false;
  const { proxied } = cfg.ports;
  return {
    brokers: [`${LOOPBACK}:${cfg.ports.client}`],
    version: cfg.version,
    get pid() {
      return broker.child.pid!;
    },
    ...(proxied ? { proxied: { listen: `${LOOPBACK}:${proxied.listen}`, advertised: `${LOOPBACK}:${proxied.advertised}` } } : {}),
    times: cfg.times,
    output: () => broker.output(),
    stop: async () => {
      if (stopped) return;
      stopped = true;
      // Its data goes with it: no need for the broker's own shutdown (2-3 s).
      broker.child.kill('SIGCONT');
      await killNow(broker.child);
      removeScratchDir(cfg.dir);
    },
    kill: async () => {
      broker.child.kill('SIGCONT');
      await killNow(broker.child);
    },
    pause: () => void broker.child.kill('SIGSTOP'),
    resume: () => void broker.child.kill('SIGCONT'),
    restart: async () => {
      if (stopped) throw new Error('startKafka: restart() after stop()');
      broker.child.kill('SIGCONT');
      await terminate(broker.child, 20_000);
      broker = await launchKafka(cfg.java, cfg.args, cfg.dir, cfg.ports.client);
    },
  };
}

const TOPIC_NAME = /^[A-Za-z0-9._-]{1,249}$/;

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

// ---------------------------------------------------------------------------------------------
// ClickHouse: a current engine (chdb) behind test/infra/clickhouse-front.mjs, a process of its own

async function httpOk(url: string, timeoutMs: number): Promise<string | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const body = await res.text();
    return res.ok ? body : undefined;
  } catch {
    return undefined;
  }
}

const CLICKHOUSE_FRONT = path.join(HERE, 'clickhouse-front.mjs');

/** Whether the chdb package (a devDependency: `npm ci` installs it) can be loaded from here. */
function chdbInstalled(): boolean {
  try {
    createRequire(import.meta.url).resolve('chdb');
    return true;
  } catch {
    return false;
  }
}

/** A front that answered /ping, or why it did not. */
type ClickHouseLaunch = { child: ChildProcess } | { error: Error; portTaken: boolean };

/**
 * Runs the front (clickhouse-front.mjs) on the data folder `dir/data` and `port`, and waits up to
 * 60 s for its /ping on `url` (the engine loads every table of the folder before it listens).
 */
async function launchClickHouse(dir: string, port: number, url: string): Promise<ClickHouseLaunch> {
  const child = spawnService(process.execPath, [CLICKHOUSE_FRONT, path.join(dir, 'data'), String(port)], { cwd: dir });
  recordServer(dir, child);
  const stderr = tail(child.stderr);
  const stdout = tail(child.stdout);
  let spawnError: Error | undefined;
  child.once('error', (e) => (spawnError = e));
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (spawnError || exited(child)) break;
    if (stdout().includes('listening') && (await httpOk(`${url}/ping`, 1_000))?.startsWith('Ok')) return { child };
    await sleep(50);
  }
  const died = exited(child);
  await killNow(child);
  const detail = `${spawnError?.message ?? ''}\n${stderr()}\n${stdout()}`.trim();
  return {
    error: new Error(
      died
        ? `the test ClickHouse (chdb front) exited before answering /ping: ${detail}`
        : `the test ClickHouse (chdb front) did not answer ${url}/ping within 60 s: ${detail}`,
    ),
    portTaken: /EADDRINUSE|address already in use/i.test(detail),
  };
}

/**
 * Starts the tests' ClickHouse: a current ClickHouse engine (chdb) behind a thin HTTP front in a
 * Node process of its own (test/infra/clickhouse-front.mjs; README "ClickHouse" for what it
 * speaks and its limits), on a free loopback port with its data in a temp folder, and returns its
 * HTTP URL once /ping answers. With CLICKHOUSE_URL set, returns that server instead (stop() then
 * does nothing; shutdown(), kill() and restart() throw).
 */
export async function startClickHouse(): Promise<ClickHouseService> {
  const envUrl = process.env.CLICKHOUSE_URL;
  if (envUrl) {
    const url = envUrl.replace(/\/+$/, '');
    const notOurs = async () => {
      throw new Error(`startClickHouse: cannot stop or restart the external ClickHouse at ${url} (CLICKHOUSE_URL)`);
    };
    return { url, external: true, stop: async () => {}, shutdown: notOurs, kill: notOurs, restart: notOurs };
  }
  requireServices(['clickhouse']);
  let lastError: Error | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const dir = makeScratchDir('otm-clickhouse-', memoryBase());
    try {
      const port = await freePort();
      fs.mkdirSync(path.join(dir, 'data'), { recursive: true });
      const url = `http://${LOOPBACK}:${port}`;
      const launched = await launchClickHouse(dir, port, url);
      if ('child' in launched) return clickHouseService(dir, port, url, launched.child);
      lastError = launched.error;
      removeScratchDir(dir);
      if (!launched.portTaken) break;
    } catch (e) {
      removeScratchDir(dir);
      throw e;
    }
  }
  throw lastError ?? new Error('the test ClickHouse did not start');
}

function clickHouseService(dir: string, port: number, url: string, first: ChildProcess): ClickHouseService {
  let current = first;
  let stopped = false;
  /** Stops the front (SIGTERM, SIGKILL after `graceMs`; or SIGKILL at once): how it ended. */
  const halt = async (graceMs: number): Promise<'exited' | 'killed'> => {
    if (exited(current)) return 'exited';
    current.kill('SIGCONT');
    if (graceMs > 0) {
      current.kill('SIGTERM');
      if (await waitExit(current, graceMs)) return 'exited';
    }
    await killNow(current);
    return 'killed';
  };
  return {
    url,
    external: false,
    get pid() {
      return current.pid;
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await halt(10_000);
      removeScratchDir(dir);
    },
    shutdown: async () => {
      if (stopped) throw new Error('startClickHouse: shutdown() after stop()');
      return halt(10_000);
    },
    kill: async () => {
      if (stopped) throw new Error('startClickHouse: kill() after stop()');
      await halt(0);
    },
    restart: async () => {
      if (stopped) throw new Error('startClickHouse: restart() after stop()');
      await halt(10_000);
      // The same port: a client keeps its URL. It was ours a moment ago; should another process
      // take it meanwhile, the start fails and says so (a few tries, a second apart).
      let launched: ClickHouseLaunch | undefined;
      for (let attempt = 0; attempt < 5; attempt++) {
        if (attempt > 0) await sleep(1_000);
        launched = await launchClickHouse(dir, port, url);
        if ('child' in launched || !launched.portTaken) break;
      }
      if (launched === undefined || !('child' in launched)) throw launched?.error ?? new Error('the test ClickHouse did not start again');
      current = launched.child;
    },
  };
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
