import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLogger, parseTokens } from '@otm/core';
import { createEmbeddedService, type EmbeddedService } from '../src/index.js';

export const TOKENS = 'writer-token-acme:acme:read+write,reader-token-acme:acme:read,writer-token-globex:globex:read+write,writeonly-token:acme:write';
export const auth = (token = 'writer-token-acme') => ({ authorization: `Bearer ${token}` });
export const json = { 'content-type': 'application/json' };

export interface TestService extends EmbeddedService {
  readonly dataDir: string;
}

/** An embedded service on a fresh data folder, for `app.inject`. */
export async function startService(opts: { bodyLimit?: number; maxDepth?: number } = {}): Promise<TestService> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-test-'));
  const svc = await createEmbeddedService(
    { dataDir, bodyLimit: opts.bodyLimit ?? 1_048_576, maxDepth: opts.maxDepth ?? 64 },
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
