/**
 * The embedded deployment: ingress, workers and query in one process, with the in-process bus and
 * the LMDB stores under the data folder. The same ingress, worker and query code as the
 * distributed roles; only the adapters differ.
 */
import type { FastifyInstance } from 'fastify';
import { precompile } from '@otm/model';
import { TOPICS, TokenVerifier, type Config, type Logger, type TokenEntry } from '@otm/core';
import { MemoryBus, openEmbeddedStores } from '@otm/embedded';
import { createHttpApp, methodNotAllowed } from '@otm/http';
import { Ingress, registerIngressRoutes } from '@otm/ingress';
import { Query, registerQueryRoutes } from '@otm/query';
import { entityWorker, telemetryWorker } from '@otm/worker';

export interface EmbeddedService {
  readonly app: FastifyInstance;
  /** Stops taking requests, lets the workers finish, flushes and closes the store. */
  close(): Promise<void>;
}

export async function createEmbeddedService(
  config: Pick<Config, 'dataDir' | 'bodyLimit' | 'maxDepth'>,
  tokens: readonly TokenEntry[],
  logger: Logger,
): Promise<EmbeddedService> {
  precompile(); // compile every validator now, not on the first request
  const stores = openEmbeddedStores(config.dataDir);
  // One partition for entity changes: the entity worker applies one batch at a time, each in one
  // transaction, so the semantics never race; telemetry is spread over eight.
  const bus = new MemoryBus({ topicPartitions: { [TOPICS.entities]: 1, [TOPICS.telemetry]: 8 } });
  const subscriptions = [
    await bus.subscribe(TOPICS.entities, 'entity-worker', entityWorker(stores.entities, { logger })),
    await bus.subscribe(TOPICS.telemetry, 'telemetry-worker', telemetryWorker(stores.events, { logger })),
  ];
  const ingress = new Ingress({ bus, readers: { entities: stores.entities, events: stores.events } });
  const query = new Query({ entities: stores.entities, events: stores.events });

  const app = createHttpApp({
    logger,
    verifier: new TokenVerifier(tokens),
    bodyLimit: config.bodyLimit,
    maxDepth: config.maxDepth,
    readiness: async () => ({
      bus: await bus.ready(),
      entityStore: await stores.entities.ready(),
      eventStore: await stores.events.ready(),
    }),
  });
  registerIngressRoutes(app, ingress);
  registerQueryRoutes(app, query);
  methodNotAllowed(app, '/api/v5/:kind', ['PUT']);
  methodNotAllowed(app, '/api/v5/:kind/:uuid', ['GET', 'HEAD', 'DELETE']);

  let closed = false;
  return {
    app,
    close: async () => {
      if (closed) return;
      closed = true;
      await app.close();
      for (const s of subscriptions) await s.close();
      await bus.close();
      await stores.close();
    },
  };
}
