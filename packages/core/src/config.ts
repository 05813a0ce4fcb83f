/**
 * Configuration from environment variables, read once at start, validated, frozen. A bad value
 * stops the process with a message that names the variable.
 */
import os from 'node:os';
import path from 'node:path';
import { parseAddressRanges, type AddressRange } from './address-ranges.js';
import type { RateLimit } from './rate-limit.js';
import { parseTokens, type TokenEntry } from './tokens.js';
import {
  ConfigError,
  type Env,
  oneOf,
  integer,
  duration,
  durationOrOff,
  rateLimit,
  url,
  addressRanges,
  jwtConfig,
  mapStyle,
  webDir,
} from './config-values.js';

export { parseAddressRanges, type AddressRange };
export { ConfigError };

/**
 * How long a client may take and how many connections it may hold. The HTTP server cuts off a
 * client that has not sent its headers, or its whole request, within these times, whatever the
 * request or its token; it also closes a kept-alive connection that waits too long for its next
 * request, and one on which nothing moves (a client that does not read its answer).
 */
export interface ConnectionLimits {
  /** From the first byte of a request to the end of its headers (ms). */
  readonly headersTimeoutMs: number;
  /** From the first byte of a request to the end of its body (ms). */
  readonly requestTimeoutMs: number;
  /** How long a kept-alive connection may wait for its next request (ms); Node closes it 1 s after that. */
  readonly keepAliveTimeoutMs: number;
  /**
   * How long nothing may be read from or written to a connection (ms), except while the service
   * works on its request, and between requests on a kept-alive connection (the keep-alive timeout
   * applies there).
   */
  readonly idleTimeoutMs: number;
  /** Most connections open at once; more are closed as they come. */
  readonly maxConnections: number;
}

/** The connection limits when the environment sets none. */
export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = Object.freeze({
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  // The service must never be the side that closes an idle kept-alive connection, or a proxy may
  // send a request on it just as it closes and answer its client 502. So this is longer than the
  // proxies and load balancers in front keep idle connections (deploy/nginx/otm.conf: 30 s; nginx's
  // default and AWS's load balancer: 60 s), by a margin; Node closes the connection 1 s after it.
  // Google Cloud's load balancers keep them 600 s: behind one, set more (docs/deployment.md).
  keepAliveTimeoutMs: 65_000,
  // Not applied between requests on a kept-alive connection: there Node uses the keep-alive timeout.
  idleTimeoutMs: 30_000,
  maxConnections: 1024,
});

/** JWT bearer tokens: where the keys are, what the tokens must say, where tenant and scopes are. */
export interface JwtConfig {
  /** A JWKS file (read at start, read again when it changes) or an https URL (fetched, cached, refreshed). */
  readonly jwks: { readonly file: string } | { readonly url: string };
  readonly issuer: string;
  readonly audience: string;
  readonly tenantClaim: string;
  readonly scopeClaim: string;
}

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly dataDir: string;
  readonly bus: 'memory' | 'kafka';
  readonly kafkaBrokers: readonly string[];
  readonly entityStore: 'embedded' | 'redis';
  readonly redisUrl: string | undefined;
  /** Keep recently read entities in the process, told of changes by Redis (CLIENT TRACKING). */
  readonly redisCache: boolean;
  readonly eventStore: 'embedded' | 'clickhouse';
  readonly clickhouseUrl: string | undefined;
  /** Undefined when OTM_TOKENS is unset (then `otm serve` makes and keeps a token). */
  readonly tokens: readonly TokenEntry[] | undefined;
  /** JWT bearer tokens checked against a JWKS (OTM_JWT_*); undefined when OTM_JWT_JWKS is unset. */
  readonly jwt: JwtConfig | undefined;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Largest accepted request body, in bytes. */
  readonly bodyLimit: number;
  /** Deepest accepted nesting of objects and arrays in a document. */
  readonly maxDepth: number;
  /** Largest bulk request body, in bytes, and most documents in one. */
  readonly bulkLimit: number;
  readonly bulkMaxItems: number;
  /** Worker threads that parse and check large bulk bodies (0: the event loop does). */
  readonly bulkThreads: number;
  /** Timeouts and the cap on connections of the HTTP server. */
  readonly connections: ConnectionLimits;
  /** How long the change feed keeps changes (ms); an older cursor is answered 410. */
  readonly feedRetentionMs: number;
  /** Longest window of a vehicle track request, in days. */
  readonly trackMaxDays: number;
  /** A vehicle's activity: a stop is staying within this many metres (OTM_STOP_RADIUS_M) ... */
  readonly stopRadiusM: number;
  /** ... for at least this many seconds (OTM_STOP_MIN_SECONDS). */
  readonly stopMinSeconds: number;
  /** The radius of a location's geofence given as a point, metres (OTM_GEOFENCE_RADIUS_M). */
  readonly geofenceRadiusM: number;
  /** Seconds a consumer or background loop may stay down before /healthz answers 503 (OTM_STALL_SECONDS). */
  readonly stallSeconds: number;
  /** The embedded event log's segment size: a new segment starts beyond it (bytes). */
  readonly eventSegmentBytes: number;
  /** How often the embedded event log looks for sealed segments worth compacting (ms); 0: never. */
  readonly eventCompactionIntervalMs: number;
  /** Most open streams (GET /api/v5/stream) of one token in one process; more are answered 429. */
  readonly streamsPerToken: number;
  /** Requests (bulk documents each) a credential may make (OTM_RATE_LIMIT); undefined: no limit. */
  readonly rateLimit: RateLimit | undefined;
  /** The same for all the credentials of one tenant together (OTM_TENANT_RATE_LIMIT). */
  readonly tenantRateLimit: RateLimit | undefined;
  /**
   * The secret stream tickets are signed with (HMAC-SHA256); undefined: a key derived from the
   * tokens of OTM_TOKENS, the same in every process given the same tokens.
   */
  readonly streamTicketSecret: string | undefined;
  /**
   * How often the telemetry worker copies entity changes from the Redis change feed into
   * ClickHouse's otm_entities (ms); 0: never (docs/analytics.md, "Entity tables").
   */
  readonly entityExportIntervalMs: number;
  /** Most changes in one webhook delivery (OTM_WEBHOOK_BATCH). */
  readonly webhookBatch: number;
  /**
   * Addresses and ranges webhook deliveries may reach although they are private, loopback, link-local
   * and so on (OTM_WEBHOOK_ALLOW), as `address/prefix` (IPv4 or IPv6); empty: none.
   */
  readonly webhookAllow: readonly AddressRange[];
  /** OTM_MAP_STYLE: the tile URL template of the fleet page's map, or undefined (land outlines only). */
  readonly mapStyle: string | undefined;
  /** OTM_WEB_DIR: the folder of the built pages (absolute), or undefined (services/web/dist beside the service). */
  readonly webDir: string | undefined;
  /** Kafka client timings (ms). */
  readonly kafka: {
    readonly publishTimeoutMs: number;
    readonly lingerMs: number;
    readonly maxRequestBytes: number;
    readonly sessionTimeoutMs: number;
    readonly heartbeatMs: number;
    readonly rebalanceTimeoutMs: number;
    readonly maxWaitMs: number;
  };
}

/**
 * Every variable the service reads, with its meaning. A test keeps it, the variables `loadConfig`
 * reads and the table of docs/configuration.md in step.
 */
export const CONFIG_VARIABLES = {
  PORT: 'TCP port of the HTTP interface (default 8080)',
  HOST: 'address to listen on (default 127.0.0.1)',
  OTM_DATA_DIR: 'folder of the embedded store and the generated token (default ./data)',
  OTM_BUS: 'memory (in-process, default) or kafka',
  KAFKA_BROKERS: 'comma-separated host:port list, required when OTM_BUS=kafka',
  OTM_ENTITY_STORE: 'embedded (default) or redis',
  REDIS_URL: 'redis://host:port, required when OTM_ENTITY_STORE=redis',
  OTM_REDIS_CACHE:
    'on (default): each process keeps recently read entities, dropped when Redis says they changed (Redis 6+); off: every GET asks Redis',
  OTM_EVENT_STORE: 'embedded (default) or clickhouse',
  CLICKHOUSE_URL: 'http://host:8123, required when OTM_EVENT_STORE=clickhouse',
  OTM_TOKENS: 'token:tenant:scopes[,...], scopes read, write, read:<kind>, write:<kind> joined with + (e.g. s3cret:acme:read+write)',
  OTM_JWT_JWKS:
    'JWT bearer tokens: the signing keys, a JWKS file path (re-read when it changes) or an https URL (cached, refreshed); unset: no JWTs',
  OTM_JWT_ISSUER: "the 'iss' every JWT must have; required with OTM_JWT_JWKS",
  OTM_JWT_AUDIENCE: "the 'aud' every JWT must include; required with OTM_JWT_JWKS",
  OTM_JWT_TENANT_CLAIM: 'the JWT claim holding the tenant (default tenant)',
  OTM_JWT_SCOPE_CLAIM: 'the JWT claim holding the scopes, space-separated or an array (default scope)',
  LOG_LEVEL: 'fatal, error, warn, info (default), debug, trace or silent',
  OTM_MAP_STYLE:
    "the fleet page's map tiles: an http(s) URL template with {z}, {x} and {y} (default: none, the land drawn from the bundle)",
  OTM_WEB_DIR:
    'folder of the built pages, the fleet page and the API docs (index.html, docs.html, assets/: a build of services/web); default: services/web/dist beside the service',
  OTM_BODY_LIMIT: 'largest request body in bytes (default 1048576)',
  OTM_MAX_DEPTH: 'deepest nesting of a document (default 64)',
  OTM_BULK_LIMIT: 'largest bulk request body in bytes (default 16777216)',
  OTM_BULK_MAX_ITEMS: 'most documents in one bulk request (default 10000)',
  OTM_HEADERS_TIMEOUT_MS:
    'longest time from the first byte of a request to the end of its headers, then 408 and the connection is closed (default 10000, at most OTM_REQUEST_TIMEOUT_MS)',
  OTM_REQUEST_TIMEOUT_MS:
    'longest time from the first byte of a request to the end of its body, then 408 and the connection is closed (default 30000)',
  OTM_KEEP_ALIVE_TIMEOUT_MS:
    'how long a kept-alive connection may wait for its next request, plus 1 s that Node adds (default 65000: at least 5 s longer than the proxy in front keeps its idle connections)',
  OTM_IDLE_TIMEOUT_MS:
    'how long nothing may move on a connection (a client that does not read its answer), except while the service works on its request and between requests on a kept-alive connection (default 30000)',
  OTM_MAX_CONNECTIONS: 'most connections open at once; more are closed as they come (default 1024)',
  OTM_BULK_THREADS:
    'worker threads that parse and check bulk bodies of 64 KiB or more (default: CPUs - 1, at least 1, at most 4; 0: the event loop does it)',
  OTM_FEED_RETENTION:
    'how long the change feed keeps changes: a number with s, m, h or d (default 7d); a cursor older than that is answered 410',
  OTM_TRACK_MAX_DAYS: 'longest time window of one vehicle track or activity request, in days (default 31)',
  OTM_STOP_RADIUS_M: "a vehicle's activity: a stop is staying within this many metres (default 100)",
  OTM_STOP_MIN_SECONDS: "a vehicle's activity: for at least this many seconds (default 300)",
  OTM_GEOFENCE_RADIUS_M: "radius in metres of a location's geofence given as a point (default 150)",
  OTM_STALL_SECONDS:
    'seconds a bus consumer or background loop may stay down (restarting after failures) before /healthz answers 503, so that an orchestrator restarts the process (default 120)',
  OTM_EVENT_SEGMENT_BYTES:
    'size in bytes beyond which the embedded event log starts a new segment file; only sealed segments are compacted (default 67108864, 64 MiB)',
  OTM_EVENT_COMPACTION_INTERVAL:
    'how often the embedded event log looks for sealed segments mostly made of replaced or deleted events, to rewrite them: a number with ms, s, m or h (default 10m), or off',
  OTM_STREAMS_PER_TOKEN:
    'most open streams (GET /api/v5/stream) of one token: across all query processes with the Redis entity store, in the process otherwise (the embedded deployment is one); more get 429 (default 10)',
  OTM_RATE_LIMIT:
    'requests one credential (token, API key, JWT subject) may make, a bulk document counting one: a count a second or a minute such as 1000/s or 60000/m; more get 429 (default: no limit)',
  OTM_TENANT_RATE_LIMIT: 'the same for all the credentials of one tenant together, e.g. 5000/s (default: no limit)',
  OTM_STREAM_TICKET_SECRET:
    'secret (32 to 1024 characters) that signs stream tickets, the same in every process; default: a key derived from OTM_TOKENS',
  OTM_WEBHOOK_BATCH: 'most changes in one webhook delivery (default 100, at most 1000)',
  OTM_WEBHOOK_ALLOW:
    'comma-separated addresses or CIDR ranges (IPv4 or IPv6, e.g. 127.0.0.2,10.0.0.0/8) that webhook deliveries may reach although private, loopback or link-local (default: none)',
  OTM_ENTITY_EXPORT_INTERVAL:
    'how often the telemetry worker copies entity changes from Redis into ClickHouse (otm_entities): a number with s or m (default 1s), or off',
  KAFKA_PUBLISH_TIMEOUT_MS: 'longest wait for Kafka to acknowledge a write before answering 503 (default 5000)',
  KAFKA_LINGER_MS: 'how long a write waits for others to share its produce request (default 5)',
  KAFKA_MAX_REQUEST_BYTES:
    "most bytes of messages in one produce request (default 1000000, under Kafka's default message.max.bytes; a larger message goes alone)",
  KAFKA_SESSION_TIMEOUT_MS:
    "consumer group session timeout: how long after a worker dies its partitions move to the others (default 10000; the broker's group.min.session.timeout.ms, 6000 by default, is the least)",
  KAFKA_HEARTBEAT_MS: 'consumer heartbeat interval (default 1000; at most a third of the session timeout)',
  KAFKA_REBALANCE_TIMEOUT_MS: 'how long the members of a group have to rejoin during a rebalance (default 10000)',
  KAFKA_MAX_WAIT_MS: 'longest a consumer fetch waits for data (default 500)',
} as const;

/** OTM_STREAM_TICKET_SECRET: 32 to 1024 characters (its value is never echoed), or unset. */
function ticketSecret(v: string | undefined): string | undefined {
  if (v === undefined || v === '') return undefined;
  if (v.length < 32 || v.length > 1024) {
    throw new ConfigError('OTM_STREAM_TICKET_SECRET', `must be 32 to 1024 characters (e.g. openssl rand -base64 48), got ${v.length}`);
  }
  return v;
}

export function loadConfig(env: Env = process.env): Config {
  const bus = oneOf(env, 'OTM_BUS', ['memory', 'kafka'] as const, 'memory');
  const entityStore = oneOf(env, 'OTM_ENTITY_STORE', ['embedded', 'redis'] as const, 'embedded');
  const eventStore = oneOf(env, 'OTM_EVENT_STORE', ['embedded', 'clickhouse'] as const, 'embedded');

  const brokersRaw = env.KAFKA_BROKERS ?? '';
  const kafkaBrokers = brokersRaw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const b of kafkaBrokers) {
    if (!/^[^\s:]+:\d{1,5}$/.test(b) && !/^\[[0-9a-f:]+\]:\d{1,5}$/i.test(b)) {
      throw new ConfigError('KAFKA_BROKERS', `'${b}' is not host:port`);
    }
  }
  if (bus === 'kafka' && kafkaBrokers.length === 0) {
    throw new ConfigError('KAFKA_BROKERS', 'is required when OTM_BUS=kafka');
  }

  let tokens: TokenEntry[] | undefined;
  if (env.OTM_TOKENS !== undefined && env.OTM_TOKENS.trim() !== '') {
    try {
      tokens = parseTokens(env.OTM_TOKENS);
    } catch (e) {
      throw new ConfigError('OTM_TOKENS', (e as Error).message);
    }
  }

  const d = DEFAULT_CONNECTION_LIMITS;
  const requestTimeoutMs = integer(env, 'OTM_REQUEST_TIMEOUT_MS', d.requestTimeoutMs, 100, 3_600_000);
  // The headers are part of the request: their time cannot be longer than the whole request's.
  const headersTimeoutMs = integer(env, 'OTM_HEADERS_TIMEOUT_MS', Math.min(d.headersTimeoutMs, requestTimeoutMs), 100, 3_600_000);
  if (headersTimeoutMs > requestTimeoutMs) {
    throw new ConfigError(
      'OTM_HEADERS_TIMEOUT_MS',
      `must not be longer than OTM_REQUEST_TIMEOUT_MS (${requestTimeoutMs}), got '${headersTimeoutMs}'`,
    );
  }
  const connections: ConnectionLimits = Object.freeze({
    headersTimeoutMs,
    requestTimeoutMs,
    keepAliveTimeoutMs: integer(env, 'OTM_KEEP_ALIVE_TIMEOUT_MS', d.keepAliveTimeoutMs, 100, 3_600_000),
    idleTimeoutMs: integer(env, 'OTM_IDLE_TIMEOUT_MS', d.idleTimeoutMs, 100, 3_600_000),
    maxConnections: integer(env, 'OTM_MAX_CONNECTIONS', d.maxConnections, 1, 1_000_000),
  });

  const host = env.HOST && env.HOST !== '' ? env.HOST : '127.0.0.1';
  return Object.freeze({
    port: integer(env, 'PORT', 8080, 0, 65535),
    host,
    dataDir: path.resolve(env.OTM_DATA_DIR && env.OTM_DATA_DIR !== '' ? env.OTM_DATA_DIR : './data'),
    bus,
    kafkaBrokers: Object.freeze(kafkaBrokers),
    entityStore,
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:'], entityStore === 'redis'),
    redisCache: oneOf(env, 'OTM_REDIS_CACHE', ['on', 'off'] as const, 'on') === 'on',
    eventStore,
    clickhouseUrl: url(env, 'CLICKHOUSE_URL', ['http:', 'https:'], eventStore === 'clickhouse'),
    tokens: tokens && Object.freeze(tokens),
    jwt: jwtConfig(env.OTM_JWT_JWKS, env.OTM_JWT_ISSUER, env.OTM_JWT_AUDIENCE, env.OTM_JWT_TENANT_CLAIM, env.OTM_JWT_SCOPE_CLAIM),
    logLevel: oneOf(env, 'LOG_LEVEL', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
    bodyLimit: integer(env, 'OTM_BODY_LIMIT', 1_048_576, 1024, 1_073_741_824),
    maxDepth: integer(env, 'OTM_MAX_DEPTH', 64, 8, 1000),
    bulkLimit: integer(env, 'OTM_BULK_LIMIT', 16_777_216, 1024, 1_073_741_824),
    bulkMaxItems: integer(env, 'OTM_BULK_MAX_ITEMS', 10_000, 1, 1_000_000),
    bulkThreads: integer(env, 'OTM_BULK_THREADS', Math.min(4, Math.max(1, os.availableParallelism() - 1)), 0, 64),
    connections,
    feedRetentionMs: duration(env, 'OTM_FEED_RETENTION', 7 * 86_400_000, 60_000, 3_650 * 86_400_000),
    eventSegmentBytes: integer(env, 'OTM_EVENT_SEGMENT_BYTES', 64 * 1024 * 1024, 4096, 1024 * 1024 * 1024),
    eventCompactionIntervalMs: durationOrOff(env, 'OTM_EVENT_COMPACTION_INTERVAL', 10 * 60_000, 100, 24 * 3_600_000),
    trackMaxDays: integer(env, 'OTM_TRACK_MAX_DAYS', 31, 1, 3_660),
    stopRadiusM: integer(env, 'OTM_STOP_RADIUS_M', 100, 5, 10_000),
    stopMinSeconds: integer(env, 'OTM_STOP_MIN_SECONDS', 300, 10, 86_400),
    geofenceRadiusM: integer(env, 'OTM_GEOFENCE_RADIUS_M', 150, 5, 100_000),
    stallSeconds: integer(env, 'OTM_STALL_SECONDS', 120, 5, 86_400),
    streamsPerToken: integer(env, 'OTM_STREAMS_PER_TOKEN', 10, 1, 100_000),
    rateLimit: rateLimit(env, 'OTM_RATE_LIMIT'),
    tenantRateLimit: rateLimit(env, 'OTM_TENANT_RATE_LIMIT'),
    streamTicketSecret: ticketSecret(env.OTM_STREAM_TICKET_SECRET),
    entityExportIntervalMs: durationOrOff(env, 'OTM_ENTITY_EXPORT_INTERVAL', 1_000, 1_000, 3_600_000),
    webhookBatch: integer(env, 'OTM_WEBHOOK_BATCH', 100, 1, 1_000),
    webhookAllow: Object.freeze(addressRanges(env, 'OTM_WEBHOOK_ALLOW')),
    mapStyle: mapStyle(env.OTM_MAP_STYLE),
    webDir: webDir(env.OTM_WEB_DIR),
    kafka: Object.freeze({
      publishTimeoutMs: integer(env, 'KAFKA_PUBLISH_TIMEOUT_MS', 5_000, 100, 600_000),
      lingerMs: integer(env, 'KAFKA_LINGER_MS', 5, 0, 1_000),
      maxRequestBytes: integer(env, 'KAFKA_MAX_REQUEST_BYTES', 1_000_000, 1_024, 1_073_741_824),
      sessionTimeoutMs: integer(env, 'KAFKA_SESSION_TIMEOUT_MS', 10_000, 1_000, 3_600_000),
      heartbeatMs: integer(env, 'KAFKA_HEARTBEAT_MS', 1_000, 100, 600_000),
      rebalanceTimeoutMs: integer(env, 'KAFKA_REBALANCE_TIMEOUT_MS', 10_000, 1_000, 3_600_000),
      maxWaitMs: integer(env, 'KAFKA_MAX_WAIT_MS', 500, 10, 60_000),
    }),
  });
}
