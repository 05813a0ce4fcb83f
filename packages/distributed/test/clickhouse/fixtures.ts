/**
 * What the ClickHouse store's tests share: their ClickHouse, event puts, references, and the ids
 * docs/analytics.md names.
 */
import { afterAll, beforeAll } from 'vitest';
import type { DocumentWrite } from '@otm/core';
import { requireServices, startClickHouse, type UrlService } from '../../../../test/infra/services.js';

/** Starts the tests' ClickHouse before the suite's tests and stops it after them; `url()` is where it answers. */
export function suiteClickHouse(): { url: () => string } {
  let ch: UrlService | undefined;
  beforeAll(async () => {
    requireServices(['clickhouse']);
    ch = await startClickHouse();
  });
  afterAll(async () => {
    await ch?.stop();
  });
  return { url: () => ch!.url };
}

export const put = (tenant: string, doc: Record<string, unknown>, rank = 0): DocumentWrite => ({
  op: 'put',
  tenant,
  doc: { kind: 'events', key: doc.id as string, lifecycleRank: rank, json: JSON.stringify(doc), value: doc },
});
export const ref = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
export const V1 = 'b9b7e0f2-8a4c-4a6e-9d35-1f4b1e0c0a01';
export const V2 = 'b9b7e0f2-8a4c-4a6e-9d35-1f4b1e0c0a02';
export const T1 = 'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a01';
export const [T2, T3, T4] = [
  'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a02',
  'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a03',
  'c0c0c0c0-8a4c-4a6e-9d35-1f4b1e0c0a04',
];
/** The consignment docs/analytics.md names; the actions that name it. */
export const C1 = '5e1f0c2a-7d3b-4c8e-9f10-2a3b4c5d6e01';
export const [A1, A3] = ['a0a0a0a0-8a4c-4a6e-9d35-1f4b1e0c0a01', 'a0a0a0a0-8a4c-4a6e-9d35-1f4b1e0c0a03'];
