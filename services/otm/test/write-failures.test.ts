/**
 * Every store write of `otm serve` fails once, and the process keeps serving (issue 42): a PUT, a
 * bulk request, a DELETE, the event index's commit in the background, an API key's change. Each
 * failure is the one a full disk gives: LMDB's commit failing with EIO (lmdb-js rejects the write
 * with "Commit failed" and the cause in `commitError`, which nobody else handles: unhandled, it
 * would end the process, and vitest would fail this file), or the event log's write(2) failing
 * with ENOSPC. The write is answered 503 with Retry-After, the store says it refuses writes until
 * its probe finds it can write again, and the same write then succeeds. Nothing acknowledged is lost.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { AdapterError, createLogger, parseTokens } from '@otm/core';
import { ALL_ROLES, createService, embeddedAdapterConfig, openAdapters, type Adapters, type Service } from '../src/index.js';
import { TOKENS, auth, json } from './helpers.js';

interface Root {
  childTransaction(fn: () => unknown): Promise<unknown>;
  transaction(fn: () => unknown): Promise<unknown>;
}

/** A commit as lmdb-js fails it on a full disk: "Commit failed", the EIO in `commitError`, unhandled until someone looks. */
const lmdbCommitFailure = () =>
  Promise.reject(
    Object.assign(new Error('Commit failed (see commitError for details)'), {
      commitError: Promise.reject(Object.assign(new Error('Input/output error'), { code: 5 })),
    }),
  );

describe('every store write fails once; the process keeps serving', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-write-failures-'));
  let adapters: Adapters;
  let svc: Service;
  /** LMDB commits and event log writes to fail, one each, from now on. */
  const fail = { lmdb: 0, log: 0 };

  beforeAll(async () => {
    const logger = createLogger('silent');
    adapters = openAdapters(embeddedAdapterConfig(dataDir), logger);
    svc = await createService(ALL_ROLES, adapters, { tokens: parseTokens(TOKENS), logger, bodyLimit: 1_048_576, maxDepth: 64 });
    await svc.app.ready();
    const root = (adapters.events as unknown as { opts: { root: Root } }).opts.root;
    for (const method of ['childTransaction', 'transaction'] as const) {
      const real = root[method].bind(root);
      root[method] = (fn) => (fail.lmdb > 0 && fail.lmdb-- > 0 ? lmdbCommitFailure() : real(fn));
    }
    const writev = fs.writev.bind(fs) as (...a: unknown[]) => void;
    vi.spyOn(fs, 'writev').mockImplementation((...args: unknown[]) => {
      if (fail.log > 0 && fail.log-- > 0) {
        const callback = args.at(-1) as (e: Error) => void;
        return void process.nextTick(() =>
          callback(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })),
        );
      }
      return writev(...args);
    });
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await svc?.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const send = (method: 'PUT' | 'POST' | 'DELETE', url: string, body?: unknown) =>
    svc.app.inject({ method, url, headers: { ...json, ...auth() }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) });
  const ready = async () => (await svc.app.inject('/readyz')).statusCode;
  /** The refusal of a write the store could not make: 503, Retry-After, the cause in plain words. */
  const refused = (res: Awaited<ReturnType<typeof send>>, store: string, cause: RegExp) => {
    expect(res.statusCode).toBe(503);
    expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
    const items = Array.isArray(res.json()) ? res.json<Array<{ type: string; message: string }>>() : [];
    for (const item of items) expect(item).toEqual({ type: 'insufficientStorage', message: expect.stringMatching(cause) });
    expect(res.body).toContain(`store ${store} refuses writes`);
  };
  /** Waits until the stores take writes again (their probes), by themselves. */
  const writable = () => vi.waitFor(async () => expect(await ready()).toBe(200), { timeout: 10_000, interval: 100 });

  const acknowledged: Array<[kind: string, id: string]> = [];
  const location = (i: number) => ({
    eventType: 'locationUpdateEvent',
    id: `5c000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    lifecycle: 'actual',
    creationDate: new Date(Date.UTC(2026, 2, 1) + i * 1000).toISOString(),
    geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
  });

  it('a PUT of an entity (an LMDB commit)', async () => {
    fail.lmdb = 1;
    refused(await send('PUT', '/api/v5/vehicles', { entityType: 'vehicle', name: 'A' }), 'lmdb', /an I\/O error/);
    expect((await svc.app.inject('/readyz')).json()).toMatchObject({ checks: { 'store lmdb': false } });
    await writable();
    const again = await send('PUT', '/api/v5/vehicles', { entityType: 'vehicle', name: 'A' });
    expect(again.statusCode).toBe(200);
    acknowledged.push(['vehicles', again.json<{ id: string }>().id]);
  });

  it('a PUT of an event (a write of the event log)', async () => {
    fail.log = 1;
    refused(await send('PUT', '/api/v5/events', location(1)), 'event-log', /no space left/);
    expect((await svc.app.inject('/readyz')).json()).toMatchObject({ checks: { 'store event-log': false } });
    await writable();
    expect((await send('PUT', '/api/v5/events', location(1))).statusCode).toBe(200);
    acknowledged.push(['events', location(1).id]);
  });

  it('a bulk request: every document not stored says so, with Retry-After', async () => {
    fail.log = 1;
    const docs = [location(2), location(3)];
    const res = await send('POST', '/api/v5/bulk/events', docs);
    expect(res.statusCode).toBe(503);
    expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
    expect(res.json()).toEqual({
      accepted: 0,
      rejected: 2,
      items: docs.map((_, index) => ({
        index,
        errors: [{ type: 'insufficientStorage', message: expect.stringMatching(/store event-log refuses writes: no space left/) }],
      })),
    });
    await writable();
    expect((await send('POST', '/api/v5/bulk/events', docs)).json()).toMatchObject({ accepted: 2, rejected: 0 });
    for (const d of docs) acknowledged.push(['events', d.id]);
  });

  it('a DELETE', async () => {
    const made = await send('PUT', '/api/v5/vehicles', { entityType: 'vehicle', name: 'B' });
    const id = made.json<{ id: string }>().id;
    fail.lmdb = 1;
    refused(await send('DELETE', `/api/v5/vehicles/${id}`), 'lmdb', /an I\/O error/);
    expect((await svc.app.inject({ method: 'GET', url: `/api/v5/vehicles/${id}`, headers: auth() })).statusCode).toBe(200);
    await writable();
    expect((await send('DELETE', `/api/v5/vehicles/${id}`)).statusCode).toBe(204);
  });

  it("the event index's commit in the background: tried again by itself, the event readable meanwhile", async () => {
    const doc = location(4);
    expect((await send('PUT', '/api/v5/events', doc)).statusCode).toBe(200); // in the log, answered
    acknowledged.push(['events', doc.id]);
    fail.lmdb = 1; // its index commit, some 50 ms later
    expect((await svc.app.inject({ method: 'GET', url: `/api/v5/events/${doc.id}`, headers: auth() })).statusCode).toBe(200);
    // Listed once the commit that failed was made again (lists wait for the index's commit).
    await vi.waitFor(
      async () => {
        const list = await svc.app.inject({ method: 'GET', url: '/api/v5/events?limit=100', headers: auth() });
        expect(list.json<{ items: Array<{ id: string }> }>().items.map((e) => e.id)).toContain(doc.id);
      },
      { timeout: 10_000, interval: 100 },
    );
    expect(fail.lmdb).toBe(0);
    await writable();
  });

  it("an API key's change (`otm keys`): a retryable failure, then done", async () => {
    fail.lmdb = 1;
    const record = {
      id: 'a1b2c3d4-0000-4000-8000-000000000001',
      tenant: 'acme',
      scopes: ['read'],
      hash: 'x'.repeat(64),
      createdAt: new Date().toISOString(),
    };
    const first = await adapters.apiKeys.create(record).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(AdapterError);
    expect(first).toMatchObject({ retryable: true });
    await adapters.apiKeys.create(record);
    expect((await adapters.apiKeys.list('acme')).map((k) => k.id)).toEqual([record.id]);
  });

  it('kept serving: every write answered 200 is readable', async () => {
    expect(await ready()).toBe(200);
    for (const [kind, id] of acknowledged) {
      expect((await svc.app.inject({ method: 'GET', url: `/api/v5/${kind}/${id}`, headers: auth() })).statusCode, `${kind} ${id}`).toBe(
        200,
      );
    }
  });
});
