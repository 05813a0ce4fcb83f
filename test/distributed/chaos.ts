/**
 * Chaos on the distributed deployment (cluster.ts): steady writes through the router while a
 * schedule of faults, drawn from a seed (or given), stops, kills (SIGKILL) and starts again Kafka,
 * Redis, ClickHouse and each `otm` role. Afterwards, with everything running again:
 * - every acknowledged write (a 200 to any of its attempts) is readable as sent, within a bound;
 * - every acknowledged write arrived at a webhook subscribed from the start;
 * - no process is left with a consumer or loop down (/readyz and /healthz 200 on each), and the
 *   workers' consumers have caught up (otm_consumer_lag 0 on every partition).
 * A write is retried (same id, so the retry is harmless) on 502, 503, a reset connection or a
 * timeout, as a client of the service does; a 4xx other than those is a failure of the run.
 *
 * Used by test/distributed/chaos.test.ts (a few minutes, in `npm test`) and bench/chaos.mjs (any
 * length, any seed).
 */
import { startReceiver, type Receiver } from '../../services/otm/test/receiver.js';
import type { Cluster } from './cluster.js';

const H = { authorization: 'Bearer writer-token-acme', 'content-type': 'application/json' };
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A small seeded generator (mulberry32): the same seed gives the same schedule. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export type Role = 'ingress' | 'query' | 'worker' | 'dispatcher';
export type Fault =
  | { readonly at: number; readonly what: 'kafka-kill' | 'redis-kill' | 'clickhouse-kill' | 'clickhouse-freeze'; readonly downMs: number }
  | { readonly at: number; readonly what: 'kafka-restart' }
  | { readonly at: number; readonly what: 'role-kill'; readonly role: Role; readonly downMs: number }
  | { readonly at: number; readonly what: 'role-restart'; readonly role: Role };

const describeFault = (f: Fault): string =>
  `${(f.at / 1000).toFixed(1)}s ${f.what}${'role' in f ? ` ${f.role}` : ''}${'downMs' in f ? ` for ${(f.downMs / 1000).toFixed(1)}s` : ''}`;

/**
 * `count` faults from `seed`, one after the other: each starts 0 to `maxGapMs` after the previous
 * one ended (0: at once, e.g. Kafka killed while a worker started a moment ago is still joining).
 */
export function schedule(seed: number, count: number, maxGapMs = 6_000): Fault[] {
  const r = random(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const between = (lo: number, hi: number) => Math.round(lo + r() * (hi - lo));
  const roles: Role[] = ['ingress', 'query', 'worker', 'dispatcher'];
  const out: Fault[] = [];
  let at = between(2_000, 5_000);
  for (let i = 0; i < count; i++) {
    const kind = pick([
      'kafka-kill',
      'kafka-restart',
      'redis-kill',
      'clickhouse-kill',
      'clickhouse-freeze',
      'role-kill',
      'role-kill',
      'role-restart',
    ] as const);
    let f: Fault;
    if (kind === 'kafka-restart') f = { at, what: kind };
    else if (kind === 'role-kill') f = { at, what: kind, role: pick(roles), downMs: between(0, 5_000) };
    else if (kind === 'role-restart') f = { at, what: kind, role: pick(roles) };
    else f = { at, what: kind, downMs: between(2_000, kind === 'clickhouse-freeze' ? 8_000 : 12_000) };
    out.push(f);
    at += ('downMs' in f ? f.downMs : 0) + between(0, maxGapMs) + 1_000;
  }
  return out;
}

/** The issue's fixed sequence: ClickHouse 15 s, Redis 10 s, the worker and the query role SIGKILLed, Kafka 10 s. */
export const FIXED_SEQUENCE: readonly Fault[] = [
  { at: 5_000, what: 'clickhouse-kill', downMs: 15_000 },
  { at: 25_000, what: 'redis-kill', downMs: 10_000 },
  { at: 40_000, what: 'role-kill', role: 'worker', downMs: 2_000 },
  { at: 50_000, what: 'role-kill', role: 'query', downMs: 2_000 },
  { at: 60_000, what: 'kafka-kill', downMs: 10_000 },
];

const dead = (pid: number | undefined) => {
  if (pid === undefined) return true;
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
};

/**
 * Starts a part again, up to three times: on a loaded machine a JVM or a role may not come up in
 * time, and an operator would start it once more. The chaos is in the faults, not in the starts.
 */
async function startAgain(what: string, start: () => Promise<unknown>, log: (line: string) => void): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await start();
      return;
    } catch (e) {
      if (attempt >= 3) throw e;
      log(`chaos: ${what} did not start again (${(e as Error).message.split('\n')[0]}); once more`);
      await sleep(2_000);
    }
  }
}

/** Applies one fault and undoes it; resolves once the part is started again. */
async function apply(c: Cluster, f: Fault, log: (line: string) => void): Promise<void> {
  switch (f.what) {
    case 'kafka-kill':
      await c.kafka.kill();
      await sleep(f.downMs);
      await startAgain('kafka', () => c.kafka.restart(), log);
      return;
    case 'kafka-restart':
      await startAgain('kafka', () => c.kafka.restart(), log);
      return;
    case 'redis-kill': {
      const pid = c.redis.pid;
      if (pid !== undefined) process.kill(pid, 'SIGKILL');
      while (!dead(pid)) await sleep(20);
      await sleep(f.downMs);
      await startAgain('redis', () => c.redis.restart(), log);
      return;
    }
    case 'clickhouse-kill':
      await c.clickhouse.kill();
      await sleep(f.downMs);
      await startAgain('clickhouse', () => c.clickhouse.restart(), log);
      return;
    case 'clickhouse-freeze': {
      const pid = c.clickhouse.pid!;
      process.kill(pid, 'SIGSTOP');
      await sleep(f.downMs);
      process.kill(pid, 'SIGCONT');
      return;
    }
    case 'role-kill':
      await c.stopRole(f.role, 'SIGKILL');
      await sleep(f.downMs);
      await startAgain(f.role, () => c.startRole(f.role, [f.role]), log);
      return;
    case 'role-restart':
      await c.stopRole(f.role, 'SIGTERM');
      await startAgain(f.role, () => c.startRole(f.role, [f.role]), log);
      return;
  }
}

interface Written {
  readonly path: string;
  readonly doc: Record<string, unknown>;
  /** 200 once any attempt got it; else the last answer. */
  status: number | 'error' | 'pending';
  attempts: number;
}

export interface ChaosResult {
  readonly seed: number | undefined;
  readonly faults: string[];
  readonly writes: number;
  readonly acknowledged: number;
  readonly attempts: number;
  /** Writes answered with a status the client must not retry (a 4xx): a failure of the run. */
  readonly refused: string[];
  /** Acknowledged writes not readable as sent at the end of the bound. */
  readonly lost: string[];
  /** Acknowledged writes that never reached the webhook receiver within the bound. */
  readonly undelivered: string[];
  /** Processes whose /readyz or /healthz was not 200 at the end, with what they said. */
  readonly unhealthy: string[];
  /** Seconds from the end of the last fault until every acknowledged write was readable. */
  readonly visibleAfterSeconds: number;
  readonly seconds: number;
}

/**
 * Runs `faults` while writing `rate` documents a second (vehicles and location events
 * alternately, ids from `prefix`, 8 hex digits) until the last fault is over and `tailMs` more;
 * then checks. Nothing here asserts: the caller reads the result.
 */
export async function runChaos(
  c: Cluster,
  opts: {
    prefix: string;
    faults: readonly Fault[];
    seed?: number;
    rate: number;
    tailMs?: number;
    boundMs?: number;
    /** No fault starts later than this after the start (ms): starting Kafka again takes longer than a fault's own time. */
    untilMs?: number;
    log?: (line: string) => void;
  },
): Promise<ChaosResult> {
  const log = opts.log ?? (() => {});
  const started = Date.now();
  const receiver = await startReceiver();
  const sub = await call(c, 'POST', '/api/v5/subscriptions', { url: receiver.url, kinds: ['vehicles', 'events'] });
  if (typeof sub?.id !== 'string') throw new Error(`chaos: could not subscribe the webhook: ${JSON.stringify(sub)}`);

  const written: Written[] = [];
  let stopWriting = false;
  let stopAt = Infinity;
  let inFlight = 0;
  const writeOne = async (n: number) => {
    const w = documentOf(opts.prefix, n);
    written.push(w);
    inFlight++;
    try {
      while (w.status !== 200) {
        w.attempts++;
        w.status = await put(c, w);
        if (w.status === 200 || (typeof w.status === 'number' && w.status < 500 && w.status !== 408 && w.status !== 429)) break;
        if (stopWriting && Date.now() > stopAt + 60_000) break;
        await sleep(Math.min(2_000, 100 * w.attempts));
      }
    } finally {
      inFlight--;
    }
  };
  const pacing = (async () => {
    const every = 1000 / opts.rate;
    const t0 = Date.now();
    for (let n = 0; !stopWriting; n++) {
      const due = t0 + n * every;
      if (due > Date.now()) await sleep(due - Date.now());
      // Bounded: a client that cannot get through stops sending new writes, as a real one would.
      while (inFlight >= 400 && !stopWriting) await sleep(20);
      void writeOne(n);
    }
  })();

  // The faults, in their order; each starts at its time (or once the previous one is over).
  const faultLines: string[] = [];
  try {
    for (const f of opts.faults) {
      if (opts.untilMs !== undefined && Date.now() - started > opts.untilMs) break;
      const wait = started + f.at - Date.now();
      if (wait > 0) await sleep(wait);
      const line = describeFault(f);
      faultLines.push(line);
      log(`chaos: ${line}`);
      await apply(c, f, log);
    }
  } catch (e) {
    // A fault that could not be undone (a server that does not start again) is the harness's
    // failure, not the service's: stop writing and say which.
    stopWriting = true;
    await pacing;
    throw new Error(`chaos: ${faultLines.at(-1) ?? 'a fault'} could not be undone: ${(e as Error).message}`, { cause: e });
  }
  const faultsOver = Date.now();
  await sleep(opts.tailMs ?? 5_000);
  stopWriting = true;
  stopAt = Date.now();
  await pacing;
  while (inFlight > 0) await sleep(50);

  const bound = opts.boundMs ?? 120_000;
  const acked = written.filter((w) => w.status === 200);
  const refused = written.filter((w) => typeof w.status === 'number' && w.status !== 200).map((w) => `${w.path}: ${w.status}`);
  const lost = await unreadable(c, acked, bound);
  const visibleAfterSeconds = (Date.now() - faultsOver) / 1000;
  const undelivered = await notDelivered(receiver, acked, bound);
  await receiver.close();
  const unhealthy = await unhealthyProcesses(c, 60_000);
  return {
    seed: opts.seed,
    faults: faultLines,
    writes: written.length,
    acknowledged: acked.length,
    attempts: written.reduce((n, w) => n + w.attempts, 0),
    refused,
    lost,
    undelivered,
    unhealthy,
    visibleAfterSeconds,
    seconds: (Date.now() - started) / 1000,
  };
}

/** The n-th document: a vehicle (even n) or a location event of one of 50 vehicles (odd n). */
function documentOf(prefix: string, n: number): Written {
  const id = `${prefix}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
  if (n % 2 === 0)
    return { path: `/api/v5/vehicles/${id}`, doc: { entityType: 'vehicle', id, name: `truck ${n}` }, status: 'pending', attempts: 0 };
  const doc = {
    eventType: 'locationUpdateEvent',
    id,
    lifecycle: 'actual',
    creationDate: new Date(Date.UTC(2026, 10, 1) + n * 1000).toISOString(),
    geoReference: { type: 'latLonPointGeoReference', lat: 52 + (n % 1000) / 10_000, lon: 5 + (n % 777) / 10_000 },
    vehicle: {
      associationType: 'reference',
      entityType: 'vehicle',
      uuid: `${prefix}-0000-4000-8000-${(n % 50).toString(16).padStart(12, '0')}`,
    },
  };
  return { path: `/api/v5/events/${id}`, doc, status: 'pending', attempts: 0 };
}

async function put(c: Cluster, w: Written): Promise<number | 'error'> {
  const kind = w.path.split('/')[3]!;
  try {
    const res = await fetch(`${c.url}/api/v5/${kind}`, {
      method: 'PUT',
      headers: H,
      body: JSON.stringify(w.doc),
      signal: AbortSignal.timeout(15_000),
    });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 'error';
  }
}

async function call(c: Cluster, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${c.url}${path}`, { method, headers: H, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const text = await res.text();
  return text === '' ? undefined : JSON.parse(text);
}

/** Whether GET answers the document as it was written. */
async function readable(c: Cluster, w: Written): Promise<boolean> {
  try {
    const res = await fetch(`${c.url}${w.path}`, { headers: H, signal: AbortSignal.timeout(10_000) });
    if (res.status !== 200) {
      await res.arrayBuffer();
      return false;
    }
    const got = (await res.json()) as Record<string, any>;
    if (got.id !== w.doc.id) return false;
    if ('name' in w.doc) return got.name === w.doc.name;
    const geo = (w.doc as { geoReference: { lat: number; lon: number } }).geoReference;
    return got.geoReference?.lat === geo.lat && got.geoReference?.lon === geo.lon;
  } catch {
    return false;
  }
}

/** The acknowledged writes still not readable as sent after `ms` (checked again and again, 16 at a time). */
async function unreadable(c: Cluster, acked: readonly Written[], ms: number): Promise<string[]> {
  let pending = [...acked];
  const until = Date.now() + ms;
  for (;;) {
    const next: Written[] = [];
    for (let i = 0; i < pending.length; i += 16) {
      const part = pending.slice(i, i + 16);
      const ok = await Promise.all(part.map((w) => readable(c, w)));
      part.forEach((w, j) => (ok[j] ? undefined : next.push(w)));
    }
    pending = next;
    if (pending.length === 0 || Date.now() > until) return pending.map((w) => w.path);
    await sleep(1_000);
  }
}

async function notDelivered(receiver: Receiver, acked: readonly Written[], ms: number): Promise<string[]> {
  const until = Date.now() + ms;
  for (;;) {
    const got = new Set(receiver.delivered().map((ch) => `/api/v5/${ch.kind}/${ch.id}`));
    const missing = acked.filter((w) => !got.has(w.path)).map((w) => w.path);
    if (missing.length === 0 || Date.now() > until) return missing;
    await sleep(1_000);
  }
}

/** The processes whose probes are not 200, or whose consumers lag, once `ms` have passed. */
async function unhealthyProcesses(c: Cluster, ms: number): Promise<string[]> {
  const until = Date.now() + ms;
  for (;;) {
    const bad: string[] = [];
    for (const [name, p] of c.processes) {
      for (const probe of ['/healthz', '/readyz']) {
        try {
          const res = await fetch(`${p.url}${probe}`, { signal: AbortSignal.timeout(5_000) });
          if (res.status !== 200) bad.push(`${name} ${probe} ${res.status} ${(await res.text()).slice(0, 300)}`);
          else await res.arrayBuffer();
        } catch (e) {
          bad.push(`${name} ${probe} ${(e as Error).message}`);
        }
      }
      if (name.startsWith('worker')) {
        const metrics = await (await fetch(`${p.url}/metrics`)).text();
        const lagging = [...metrics.matchAll(/^otm_consumer_lag\{([^}]*)\} (\d+)$/gm)].filter((m) => m[2] !== '0');
        const down = [...metrics.matchAll(/^otm_consumer_up\{([^}]*)\} 0$/gm)];
        if (lagging.length > 0) bad.push(`${name} lags: ${lagging.map((m) => `${m[1]} ${m[2]}`).join('; ')}`);
        if (down.length > 0) bad.push(`${name} consumer down: ${down.map((m) => m[1]).join('; ')}`);
      }
    }
    if (bad.length === 0 || Date.now() > until) return bad;
    await sleep(1_000);
  }
}

/** One line of figures, for the test's output and the bench. */
export function summary(r: ChaosResult): string {
  return (
    `chaos${r.seed === undefined ? '' : ` seed ${r.seed}`}: ${r.faults.length} faults in ${r.seconds.toFixed(0)} s; ` +
    `${r.writes} writes (${r.attempts} attempts), ${r.acknowledged} acknowledged, ${r.refused.length} refused, ` +
    `${r.lost.length} lost, ${r.undelivered.length} not delivered to the webhook, ${r.unhealthy.length} processes unhealthy; ` +
    `every write found readable by ${r.visibleAfterSeconds.toFixed(1)} s after the last fault (the check included)`
  );
}
