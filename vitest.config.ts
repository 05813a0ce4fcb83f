/// <reference path="./vitest.context.d.ts" />
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

const ROOT = fileURLToPath(new URL('.', import.meta.url));

// Tests run against the TypeScript sources of every workspace, not their build output.
const src = (dir: string) => path.join(ROOT, dir, 'src', 'index.ts');

/** Where test files live: the tests of each workspace, and those across packages (`test/`). */
const TEST_FOLDERS = ['packages/*/test/', 'services/*/test/', 'test/'];
const ALL_TESTS = TEST_FOLDERS.map((f) => `${f}**/*.test.ts`);

/**
 * The test files that need real services (Kafka, ClickHouse, Redis, nginx; started by
 * test/infra/services.ts): a folder (ending in `/`) or a file. They make the `integration`
 * project; every other test file is in `unit`, which needs no server and no process of ours
 * that needs one. A file that uses test/infra/services.ts or the distributed cluster must be
 * listed here: checked below when the configuration loads.
 */
const INTEGRATION = [
  'test/infra/',
  'test/contract/',
  'test/distributed/',
  'test/hostile/nginx.test.ts',
  'test/hostile/nginx-writers.test.ts',
  'packages/distributed/test/clickhouse/analytics.test.ts',
  'packages/distributed/test/clickhouse/refusals.test.ts',
  'packages/distributed/test/clickhouse/store.test.ts',
  'packages/distributed/test/clickhouse/tracks.test.ts',
  'packages/distributed/test/kafka/bus.test.ts',
  'packages/distributed/test/kafka/idempotence.test.ts',
  'packages/distributed/test/kafka/supervision.test.ts',
  'packages/distributed/test/redis/out-of-memory.test.ts',
  'packages/distributed/test/redis/store.test.ts',
  'packages/distributed/test/redis/stream-slots.test.ts',
];
const INTEGRATION_TESTS = INTEGRATION.map((p) => (p.endsWith('/') ? `${p}**/*.test.ts` : p));

/**
 * The HTTP suites of services/otm/test/ run again against the distributed deployment (ingress,
 * query and worker as processes on Kafka, Redis and ClickHouse) by these wrappers, in a project
 * of their own that provides `otmTarget: 'distributed'` (services/otm/test/helpers.ts `target()`).
 */
const DISTRIBUTED_WRAPPERS = ['test/distributed/*.dist.test.ts'];

/**
 * Tests in a real browser (Debian's chromium, driven by playwright-core; .ci/run installs it)
 * against `otm serve` as a process: a project of their own, `npm run test:browser`, run by `npm test`.
 */
const BROWSER_TESTS = ['test/browser/**/*.test.ts'];

/** Fails the run when a test file uses the services without being listed in INTEGRATION. */
function checkIntegrationList(): void {
  const usesServices = /['"][^'"]*\/(infra\/services|distributed\/cluster|distributed\/inject)\.js['"]/;
  const listed = (file: string) => INTEGRATION.some((p) => (p.endsWith('/') ? file.startsWith(p) : file === p));
  const unlisted: string[] = [];
  const folders = ['packages', 'services'].flatMap((d) => fs.readdirSync(path.join(ROOT, d)).map((name) => `${d}/${name}/test/`));
  for (const folder of [...folders, 'test/']) {
    const dir = path.join(ROOT, folder);
    if (!fs.existsSync(dir)) continue;
    for (const entry of fs.readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
      const file = `${folder}${entry.split(path.sep).join('/')}`;
      if (!file.endsWith('.test.ts') || file.includes('/node_modules/') || listed(file)) continue;
      if (usesServices.test(fs.readFileSync(path.join(ROOT, file), 'utf8'))) unlisted.push(file);
    }
  }
  if (unlisted.length > 0) {
    throw new Error(
      `vitest.config.ts: ${unlisted.join(', ')} use${unlisted.length === 1 ? 's' : ''} real services ` +
        '(test/infra/services.ts or test/distributed/): add to INTEGRATION, so that `npm run test:unit` needs no server',
    );
  }
}
checkIntegrationList();

export default defineConfig({
  resolve: {
    alias: {
      '@otm/model': src('packages/model'),
      '@otm/core': src('packages/core'),
      '@otm/embedded': src('packages/embedded'),
      '@otm/distributed': src('packages/distributed'),
      '@otm/http': src('packages/http'),
      '@otm/ingress': src('services/ingress'),
      '@otm/query': src('services/query'),
      '@otm/worker': src('services/worker'),
      '@otm/dispatcher': src('services/dispatcher'),
      '@otm/otm': src('services/otm'),
    },
  },
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // What the HTTP suites run against, read with `inject('otmTarget')` (vitest.context.d.ts).
    provide: { otmTarget: 'embedded' },
    // `npm test` runs them all; `npm run test:unit` the first, `npm run test:integration` integration and distributed, `npm run test:browser` browser.
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ALL_TESTS,
          exclude: [...configDefaults.exclude, ...INTEGRATION_TESTS, ...BROWSER_TESTS],
        },
      },
      {
        extends: true,
        test: {
          name: 'browser',
          include: BROWSER_TESTS,
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: INTEGRATION_TESTS,
          exclude: [...configDefaults.exclude, ...DISTRIBUTED_WRAPPERS],
        },
      },
      {
        extends: true,
        test: {
          name: 'distributed',
          include: DISTRIBUTED_WRAPPERS,
          provide: { otmTarget: 'distributed' },
        },
      },
    ],
  },
});
