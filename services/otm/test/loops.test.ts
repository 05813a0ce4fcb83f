/**
 * A process's background loops in its probes (issue 36): the embedded service, its stores wrapped
 * to fail on demand. While the change feed fails, `/readyz` names the stream's reading of the
 * tenant and `/healthz` turns 503 once it stayed down OTM_STALL_SECONDS (0 here); while the
 * subscription store fails, the dispatcher's scan; `/metrics` has `otm_loop_up` of each kind; all
 * come back once the store does. (The loops themselves: services/dispatcher/test/recovery.test.ts,
 * services/query/test/stream.test.ts, services/worker/test/entity-export.test.ts.)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, parseTokens, type ChangeFeed, type EntityStore, type SubscriptionStore } from '@otm/core';
import { ALL_ROLES, createService, openEmbeddedAdapters, type Service } from '../src/index.js';
import { TOKENS, auth } from './helpers.js';
import { openStream, type SseStream } from './sse.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `target` with every method failing while `failing()`; `feed` (if given) standing for its `feed`. */
function failing<T extends object>(target: T, isFailing: () => boolean, what: string, feed?: ChangeFeed): T {
  return new Proxy(target, {
    get(t, prop) {
      if (prop === 'feed' && feed !== undefined) return feed;
      const value = Reflect.get(t, prop, t) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) =>
        isFailing() ? Promise.reject(new Error(`${what} unavailable`)) : (value as (...a: unknown[]) => unknown).apply(t, args);
    },
  });
}

describe('the probes name the loops that are down', () => {
  const state = { feed: false, subscriptions: false };
  let dir: string;
  let svc: Service;
  let url: string;
  let stream: SseStream | undefined;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-loops-'));
    const logger = createLogger('silent');
    const adapters = openEmbeddedAdapters(dir, logger);
    const feed = failing(adapters.entities.feed, () => state.feed, 'the change feed');
    svc = await createService(
      ALL_ROLES,
      {
        ...adapters,
        entities: failing<EntityStore>(adapters.entities, () => false, '', feed),
        subscriptions: failing<SubscriptionStore>(adapters.subscriptions, () => state.subscriptions, 'the subscription store'),
        migrate: () => adapters.migrate(),
        close: () => adapters.close(),
      },
      { tokens: parseTokens(TOKENS), logger, bodyLimit: 1_048_576, maxDepth: 64, stallSeconds: 0, webhooks: { scanMs: 20, pollMs: 10 } },
    );
    url = await svc.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    stream?.close();
    await svc?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const get = async (p: string) => {
    const res = await fetch(`${url}${p}`);
    return { status: res.status, text: await res.text() };
  };
  const probe = async (p: '/readyz' | '/healthz') => {
    const { status, text } = await get(p);
    return { status, body: JSON.parse(text) as { checks?: Record<string, boolean>; down?: Array<{ name: string; reason: string }> } };
  };
  const until = async (what: string, check: () => Promise<boolean>) => {
    const deadline = Date.now() + 15_000;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
      await sleep(10);
    }
  };
  const loopUp = async (loop: string) => new RegExp(`^otm_loop_up\\{loop="${loop}"\\} (\\d)$`, 'm').exec((await get('/metrics')).text)?.[1];

  it('the stream reading of a tenant, while the change feed fails: /readyz and /healthz 503 naming it, then 200 again', async () => {
    stream = await openStream(url, '/api/v5/stream', auth());
    expect(stream.status).toBe(200);
    await until('ready', async () => (await probe('/readyz')).status === 200);
    expect(await loopUp('stream-reader')).toBe('1');

    state.feed = true;
    await until('not ready', async () => (await probe('/readyz')).status === 503);
    const ready = await probe('/readyz');
    expect(ready.body.checks?.['stream reader acme']).toBe(false);
    expect(ready.body.down).toEqual([expect.objectContaining({ name: 'stream reader acme', reason: 'the change feed unavailable' })]);
    const live = await probe('/healthz');
    expect(live.status).toBe(503);
    expect(live.body.down?.map((p) => p.name)).toEqual(['stream reader acme']);
    expect(await loopUp('stream-reader')).toBe('0');

    state.feed = false;
    await until('ready again', async () => (await probe('/readyz')).status === 200);
    expect((await probe('/healthz')).status).toBe(200);
    expect(await loopUp('stream-reader')).toBe('1');
  });

  it("the dispatcher's scan, while the subscription store fails", async () => {
    expect(await loopUp('dispatcher-scan')).toBe('1');
    state.subscriptions = true;
    await until('not ready', async () => (await probe('/readyz')).status === 503);
    expect((await probe('/readyz')).body.down).toEqual([
      expect.objectContaining({ name: 'dispatcher scan', reason: 'the subscription store unavailable' }),
    ]);
    expect((await probe('/healthz')).status).toBe(503);
    expect(await loopUp('dispatcher-scan')).toBe('0');
    state.subscriptions = false;
    await until('ready again', async () => (await probe('/readyz')).status === 200);
    expect(await loopUp('dispatcher-scan')).toBe('1');
  });
});
