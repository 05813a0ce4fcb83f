/** The `otm` command: the all-in-one service, the distributed roles, migrate and validate. */
import { ConfigError, createLogger, loadConfig, type Config, type Logger, type TokenEntry } from '@otm/core';
import { openAdapters } from './adapters.js';
import { ALL_ROLES, createService, type Roles } from './service.js';
import { keptToken } from './token-file.js';
import { runValidate } from './validate-cmd.js';
import { runKeys } from './keys-cmd.js';

const USAGE = `usage: otm <command>

commands:
  serve                         the all-in-one service (HTTP on HOST:PORT; by default embedded, data in OTM_DATA_DIR)
  ingress                       the distributed ingress: PUT and DELETE, published to the bus
  query                         the distributed query service: GET
  worker [--entities] [--telemetry]
                                the workers (both unless one is named): bus to stores
  dispatcher                    the webhook dispatcher: delivers the subscriptions' changes (any number of processes)
  migrate                       create the ClickHouse tables and Kafka topics (idempotent)
  validate [--kind K] <file...> check OTM documents offline, with the same errors as the API
  keys create|list|revoke       API keys: create --tenant T --scopes read,write [--name N] [--expires ISO]; list [--tenant T]; revoke <id>
  help                          this text

configuration: environment variables, see the README (PORT, HOST, OTM_DATA_DIR, OTM_TOKENS, OTM_BUS, ...)`;

/**
 * How to authenticate with a token `otm serve` generated. The token itself only on a terminal:
 * otherwise standard output is likely a log (a container's), so the notice names the file that
 * holds it instead.
 */
export function authNotice(kept: { readonly token: string; readonly file: string; readonly created: boolean }, terminal: boolean): string {
  const first = `OTM_TOKENS is not set: ${kept.created ? 'created' : 'using'} a read+write token for tenant 'default', kept in ${kept.file}\n`;
  return terminal
    ? `${first}  Authorization: Bearer ${kept.token}`
    : `${first}  Authorization: Bearer <token>, the token being what ${kept.file} holds before its first ':' (printed only on a terminal)`;
}

function tokensFor(config: Config, command: string): { tokens: readonly TokenEntry[]; notice: string } {
  if (config.tokens !== undefined) {
    return { tokens: config.tokens, notice: 'authenticate with a token from OTM_TOKENS: Authorization: Bearer <token>' };
  }
  if (command !== 'serve') {
    // Several stateless processes must agree on their credentials: static tokens come from the
    // environment. Without them, JWTs (OTM_JWT_JWKS) and API keys (kept in the entity store) are
    // the credentials, and the stream tickets one process gives and another takes need a secret
    // they share, since it cannot be derived from the tokens.
    if (config.streamTicketSecret === undefined) {
      throw new ConfigError(
        'OTM_TOKENS',
        `is required by otm ${command} unless OTM_STREAM_TICKET_SECRET is set (then JWTs and API keys are the credentials)`,
      );
    }
    const jwt = config.jwt === undefined ? '' : `a JWT of ${config.jwt.issuer} or `;
    return {
      tokens: [],
      notice: `OTM_TOKENS is not set: authenticate with ${jwt}an API key (otm keys create): Authorization: Bearer <credential>`,
    };
  }
  const kept = keptToken(config.dataDir);
  return { tokens: kept.entries, notice: authNotice(kept, process.stdout.isTTY === true) };
}

function onSignals(logger: Logger, close: () => Promise<void>): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

async function run(command: string, roles: Roles): Promise<number> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel).child({ role: command });
  const { tokens, notice } = roles.ingress || roles.query ? tokensFor(config, command) : { tokens: [], notice: '' };
  const adapters = openAdapters(config, logger);
  // On Kafka the telemetry worker takes several partitions at once and gathers up to 50 ms of
  // events into one ClickHouse insert; in-process, writes go out on the next tick (a PUT waits).
  const telemetry = config.bus === 'kafka' ? { concurrency: 16, maxDelayMs: 50, maxRows: 20_000 } : { maxDelayMs: 0 };
  const service = await createService(roles, adapters, {
    tokens,
    ...(config.jwt === undefined ? {} : { jwt: config.jwt }),
    logger,
    bodyLimit: config.bodyLimit,
    maxDepth: config.maxDepth,
    bulkLimit: config.bulkLimit,
    bulkMaxItems: config.bulkMaxItems,
    bulkThreads: config.bulkThreads,
    telemetry,
    connections: config.connections,
    trackMaxDays: config.trackMaxDays,
    activity: { stopRadiusM: config.stopRadiusM, stopMinSeconds: config.stopMinSeconds, geofenceRadiusM: config.geofenceRadiusM },
    stallSeconds: config.stallSeconds,
    quotas: {
      ...(config.rateLimit === undefined ? {} : { perCredential: config.rateLimit }),
      ...(config.tenantRateLimit === undefined ? {} : { perTenant: config.tenantRateLimit }),
    },
    streams: {
      perToken: config.streamsPerToken,
      ...(config.streamTicketSecret === undefined ? {} : { ticketSecret: config.streamTicketSecret }),
    },
    entityExport: config.entityExportIntervalMs > 0 ? { intervalMs: config.entityExportIntervalMs } : false,
    webhooks: { batch: config.webhookBatch, allow: config.webhookAllow },
    web: {
      ...(config.mapStyle === undefined ? {} : { mapStyle: config.mapStyle }),
      ...(config.webDir === undefined ? {} : { webDir: config.webDir }),
    },
  });
  const address = await service.app.listen({ port: config.port, host: config.host });
  const where =
    config.bus === 'memory' && config.entityStore === 'embedded' && config.eventStore === 'embedded'
      ? `data in ${config.dataDir}`
      : `bus ${config.bus}, entity store ${config.entityStore}, event store ${config.eventStore}`;
  process.stdout.write(`otm ${command}: listening on ${address} (${where})\n${notice ? `${notice}\n` : ''}`);
  onSignals(logger, () => service.close());
  return new Promise<number>(() => {});
}

async function migrate(): Promise<number> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel).child({ role: 'migrate' });
  const adapters = openAdapters(config, logger);
  try {
    await adapters.migrate();
    process.stdout.write('otm migrate: done\n');
    return 0;
  } finally {
    await adapters.close();
  }
}

function workerRoles(args: string[]): Roles {
  for (const a of args) {
    if (a !== '--entities' && a !== '--telemetry') throw new Error(`otm worker: unknown option '${a}' (--entities, --telemetry)`);
  }
  const both = args.length === 0;
  return {
    ingress: false,
    query: false,
    entityWorker: both || args.includes('--entities'),
    telemetryWorker: both || args.includes('--telemetry'),
  };
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'serve':
        return await run('serve', ALL_ROLES);
      case 'ingress':
        return await run('ingress', { ingress: true, query: false, entityWorker: false, telemetryWorker: false });
      case 'query':
        return await run('query', { ingress: false, query: true, entityWorker: false, telemetryWorker: false });
      case 'worker':
        return await run('worker', workerRoles(rest));
      case 'dispatcher':
        return await run('dispatcher', { ingress: false, query: false, entityWorker: false, telemetryWorker: false, dispatcher: true });
      case 'migrate':
        return await migrate();
      case 'validate':
        return runValidate(rest, (line) => process.stdout.write(`${line}\n`));
      case 'keys':
        return await runKeys(
          rest,
          (line) => process.stdout.write(`${line}\n`),
          (line) => process.stderr.write(`${line}\n`),
        );
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        process.stdout.write(`${USAGE}\n`);
        return command === undefined ? 2 : 0;
      default:
        process.stderr.write(`otm: unknown command '${command}'\n${USAGE}\n`);
        return 2;
    }
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`otm: configuration error: ${e.message}\n`);
      return 78; // EX_CONFIG
    }
    throw e;
  }
}
