/**
 * The values vitest.config.ts `provide`s to the tests, read with `inject(key)` from 'vitest'.
 * Referenced (`/// <reference path>`) by vitest.config.ts and the test files that inject.
 */
declare module 'vitest' {
  export interface ProvidedContext {
    /**
     * What the HTTP suites of services/otm/test/ run against (services/otm/test/helpers.ts
     * `target()`): `embedded` (one process, `app.inject`; the default) or `distributed`
     * (ingress, query and worker as processes on Kafka, Redis and ClickHouse: the
     * `distributed` project, test/distributed/*.dist.test.ts).
     */
    otmTarget: 'embedded' | 'distributed';
  }
}

// A module, so that the declaration above augments vitest's types instead of replacing them.
export {};
