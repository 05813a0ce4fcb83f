import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Tests run against the TypeScript sources of every workspace, not their build output.
const src = (dir: string) => fileURLToPath(new URL(`./${dir}/src/index.ts`, import.meta.url));

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
      '@otm/cli': src('services/otm'),
    },
  },
  test: {
    include: ['packages/*/test/**/*.test.ts', 'services/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
