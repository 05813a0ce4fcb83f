/**
 * The distributed deployment as separate processes on loopback, for tests: a Kafka broker (the
 * version docker-compose.yml pins), ClickHouse (a current engine) and a private Redis (started by
 * test/infra/services.ts), `otm migrate` (the ClickHouse tables and the Kafka topics), then
 * `otm ingress`, `otm query`, `otm worker` and `otm dispatcher` (webhooks) as child processes, and a
 * small router in front that sends GET and HEAD to the query process and everything else to the
 * ingress, so that a client has one base URL as it would behind a gateway (both serve the webhook
 * subscriptions API).
 */
import { execFile } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { TOPICS } from '@otm/core';
import {
  startClickHouse,
  startKafka,
  startRedis,
  type KafkaService,
  type ClickHouseService,
  type KafkaStartOptions,
  type RedisService,
} from '../infra/services.js';
import { OTM_BIN, startOtm, stop, type Running } from '../process.js';

const run = promisify(execFile);

export const TOKENS = 'writer-token-acme:acme:read+write,reader-token-acme:acme:read,writer-token-globex:globex:read+write';

export interface Cluster {
  readonly url: string;
  readonly kafka: KafkaService;
  readonly clickhouse: ClickHouseService;
  readonly redis: RedisService;
  readonly env: Record<string, string>;
  readonly processes: Map<string, Running>;
  /** Starts another process of a role (e.g. a second worker). */
  startRole(name: string, args: string[]): Promise<Running>;
  stopRole(name: string, signal?: NodeJS.Signals): Promise<void>;
  close(): Promise<void>;
}

/**
 * Starts the deployment. The topics are created by `otm migrate`, as in production, with the
 * broker's auto-create off, so that a topic migrate misses fails the tests; with `partitions`
 * they are created beforehand with that many partitions each (migrate then leaves them).
 * `kafka` passes options to startKafka (e.g. `proxied` for a fault-injecting proxy).
 */
export async function startCluster(
  opts: {
    partitions?: number;
    logLevel?: string;
    tokens?: string;
    env?: Record<string, string>;
    kafka?: Omit<KafkaStartOptions, 'topics' | 'autoCreateTopics'>;
  } = {},
): Promise<Cluster> {
  const p = opts.partitions;
  // All three at once (the broker's JVM takes the longest); if one fails, the others are stopped.
  const started = await Promise.allSettled([
    startKafka({
      ...opts.kafka,
      autoCreateTopics: false,
      ...(p === undefined ? {} : { topics: { [TOPICS.entities]: p, [TOPICS.telemetry]: p, [TOPICS.deadLetter]: 1 } }),
    }),
    startClickHouse(),
    startRedis({ own: true }),
  ] as const);
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) {
    await Promise.all(started.flatMap((r) => (r.status === 'fulfilled' ? [r.value.stop()] : [])));
    throw failed.reason;
  }
  const [kafka, clickhouse, redis] = started.map((r) => (r as PromiseFulfilledResult<unknown>).value) as [
    KafkaService,
    ClickHouseService,
    RedisService,
  ];
  const env: Record<string, string> = {
    OTM_BUS: 'kafka',
    KAFKA_BROKERS: kafka.brokers.join(','),
    OTM_ENTITY_STORE: 'redis',
    REDIS_URL: redis.url,
    OTM_EVENT_STORE: 'clickhouse',
    CLICKHOUSE_URL: clickhouse.url,
    OTM_TOKENS: opts.tokens ?? TOKENS,
    LOG_LEVEL: opts.logLevel ?? 'warn',
    // Fast group timings: a worker that died is noticed and a rebalance is over within seconds
    // (the test broker accepts session timeouts from 1 s).
    KAFKA_SESSION_TIMEOUT_MS: '3000',
    KAFKA_HEARTBEAT_MS: '500',
    KAFKA_REBALANCE_TIMEOUT_MS: '3000',
    KAFKA_MAX_WAIT_MS: '100',
    KAFKA_PUBLISH_TIMEOUT_MS: '3000',
    ...opts.env,
  };
  await run(process.execPath, [OTM_BIN, 'migrate'], { env: { PATH: process.env.PATH ?? '', ...env } });

  const processes = new Map<string, Running>();
  const startRole = async (name: string, args: string[]) => {
    const r = await startOtm(args, env);
    processes.set(name, r);
    return r;
  };
  const roles = await Promise.allSettled(['ingress', 'query', 'worker', 'dispatcher'].map((role) => startRole(role, [role])));
  const failedRole = roles.find((r) => r.status === 'rejected');
  if (failedRole) {
    // Nothing left running behind a failed start: the roles that came up, and the services.
    await Promise.all([...processes.values()].map((r) => stop(r, 'SIGKILL')));
    await Promise.all([kafka.stop(), clickhouse.stop(), redis.stop()]);
    throw failedRole.reason;
  }

  const target = (method: string | undefined) => {
    const p = processes.get(method === 'GET' || method === 'HEAD' ? 'query' : 'ingress');
    return p === undefined ? undefined : new URL(p.url);
  };
  const router = http.createServer((req, res) => {
    const t = target(req.method);
    // The role is stopped (stopRole) and not started again yet: a proxy answers 502.
    if (t === undefined) {
      res.writeHead(502).end();
      return;
    }
    const up = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
    // A client that goes away (a stream it closes) closes the upstream request too, as a proxy does.
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  });
  await new Promise<void>((resolve) => router.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(router.address() as AddressInfo).port}`;

  return {
    url,
    kafka,
    clickhouse,
    redis,
    env,
    processes,
    startRole,
    stopRole: async (name, signal = 'SIGTERM') => {
      const r = processes.get(name);
      if (r) await stop(r, signal);
      processes.delete(name);
    },
    close: async () => {
      // Kept-alive client connections would hold close() up for as long as they are used.
      router.closeAllConnections();
      await new Promise<void>((resolve) => router.close(() => resolve()));
      await Promise.all([...processes.values()].map((r) => stop(r, 'SIGTERM')));
      await kafka.stop();
      await clickhouse.stop();
      await redis.stop();
    },
  };
}

/** Polls `check` until it returns a value that is not undefined, or fails after `ms`. */
export async function eventually<T>(check: () => Promise<T | undefined>, ms = 15_000, what = 'condition'): Promise<T> {
  const until = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- whatever was thrown, as String() shows it (an Error: its name and message)
    if (Date.now() > until) throw new Error(`${what} not reached within ${ms} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
