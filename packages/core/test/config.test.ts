import { describe, expect, it } from 'vitest';
import fs, { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CONFIG_VARIABLES, ConfigError, loadConfig } from '../src/index.js';

describe('loadConfig', () => {
  it('has defaults for the embedded deployment', () => {
    const c = loadConfig({});
    expect(c).toMatchObject({
      port: 8080,
      host: '127.0.0.1',
      bus: 'memory',
      entityStore: 'embedded',
      eventStore: 'embedded',
      tokens: undefined,
      redisCache: true,
    });
    expect(loadConfig({ OTM_REDIS_CACHE: 'off' }).redisCache).toBe(false);
    expect(c.dataDir.endsWith('/data')).toBe(true);
    expect(Object.isFrozen(c)).toBe(true);
  });

  it.each([
    [{ PORT: 'eighty' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ OTM_BUS: 'rabbit' }, 'OTM_BUS'],
    [{ OTM_BUS: 'kafka' }, 'KAFKA_BROKERS'],
    [{ KAFKA_BROKERS: 'nohost' }, 'KAFKA_BROKERS'],
    [{ OTM_ENTITY_STORE: 'redis' }, 'REDIS_URL'],
    [{ OTM_ENTITY_STORE: 'redis', REDIS_URL: 'http://x' }, 'REDIS_URL'],
    [{ OTM_EVENT_STORE: 'clickhouse' }, 'CLICKHOUSE_URL'],
    [{ OTM_TOKENS: 'short:acme:read' }, 'OTM_TOKENS'],
    [{ OTM_TOKENS: 'longenough:acme:admin' }, 'OTM_TOKENS'],
    [{ OTM_TOKENS: 'longenough:acme' }, 'OTM_TOKENS'],
    [{ OTM_TOKENS: 'longenough:ac/me:read' }, 'OTM_TOKENS'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ OTM_REDIS_CACHE: 'yes' }, 'OTM_REDIS_CACHE'],
    [{ OTM_BODY_LIMIT: '-1' }, 'OTM_BODY_LIMIT'],
    [{ KAFKA_MAX_REQUEST_BYTES: '100' }, 'KAFKA_MAX_REQUEST_BYTES'],
    [{ OTM_HEADERS_TIMEOUT_MS: '0' }, 'OTM_HEADERS_TIMEOUT_MS'],
    [{ OTM_REQUEST_TIMEOUT_MS: '0' }, 'OTM_REQUEST_TIMEOUT_MS'],
    [{ OTM_REQUEST_TIMEOUT_MS: '30s' }, 'OTM_REQUEST_TIMEOUT_MS'],
    [{ OTM_HEADERS_TIMEOUT_MS: '20000', OTM_REQUEST_TIMEOUT_MS: '10000' }, 'OTM_HEADERS_TIMEOUT_MS'],
    [{ OTM_KEEP_ALIVE_TIMEOUT_MS: '0' }, 'OTM_KEEP_ALIVE_TIMEOUT_MS'],
    [{ OTM_IDLE_TIMEOUT_MS: '-5' }, 'OTM_IDLE_TIMEOUT_MS'],
    [{ OTM_MAX_CONNECTIONS: '0' }, 'OTM_MAX_CONNECTIONS'],
  ])('rejects %j naming %s', (env, variable) => {
    let err: unknown;
    try {
      loadConfig(env);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).variable).toBe(variable);
    expect((err as Error).message.startsWith(`${variable}:`)).toBe(true);
  });

  it('has connection limits, each set by its variable', () => {
    expect(loadConfig({}).connections).toEqual({
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      keepAliveTimeoutMs: 65_000,
      idleTimeoutMs: 30_000,
      maxConnections: 1024,
    });
    expect(
      loadConfig({
        OTM_HEADERS_TIMEOUT_MS: '2000',
        OTM_REQUEST_TIMEOUT_MS: '4000',
        OTM_KEEP_ALIVE_TIMEOUT_MS: '1000',
        OTM_IDLE_TIMEOUT_MS: '6000',
        OTM_MAX_CONNECTIONS: '50',
      }).connections,
    ).toEqual({ headersTimeoutMs: 2000, requestTimeoutMs: 4000, keepAliveTimeoutMs: 1000, idleTimeoutMs: 6000, maxConnections: 50 });
    // A short request timeout alone shortens the headers' default with it.
    expect(loadConfig({ OTM_REQUEST_TIMEOUT_MS: '3000' }).connections.headersTimeoutMs).toBe(3000);
  });

  it('reads the feed retention as a duration and the track window in days', () => {
    expect(loadConfig({}).feedRetentionMs).toBe(7 * 86_400_000);
    expect(loadConfig({}).trackMaxDays).toBe(31);
    expect(loadConfig({ OTM_FEED_RETENTION: '36h' }).feedRetentionMs).toBe(36 * 3_600_000);
    expect(loadConfig({ OTM_FEED_RETENTION: '90m', OTM_TRACK_MAX_DAYS: '7' })).toMatchObject({
      feedRetentionMs: 5_400_000,
      trackMaxDays: 7,
    });
    for (const [variable, value] of [
      ['OTM_FEED_RETENTION', '7'],
      ['OTM_FEED_RETENTION', '10s'],
      ['OTM_FEED_RETENTION', 'a week'],
      ['OTM_TRACK_MAX_DAYS', '0'],
    ] as const) {
      expect(() => loadConfig({ [variable]: value }), `${variable}=${value}`).toThrow(ConfigError);
    }
  });

  it('reads the entity export interval as a duration, or off', () => {
    expect(loadConfig({}).entityExportIntervalMs).toBe(1_000);
    expect(loadConfig({})).toMatchObject({ eventSegmentBytes: 64 * 1024 * 1024, eventCompactionIntervalMs: 600_000 });
    expect(loadConfig({ OTM_EVENT_SEGMENT_BYTES: '16384', OTM_EVENT_COMPACTION_INTERVAL: '250ms' })).toMatchObject({
      eventSegmentBytes: 16_384,
      eventCompactionIntervalMs: 250,
    });
    expect(loadConfig({ OTM_EVENT_COMPACTION_INTERVAL: 'off' }).eventCompactionIntervalMs).toBe(0);
    expect(() => loadConfig({ OTM_EVENT_SEGMENT_BYTES: '100' })).toThrow(/OTM_EVENT_SEGMENT_BYTES: must be a whole number from 4096/);
    expect(() => loadConfig({ OTM_EVENT_COMPACTION_INTERVAL: '10ms' })).toThrow(/OTM_EVENT_COMPACTION_INTERVAL: must be off or a duration/);
    expect(loadConfig({ OTM_ENTITY_EXPORT_INTERVAL: '5s' }).entityExportIntervalMs).toBe(5_000);
    expect(loadConfig({ OTM_ENTITY_EXPORT_INTERVAL: '2m' }).entityExportIntervalMs).toBe(120_000);
    expect(loadConfig({ OTM_ENTITY_EXPORT_INTERVAL: 'off' }).entityExportIntervalMs).toBe(0);
    for (const value of ['0s', '1', '2h', 'never']) {
      expect(() => loadConfig({ OTM_ENTITY_EXPORT_INTERVAL: value }), value).toThrow(
        /OTM_ENTITY_EXPORT_INTERVAL: must be off or a duration/,
      );
    }
  });

  it('reads OTM_WEB_DIR as a folder that holds the built pages', () => {
    expect(loadConfig({}).webDir).toBeUndefined();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-web-dir-'));
    try {
      fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html>');
      // The fleet page alone is no build of the pages: the docs page is one of them.
      expect(() => loadConfig({ OTM_WEB_DIR: dir })).toThrow(/^OTM_WEB_DIR: .* \(docs\.html missing\)/);
      fs.writeFileSync(path.join(dir, 'docs.html'), '<!doctype html>');
      expect(loadConfig({ OTM_WEB_DIR: path.relative(process.cwd(), dir) }).webDir).toBe(dir);
      expect(() => loadConfig({ OTM_WEB_DIR: path.join(dir, 'nowhere') })).toThrow(/index\.html and docs\.html missing/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('accepts the distributed settings', () => {
    const c = loadConfig({
      OTM_BUS: 'kafka',
      KAFKA_BROKERS: '127.0.0.1:9092, kafka-2:9092',
      OTM_ENTITY_STORE: 'redis',
      REDIS_URL: 'redis://127.0.0.1:6379',
      OTM_EVENT_STORE: 'clickhouse',
      CLICKHOUSE_URL: 'http://127.0.0.1:8123',
      OTM_TOKENS: 's3cret-token:acme:read+write,viewer-token:acme:read',
    });
    expect(c.kafkaBrokers).toEqual(['127.0.0.1:9092', 'kafka-2:9092']);
    expect(c.kafka).toMatchObject({ lingerMs: 5, maxRequestBytes: 1_000_000 });
    expect(loadConfig({ KAFKA_MAX_REQUEST_BYTES: '4000000' }).kafka.maxRequestBytes).toBe(4_000_000);
    expect(c.tokens?.map((t) => [t.tenant, [...t.scopes]])).toEqual([
      ['acme', ['read', 'write']],
      ['acme', ['read']],
    ]);
  });
});

describe('the list of variables', () => {
  const source = readFileSync(new URL('../src/config.ts', import.meta.url), 'utf8');
  const docs = readFileSync(new URL('../../../docs/configuration.md', import.meta.url), 'utf8');
  const listed = Object.keys(CONFIG_VARIABLES).sort();

  it('names every variable loadConfig reads', () => {
    const body = source.slice(source.indexOf('export function loadConfig'));
    const read = new Set<string>();
    for (const m of body.matchAll(/env(?:, |\.)'?([A-Z][A-Z0-9_]+)'?/g)) read.add(m[1]!);
    expect([...read].sort()).toEqual(listed);
  });

  it('is documented in docs/configuration.md, every variable in its table', () => {
    const documented = new Set([...docs.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]!));
    expect(listed.filter((v) => !documented.has(v))).toEqual([]);
  });
});
