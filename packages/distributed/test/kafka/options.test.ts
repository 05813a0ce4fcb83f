/** The Kafka adapter's settings: kafkajs' own log, throttled while a broker is down. */
import { logLevel } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { clientConfig, resolveOptions } from '../../src/kafka/options.js';

describe("kafkajs' log", () => {
  it('logs a repeated error or warning once per interval, without its stack; other levels as they come', () => {
    const lines: Array<{ level: string; obj: Record<string, unknown>; msg: string }> = [];
    const record = (level: string) => (obj: Record<string, unknown>, msg: string) => lines.push({ level, obj, msg });
    const logger = { level: 'info', error: record('error'), warn: record('warn'), info: record('info'), debug: record('debug') };
    const opts = { brokers: ['127.0.0.1:1'], logger: logger as never };
    const log = clientConfig(opts, resolveOptions(opts)).logCreator!(logLevel.INFO);
    const entry = (level: logLevel, message: string) =>
      log({
        namespace: 'Connection',
        level,
        label: 'ERROR',
        log: { timestamp: '', message, broker: '127.0.0.1:1', stack: 'Error: at ...' },
      });
    for (let i = 0; i < 5; i++) entry(logLevel.ERROR, 'Connection error: connect ECONNREFUSED 127.0.0.1:1');
    entry(logLevel.WARN, 'Response Heartbeat failed');
    entry(logLevel.INFO, 'Starting');
    entry(logLevel.INFO, 'Starting');
    expect(lines.map((l) => `${l.level} ${l.msg}`)).toEqual([
      'error Connection error: connect ECONNREFUSED 127.0.0.1:1',
      'warn Response Heartbeat failed',
      'info Starting',
      'info Starting',
    ]);
    expect(lines[0]!.obj).toEqual({ kafka: { timestamp: '', broker: '127.0.0.1:1' } });
  });
});
