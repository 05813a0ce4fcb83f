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
  MemoryRateLimiter,
  TOPICS,
  TokenVerifier,
  type ConnectionLimits,
  type JwtConfig,
  type Logger,
  type RateLimit,
  type Subscription,
  type TokenEntry,
} from '@otm/core';
import { ApiKeyAuthenticator, JwtVerifier, createHttpApp, methodNotAllowed, type BearerAuthenticator } from '@otm/http';
import { BulkChecker, Ingress, registerIngressRoutes, registerValidateRoute } from '@otm/ingress';
import {
  Finder,
  Query,
  StreamHub,
  StreamTickets,
  registerQueryRoutes,
  registerStreamRoutes,
  registerStreamTicketRoute,
  streamTicketKey,
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
import { Dispatcher, registerSubscriptionRoutes, type DispatcherOptions } from '@otm/dispatcher';
import type { Adapters } from './adapters.js';
import { registerWebRoutes, type WebOptions } from './web.js';

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
  let bulkChecker: BulkChecker | undefined;
  if (roles.ingress) {
    bulkChecker = new BulkChecker({ threads: opts.bulkThreads ?? 0, minBytes: opts.bulkThreadMinBytes });
    registerIngressRoutes(app, new Ingress({ bus, readers: { entities, events } }), {
      bulkLimit: opts.bulkLimit ?? 16_777_216,
      bulkMaxItems: opts.bulkMaxItems ?? 10_000,
      maxDepth: opts.maxDepth,
      bulkChecker,
    });
  }
  // Stream tickets are signed with a key every process derives alike: any of them gives and takes them.
  const tickets = roles.ingress || roles.query ? new StreamTickets(streamTicketKey(opts.tokens, opts.streams?.ticketSecret)) : undefined;
  if (tickets) registerStreamTicketRoute(app, tickets);
  if (roles.ingress || roles.query) {
    registerValidateRoute(app);
    methodNotAllowed(app, '/api/v5/validate/:kind', ['POST']);
  }
  if (roles.query) {
    const finder = new Finder({ entities, events });
    registerQueryRoutes(app, new Query({ entities, events }), finder, {
      trackMaxDays: opts.trackMaxDays ?? 31,
    });
    // A heartbeat at least twice within the idle timeout, which would close a quiet stream.
    const idleMs = opts.connections?.idleTimeoutMs ?? DEFAULT_CONNECTION_LIMITS.idleTimeoutMs;
    const { ticketSecret: _secret, ...streams } = opts.streams ?? {};
    const hub = new StreamHub(finder, {
      perToken: 10,
      heartbeatMs: Math.max(10, Math.min(15_000, Math.floor(idleMs / 2))),
      // Every query process on the same Redis counts the same slots; else this process's own.
      ...(adapters.streamSlots === undefined ? {} : { slots: adapters.streamSlots }),
      ...streams,
      logger: logger.child({ component: 'stream' }),
    });
    health.watch(() => hub.parts());
    registerStreamRoutes(app, hub, tickets!);
    await registerWebRoutes(app, opts.web);
    methodNotAllowed(app, '/api/v5/stream', ['GET']);
    for (const path of ['/api/v5/changes', '/api/v5/vehicles/positions', '/api/v5/vehicles/:uuid/track']) {
      methodNotAllowed(app, path, ['GET', 'HEAD']);
    }
  }
  if (roles.ingress || roles.query) {
    if (!roles.query) methodNotAllowed(app, '/api/v5/stream', ['GET'], []);
    methodNotAllowed(app, '/api/v5/stream/tickets', ['POST']);
    methodNotAllowed(
      app,
      '/api/v5/:kind',
      ['GET', 'HEAD', 'PUT'],
      [...(roles.query ? ['GET', 'HEAD'] : []), ...(roles.ingress ? ['PUT'] : [])],
    );
    const one = [...(roles.query ? ['GET', 'HEAD'] : []), ...(roles.ingress ? ['DELETE'] : [])];
    methodNotAllowed(app, '/api/v5/:kind/:uuid', ['GET', 'HEAD', 'DELETE'], one);
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
    registerSubscriptionRoutes(app, {
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
