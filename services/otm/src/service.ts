/**
 * One process of the service: any set of the roles (ingress, query, entity worker, telemetry
 * worker, which also runs the entity export where the stores offer it) over any adapters. `otm serve` runs them all in one process; `otm ingress`, `otm query`
 * and `otm worker` run one role each. Every process answers /healthz, /readyz and /metrics.
 */
import type { FastifyInstance } from 'fastify';
import { precompile } from '@otm/model';
import { TOPICS, TokenVerifier, type ConnectionLimits, type Logger, type Subscription, type TokenEntry } from '@otm/core';
import { createHttpApp, methodNotAllowed } from '@otm/http';
import { BulkChecker, Ingress, registerIngressRoutes } from '@otm/ingress';
import { Finder, Query, registerQueryRoutes } from '@otm/query';
import { entityWorker, startEntityExport, telemetryWorker, type EntityExportOptions, type TelemetryBatching } from '@otm/worker';
import type { Adapters } from './adapters.js';

export interface Roles {
  readonly ingress: boolean;
  readonly query: boolean;
  readonly entityWorker: boolean;
  readonly telemetryWorker: boolean;
}

export const ALL_ROLES: Roles = { ingress: true, query: true, entityWorker: true, telemetryWorker: true };

export interface Service {
  readonly app: FastifyInstance;
  /**
   * Graceful stop: stops taking requests and finishes those in hand; workers finish their batch
   * and commit; then the adapters close.
   */
  close(): Promise<void>;
}

/** Consumer group names: every worker of one kind shares the partitions of its topic. */
export const GROUPS = { entities: 'otm-entity-worker', telemetry: 'otm-telemetry-worker' } as const;

/** Batches of one partition the telemetry worker may hold when its store keeps write order. */
const TELEMETRY_PIPELINE = 64;

export async function createService(
  roles: Roles,
  adapters: Adapters,
  opts: {
    tokens: readonly TokenEntry[];
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
    /** Timeouts and the cap on connections of the HTTP server (default: the configuration's defaults). */
    connections?: Partial<ConnectionLimits>;
    /**
     * The telemetry worker's copy of entity changes into the event store (Redis to ClickHouse's
     * otm_entities; services/worker/src/entity-export.ts), or false for none. Default: on, every
     * second, where the stores offer it.
     */
    entityExport?: EntityExportOptions | false;
  },
): Promise<Service> {
  const { bus, entities, events } = adapters;
  const { logger } = opts;
  if (roles.ingress) precompile(); // compile every validator now, not on the first request

  const subscriptions: Subscription[] = [];
  if (roles.entityWorker) subscriptions.push(await bus.subscribe(TOPICS.entities, GROUPS.entities, entityWorker(entities, { logger })));
  if (roles.telemetryWorker) {
    const t = opts.telemetry ?? {};
    subscriptions.push(
      await bus.subscribe(TOPICS.telemetry, GROUPS.telemetry, telemetryWorker(events, { logger }, t, entities.telemetry), {
        concurrency: t.concurrency ?? 1,
        fetchAhead: true,
        // The next events of a partition go into the next store write while the last one is being
        // made durable, when the store keeps the order of its writes (the embedded one does).
        pipeline: events.appliesInCallOrder ? TELEMETRY_PIPELINE : 1,
      }),
    );
  }
  const exporter =
    roles.telemetryWorker && opts.entityExport !== false
      ? startEntityExport(entities, events, { logger: logger.child({ component: 'entity-export' }) }, opts.entityExport ?? {})
      : undefined;

  const app = createHttpApp({
    logger,
    verifier: new TokenVerifier(opts.tokens),
    bodyLimit: opts.bodyLimit,
    maxDepth: opts.maxDepth,
    connections: opts.connections,
    readiness: async () => {
      const checks: Record<string, boolean> = {};
      if (roles.ingress || roles.entityWorker || roles.telemetryWorker) checks.bus = await bus.ready();
      if (roles.ingress || roles.query || roles.entityWorker) checks.entityStore = await entities.ready();
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
  if (roles.query) {
    registerQueryRoutes(app, new Query({ entities, events }), new Finder({ entities, events }), {
      trackMaxDays: opts.trackMaxDays ?? 31,
    });
    for (const path of ['/api/v5/changes', '/api/v5/vehicles/positions', '/api/v5/vehicles/:uuid/track']) {
      methodNotAllowed(app, path, ['GET', 'HEAD']);
    }
  }
  if (roles.ingress || roles.query) {
    methodNotAllowed(
      app,
      '/api/v5/:kind',
      ['GET', 'HEAD', 'PUT'],
      [...(roles.query ? ['GET', 'HEAD'] : []), ...(roles.ingress ? ['PUT'] : [])],
    );
    const one = [...(roles.query ? ['GET', 'HEAD'] : []), ...(roles.ingress ? ['DELETE'] : [])];
    methodNotAllowed(app, '/api/v5/:kind/:uuid', ['GET', 'HEAD', 'DELETE'], one);
  }

  let closed = false;
  return {
    app,
    close: async () => {
      if (closed) return;
      closed = true;
      await app.close();
      await bulkChecker?.close();
      for (const s of subscriptions) await s.close();
      await exporter?.close();
      await adapters.close();
    },
  };
}
