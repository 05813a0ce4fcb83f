/**
 * What the contracts' test files share. For a contract's `describe`: a function that opens the adapter's fixture for a test, the
 * fixture being closed after that test (whether it passed or not).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe } from 'vitest';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';

export function openedPerTest<F extends { close(): Promise<void> }>(factory: () => Promise<F>): () => Promise<F> {
  let fx: F | undefined;
  afterEach(async () => {
    await fx?.close();
    fx = undefined;
  });
  return async () => (fx = await factory());
}

/**
 * The contracts of an adapter on Redis: `register` (which calls a contract) runs inside a
 * `describe` that starts a redis-server of its own before and stops it after, skipped when the
 * integration services are off. `url()` is the server's, once started.
 */
export function onOwnRedis(label: string, register: (url: () => string) => void): void {
  describe.skipIf(!integrationEnabled(label))('on Redis', () => {
    let redis: RedisService | undefined;
    beforeAll(async () => {
      requireServices(['redis']);
      redis = await startRedis();
    });
    afterAll(async () => {
      await redis?.stop();
    });
    register(() => redis!.url);
  });
}

/** A key prefix of a test's own on a possibly shared Redis. */
export const testPrefix = (): string => `otm-test-${randomUUID().slice(0, 8)}`;

/** Removes every key under `prefix` (what a test wrote). */
export async function removeKeys(url: string, prefix: string): Promise<void> {
  const admin = new Redis(url);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await admin.del(...keys);
    } while (cursor !== '0');
  } finally {
    await admin.quit();
  }
}
