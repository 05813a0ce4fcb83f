import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLogger, parseTokens, type ConnectionLimits } from '@otm/core';
import { createEmbeddedService, type EmbeddedService } from '../src/index.js';

export const TOKENS = 'writer-token-acme:acme:read+write,reader-token-acme:acme:read,writer-token-globex:globex:read+write,writeonly-token:acme:write';
export const auth = (token = 'writer-token-acme') => ({ authorization: `Bearer ${token}` });
export const json = { 'content-type': 'application/json' };

export interface TestService extends EmbeddedService {
  readonly dataDir: string;
}

/**
 * Where the HTTP suites run: `embedded` (the default: one process, `app.inject`) or `distributed`
 * (ingress, query and worker as separate processes on Kafka, Redis and ClickHouse; set by the
 * wrappers in test/distributed/ before they import a suite).
 */
export const target = (): 'embedded' | 'distributed' =>
  (globalThis as { __OTM_TEST_TARGET__?: 'distributed' }).__OTM_TEST_TARGET__ ?? 'embedded';

/** An embedded service on a fresh data folder, for `app.inject`; or the distributed deployment. */
export async function startService(
  opts: { bodyLimit?: number; maxDepth?: number; bulkThreads?: number; bulkThreadMinBytes?: number; connections?: Partial<ConnectionLimits> } = {},
): Promise<TestService> {
  if (target() === 'distributed') {
    const { startDistributedService } = await import('../../../test/distributed/inject.js');
    return startDistributedService(opts);
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-test-'));
  const svc = await createEmbeddedService(
    {
      dataDir,
      bodyLimit: opts.bodyLimit ?? 1_048_576,
      maxDepth: opts.maxDepth ?? 64,
      bulkThreads: opts.bulkThreads,
      bulkThreadMinBytes: opts.bulkThreadMinBytes,
      connections: opts.connections,
    },
    parseTokens(TOKENS),
    createLogger('silent'),
  );
  await svc.app.ready();
  return {
    ...svc,
    dataDir,
    close: async () => {
      await svc.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
