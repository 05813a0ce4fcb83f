/**
 * One process of the service: any set of the roles (ingress, query, entity worker, telemetry
 * worker, which also runs the entity export where the stores offer it, webhook dispatcher) over any adapters. `otm serve` runs them all in one process; `otm ingress`, `otm query`,
 * `otm worker` and `otm dispatcher` run one role each. Every process answers /healthz, /readyz and /metrics.
 */
import type { FastifyInstance } from 'fastify';
import { precompile } from '@otm/model';
import {
  DEFAULT_CONNECTION_LIMITS,
  Health,
  TOPICS,
  TokenVerifier,
  type ConnectionLimits,
  type JwtConfig,
  type Logger,
  type RateLimit,
  type Subscription,
  type TokenEntry,
} from '@otm/core';
import { MemoryRateLimiter, MemoryStreamSlots } from '@otm/embedded';
import { ApiKeyAuthenticator, JwtVerifier, createHttpApp, servedElsewhere, type BearerAuthenticator } from '@otm/http';
import { BulkChecker, Ingress, bulkWrites, entityWrites, validateRoute } from '@otm/ingress';
import {
  Finder,
  Query,
  StreamHub,
  StreamTickets,
  changes,
  entityReads,
  lists,
  stream,
  streamTickets,
  streamTicketKey,
  tracks,
  activity,
  type StreamOptions,
} from '@otm/query';
import {
  entityWorker,
  startEntityExport,
  telemetrySubscription,
  telemetryWorker,
  type EntityExportOptions,
  type TelemetryBatching,
} from '@otm/worker';
import { Dispatcher, subscriptions as subscriptionRoutes, type DispatcherOptions } from '@otm/dispatcher';
import type { Adapters } from './adapters.js';
import { webPages, type WebOptions } from './web.js';

export interface Roles {
  readonly ingress: boolean;
  readonly query: boolean;
  readonly entityWorker: boolean;
  readonly telemetryWorker: boolean;
  /** The webhook dispatcher (`otm dispatcher`; in `otm serve`). */
  readonly dispatcher?: boolean;
}

export const ALL_ROLES: Roles = { ingress: true, query: true, entityWorker: true, telemetryWorker: true, dispatcher: true };

export interface Service {
  readonly app: FastifyInstance;
  /** The process's consumers, loops and stores' write states, as /readyz and /healthz report them. */
  readonly health: Health;
  /**
   * Graceful stop: stops taking requests and finishes those in hand; workers finish their batch
   * and commit; then the adapters close.
   */
  close(): Promise<void>;
}

/** Consumer group names: every worker of one kind shares the partitions of its topic. */
export const GROUPS = { entities: 'otm-entity-worker', telemetry: 'otm-telemetry-worker' } as const;

export async function createService(
  roles: Roles,
  adapters: Adapters,
  opts: {
    tokens: readonly TokenEntry[];
    /** JWT bearer tokens (OTM_JWT_*), besides the tokens; undefined: none. */
    jwt?: JwtConfig;
    /** How long an API key lookup is kept (default 5 s: the bound on seeing a revocation). */
    apiKeyCacheMs?: number;
    logger: Logger;
    bodyLimit: number;
    maxDepth: number;
    bulkLimit?: number;
    bulkMaxItems?: number;
    /** Worker threads that check large bulk bodies (default 0: the event loop checks them). */
    bulkThreads?: number;
    /** Smallest bulk body (bytes) those threads get (default 64 KiB; smaller ones: the event loop). */
    bulkThreadMinBytes?: number;
    /** How the telemetry worker gathers events into store writes, and how many partitions it takes at once. */
    telemetry?: TelemetryBatching & { concurrency?: number };
    /** Longest track window in days (OTM_TRACK_MAX_DAYS; default 31). */
    trackMaxDays?: number;
    /** A vehicle's activity: OTM_STOP_RADIUS_M, OTM_STOP_MIN_SECONDS, OTM_GEOFENCE_RADIUS_M (defaults 100, 300, 150). */
    activity?: { stopRadiusM?: number; stopMinSeconds?: number; geofenceRadiusM?: number };
    /** Seconds a consumer or loop may stay down before /healthz answers 503 (OTM_STALL_SECONDS; default 120). */
    stallSeconds?: number;
    /** Timeouts and the cap on connections of the HTTP server (default: the configuration's defaults). */
    connections?: Partial<ConnectionLimits>;
    /**
     * The telemetry worker's copy of entity changes into the event store (Redis to ClickHouse's
     * otm_entities; services/worker/src/entity-export.ts), or false for none. Default: on, every
     * second, where the stores offer it.
     */
    entityExport?: EntityExportOptions | false;
    /**
     * The stream (GET /api/v5/stream): streams per token (OTM_STREAMS_PER_TOKEN, default 10;
     * counted by the adapters' stream slots, Redis and shared, or without them in this process), the
     * ticket secret (OTM_STREAM_TICKET_SECRET; default: derived from `tokens`), and for tests the
     * heartbeat (default 15 s, at most half the idle timeout), poll interval and pending bound.
     */
    streams?: Partial<Omit<StreamOptions, 'logger'>> & { ticketSecret?: string };
    /**
     * Webhooks: the batch size (OTM_WEBHOOK_BATCH), the addresses allowed although private
     * (OTM_WEBHOOK_ALLOW), and for tests the dispatcher's timings (retry window, linger, poll)
     * and the most subscriptions of a tenant.
     */
    webhooks?: Partial<DispatcherOptions> & { maxPerTenant?: number };
    /**
     * Request-rate quotas (OTM_RATE_LIMIT per credential, OTM_TENANT_RATE_LIMIT per tenant; unset:
     * none), counted by the adapters' limiter (Redis, shared) or, without one, in this process.
     */
    quotas?: { perCredential?: RateLimit; perTenant?: RateLimit };
    /** The pages served with the query role: the API docs (/api/v5/docs) and the fleet page (/), with its map style (OTM_MAP_STYLE). */
    web?: WebOptions;
  },
): Promise<Service> {
  const { bus, entities, events } = adapters;
  const { logger } = opts;
  // First: a JWKS file that cannot be read stops the start (a ConfigError naming OTM_JWT_JWKS).
  const authenticators: BearerAuthenticator[] = [];
  if (opts.jwt !== undefined && (roles.ingress || roles.query)) {
    authenticators.push(new JwtVerifier(opts.jwt, { logger: logger.child({ component: 'jwt' }) }));
  }
  // API keys (`otm keys`), in the entity store's backend; a revoked key is refused within apiKeyCacheMs.
  if (roles.ingress || roles.query) authenticators.push(new ApiKeyAuthenticator(adapters.apiKeys, opts.apiKeyCacheMs));
  if (roles.ingress) precompile(); // compile every validator now, not on the first request

  const health = new Health();
  const subscriptions: Subscription[] = [];
  health.watch(() => subscriptions);
  health.watch(() => adapters.parts?.() ?? []);
  if (roles.entityWorker) subscriptions.push(await bus.subscribe(TOPICS.entities, GROUPS.entities, entityWorker(entities, { logger })));
  if (roles.telemetryWorker) {
    const t = opts.telemetry ?? {};
    subscriptions.push(
      await bus.subscribe(
        TOPICS.telemetry,
        GROUPS.telemetry,
        telemetryWorker(events, { logger }, t, entities.telemetry),
        telemetrySubscription(events, t.concurrency),
      ),
    );
  }
  const exporter =
    roles.telemetryWorker && opts.entityExport !== false
      ? startEntityExport(entities, events, { logger: logger.child({ component: 'entity-export' }) }, opts.entityExport ?? {})
      : undefined;
  if (exporter !== undefined) health.watch(() => exporter.parts());

  const app = createHttpApp({
    logger,
    verifier: new TokenVerifier(opts.tokens),
    authenticators,
    bodyLimit: opts.bodyLimit,
    maxDepth: opts.maxDepth,
    connections: opts.connections,
    health,
    ...(opts.stallSeconds === undefined ? {} : { stallSeconds: opts.stallSeconds }),
    ...(opts.quotas === undefined ? {} : { quotas: { ...opts.quotas, limiter: adapters.rateLimiter ?? new MemoryRateLimiter() } }),
    readiness: async () => {
      const checks: Record<string, boolean> = {};
      if (roles.ingress || roles.entityWorker || roles.telemetryWorker) checks.bus = await bus.ready();
      if (roles.ingress || roles.query || roles.entityWorker || roles.dispatcher) checks.entityStore = await entities.ready();
      if (roles.ingress || roles.query || roles.telemetryWorker) checks.eventStore = await events.ready();
      return checks;
    },
  });
  // The route groups, each a plugin. A process that serves one half of the API (the ingress, the
  // query role) declares the other half as served elsewhere: a request for it gets a 405 naming
  // the process that serves it.
  let bulkChecker: BulkChecker | undefined;
  if (roles.ingress) {
    bulkChecker = new BulkChecker({ threads: opts.bulkThreads ?? 0, minBytes: opts.bulkThreadMinBytes });
    const ingress = new Ingress({ bus, readers: { entities, events } });
    await app.register(entityWrites, { ingress });
    await app.register(bulkWrites, {
      ingress,
      bulkLimit: opts.bulkLimit ?? 16_777_216,
      bulkMaxItems: opts.bulkMaxItems ?? 10_000,
      maxDepth: opts.maxDepth,
      bulkChecker,
    });
  } else if (roles.query) {
    await app.register(servedElsewhere(entityWrites));
    await app.register(servedElsewhere(bulkWrites));
  }
  // Stream tickets are signed with a key every process derives alike: any of them gives and takes them.
  const tickets = roles.ingress || roles.query ? new StreamTickets(streamTicketKey(opts.tokens, opts.streams?.ticketSecret)) : undefined;
  if (tickets) {
    await app.register(streamTickets, { tickets });
    await app.register(validateRoute);
  }
  if (roles.query) {
    const finder = new Finder({ entities, events });
    await app.register(entityReads, { query: new Query({ entities, events }) });
    await app.register(lists, { finder });
    await app.register(changes, { finder });
    await app.register(tracks, { finder, trackMaxDays: opts.trackMaxDays ?? 31 });
    await app.register(activity, {
      finder,
      locations: entities,
      maxDays: opts.trackMaxDays ?? 31,
      radiusM: opts.activity?.stopRadiusM ?? 100,
      minSeconds: opts.activity?.stopMinSeconds ?? 300,
      geofenceRadiusM: opts.activity?.geofenceRadiusM ?? 150,
    });
    // A heartbeat at least twice within the idle timeout, which would close a quiet stream.
    const idleMs = opts.connections?.idleTimeoutMs ?? DEFAULT_CONNECTION_LIMITS.idleTimeoutMs;
    const { ticketSecret: _secret, ...streams } = opts.streams ?? {};
    const hub = new StreamHub(finder, {
      perToken: 10,
      heartbeatMs: Math.max(10, Math.min(15_000, Math.floor(idleMs / 2))),
      // Every query process on the same Redis counts the same slots; else this process's own.
      slots: adapters.streamSlots ?? new MemoryStreamSlots(),
      ...streams,
      logger: logger.child({ component: 'stream' }),
    });
    health.watch(() => hub.parts());
    await app.register(stream, { hub, tickets: tickets! });
    // The open streams end when the app closes, so that closing does not wait for them.
    app.addHook('preClose', (done) => {
      hub.close();
      done();
    });
    await app.register(webPages, opts.web ?? {});
  } else if (roles.ingress) {
    await app.register(servedElsewhere(entityReads));
    await app.register(servedElsewhere(lists));
    await app.register(servedElsewhere(changes));
    await app.register(servedElsewhere(tracks));
    await app.register(servedElsewhere(activity));
    await app.register(servedElsewhere(stream));
  }

  // Webhooks: the dispatcher delivers; the subscriptions API is served by every process that serves
  // the API (query and ingress), so that a proxy that routes by method finds all of it.
  const { maxPerTenant, ...dispatching } = opts.webhooks ?? {};
  const dispatcher = roles.dispatcher
    ? new Dispatcher(
        { store: adapters.subscriptions, source: new Finder({ entities, events }), logger: logger.child({ component: 'dispatcher' }) },
        dispatching,
      )
    : undefined;
  dispatcher?.start();
  if (dispatcher !== undefined) health.watch(() => dispatcher.parts());
  if (roles.ingress || roles.query) {
    await app.register(subscriptionRoutes, {
      store: adapters.subscriptions,
      feed: entities.feed,
      allow: dispatching.allow ?? [],
      ...(maxPerTenant === undefined ? {} : { maxPerTenant }),
      ...(dispatcher === undefined ? {} : { onChange: (tenant: string, id: string) => dispatcher.notify(tenant, id) }),
    });
  }

  let closed = false;
  return {
    app,
    health,
    close: async () => {
      if (closed) return;
      closed = true;
      await app.close();
      await dispatcher?.close();
      await bulkChecker?.close();
      for (const s of subscriptions) await s.close();
      await exporter?.close();
      await adapters.close();
    },
  };
}
