/// <reference path="../../../vitest.context.d.ts" />
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { createLogger, parseTokens, type ConnectionLimits } from '@otm/core';
import { createEmbeddedService, type EmbeddedService } from '../src/index.js';

export const TOKENS =
  'writer-token-acme:acme:read+write,reader-token-acme:acme:read,writer-token-globex:globex:read+write,writeonly-token:acme:write';
export const auth = (token = 'writer-token-acme') => ({ authorization: `Bearer ${token}` });
export const json = { 'content-type': 'application/json' };

/** One of the model's 59 example documents (packages/model/test/fixtures/model-examples.json). */
export interface ModelExample {
  name: string;
  /** Its kind, or null for a fragment (an example of a schema that is no kind). */
  kind: string | null;
  valid: boolean;
  document: Record<string, unknown>;
}
export const MODEL_EXAMPLES = JSON.parse(
  fs.readFileSync(new URL('../../../packages/model/test/fixtures/model-examples.json', import.meta.url), 'utf8'),
) as ModelExample[];

export interface TestService extends EmbeddedService {
  readonly dataDir: string;
}

/**
 * Where the HTTP suites run: `embedded` (the default: one process, `app.inject`) or `distributed`
 * (ingress, query and worker as separate processes on Kafka, Redis and ClickHouse). The vitest
 * project provides it (vitest.config.ts): `distributed` for the wrappers in test/distributed/
 * that import these suites, `embedded` for everything else.
 */
export const target = (): 'embedded' | 'distributed' => inject('otmTarget');

/** An embedded service on a fresh data folder, for `app.inject`; or the distributed deployment. */
export async function startService(
  opts: {
    bodyLimit?: number;
    maxDepth?: number;
    bulkThreads?: number;
    bulkThreadMinBytes?: number;
    connections?: Partial<ConnectionLimits>;
  } = {},
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
