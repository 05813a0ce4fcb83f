/**
 * The embedded deployment: ingress, workers and query in one process, with the in-process bus and
 * the stores under the data folder (LMDB, and the event log). The same ingress, worker and query code as the
 * distributed roles; only the adapters differ.
 */
import type { Config, ConnectionLimits, JwtConfig, Logger, TokenEntry } from '@otm/core';
import { openAdapters, type Adapters } from './adapters.js';
import { ALL_ROLES, createService, type Service } from './service.js';

export type EmbeddedService = Service;

/** The adapters of `otm serve`: the in-process bus, LMDB and the event log, in `dataDir`. */
export const embeddedAdapterConfig = (dataDir: string) =>
  ({
    dataDir,
    bus: 'memory',
    kafkaBrokers: [],
    entityStore: 'embedded',
    redisUrl: undefined,
    eventStore: 'embedded',
    clickhouseUrl: undefined,
  }) as const;

/** The embedded deployment's adapters on `dataDir`: the in-process bus, LMDB, the event log. */
export const openEmbeddedAdapters = (dataDir: string, logger: Logger): Adapters => openAdapters(embeddedAdapterConfig(dataDir), logger);

export async function createEmbeddedService(
  config: Pick<Config, 'dataDir' | 'bodyLimit' | 'maxDepth'> & {
    /** Threads that check bulk bodies (default 0: the event loop), and the smallest body they get. */
    readonly bulkThreads?: number;
    readonly bulkThreadMinBytes?: number;
    /** Timeouts and the cap on connections of the HTTP server (default: the configuration's defaults). */
    readonly connections?: Partial<ConnectionLimits>;
    /** The stream's settings (createService `streams`). */
    readonly streams?: Parameters<typeof createService>[2]['streams'];
    /** Webhooks: batch, allowed addresses, the dispatcher's timings (createService `webhooks`). */
    readonly webhooks?: Parameters<typeof createService>[2]['webhooks'];
    /** JWT bearer tokens (OTM_JWT_*) besides `tokens`. */
    readonly jwt?: JwtConfig;
    /** Request-rate quotas (OTM_RATE_LIMIT, OTM_TENANT_RATE_LIMIT), counted in this process. */
    readonly quotas?: Parameters<typeof createService>[2]['quotas'];
  },
  tokens: readonly TokenEntry[],
  logger: Logger,
): Promise<EmbeddedService> {
  const adapters = openEmbeddedAdapters(config.dataDir, logger);
  return createService(ALL_ROLES, adapters, {
    tokens,
    logger,
    bodyLimit: config.bodyLimit,
    maxDepth: config.maxDepth,
    bulkThreads: config.bulkThreads,
    bulkThreadMinBytes: config.bulkThreadMinBytes,
    connections: config.connections,
    streams: config.streams,
    webhooks: config.webhooks,
    ...(config.quotas === undefined ? {} : { quotas: config.quotas }),
    ...(config.jwt === undefined ? {} : { jwt: config.jwt }),
  });
}
