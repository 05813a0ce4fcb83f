/** The `otm` command: `serve` (all-in-one) and `validate`. */
import { ConfigError, createLogger, loadConfig } from '@otm/core';
import { createEmbeddedService } from './embedded.js';
import { keptToken } from './token-file.js';
import { runValidate } from './validate-cmd.js';

const USAGE = `usage: otm <command>

commands:
  serve                         the all-in-one embedded service (HTTP on HOST:PORT, data in OTM_DATA_DIR)
  validate [--kind K] <file...> check OTM documents offline, with the same errors as the API
  help                          this text

configuration: environment variables, see the README (PORT, HOST, OTM_DATA_DIR, OTM_TOKENS, ...)`;

async function serve(): Promise<number> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  let tokens = config.tokens;
  let notice: string;
  if (tokens === undefined) {
    const kept = keptToken(config.dataDir);
    tokens = kept.entries;
    notice =
      `OTM_TOKENS is not set: ${kept.created ? 'created' : 'using'} a read+write token for tenant 'default', kept in ${kept.file}\n` +
      `  Authorization: Bearer ${kept.token}`;
  } else {
    notice = `authenticate with a token from OTM_TOKENS: Authorization: Bearer <token>`;
  }
  const service = await createEmbeddedService(config, tokens, logger);
  const address = await service.app.listen({ port: config.port, host: config.host });
  process.stdout.write(`otm serve: listening on ${address} (data in ${config.dataDir})\n${notice}\n`);

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    service.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return new Promise<number>(() => {});
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'serve':
        return await serve();
      case 'validate':
        return runValidate(rest, (line) => process.stdout.write(`${line}\n`));
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
