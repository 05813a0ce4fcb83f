import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/**
 * The one logger of a process, passed down to everything. Request headers are not logged;
 * `authorization` is redacted wherever it might appear, and document bodies are never logged.
 */
export function createLogger(level: LoggerOptions['level'] = 'info', destination?: pino.DestinationStream): Logger {
  const options: LoggerOptions = {
    level,
    redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization', 'token'], censor: '[redacted]' },
  };
  return destination ? pino(options, destination) : pino(options);
}
