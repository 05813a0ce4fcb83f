/**
 * Every error answer is the model's error array, 500s included (the model's own `serverError` is
 * a bare string); a store's refusal for lack of room is a 503 with Retry-After naming it, any other
 * failure a retry can help a 503 `unavailable`, the rest a 500 `internal` that names no internals.
 */
import { describe, expect, it } from 'vitest';
import { AdapterError, StorageRefused, TokenVerifier, createLogger } from '@otm/core';
import { createHttpApp } from '@otm/http';

function app(thrown: () => unknown) {
  const a = createHttpApp({
    logger: createLogger('silent'),
    verifier: new TokenVerifier([]),
    bodyLimit: 1024,
    maxDepth: 8,
    readiness: () => Promise.resolve({}),
  });
  a.get('/fails', async () => {
    await Promise.resolve();
    throw thrown();
  });
  return a;
}

describe('error answers', () => {
  it('a fault is a 500 with the error array, naming no internals', async () => {
    const res = await app(() => new TypeError("Cannot read properties of undefined (reading 'secret')")).inject('/fails');
    expect(res.statusCode).toBe(500);
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(res.json()).toEqual([{ type: 'internal', message: expect.stringMatching(/a fault of the service/) }]);
    expect(res.body).not.toMatch(/secret|TypeError/);
  });

  it('an AdapterError no retry helps is a 500 too', async () => {
    const res = await app(() => new AdapterError('lmdb', 'a record cannot be decoded', { retryable: false })).inject('/fails');
    expect(res.statusCode).toBe(500);
    expect(res.json()).toEqual([{ type: 'internal', message: expect.any(String) }]);
  });

  it('a store refusing writes for lack of room is a 503 with Retry-After naming it', async () => {
    const res = await app(() => new StorageRefused('lmdb', 'io', 'an I/O error from the disk in /data/store, 0 bytes free')).inject(
      '/fails',
    );
    expect(res.statusCode).toBe(503);
    expect(res.headers['retry-after']).toBe('30');
    expect(res.json()).toEqual([
      {
        type: 'insufficientStorage',
        message: expect.stringMatching(/^not stored: store lmdb refuses writes: an I\/O error from the disk in \/data\/store/),
      },
    ]);
  });

  it('another failure a retry can help is a 503 unavailable with Retry-After', async () => {
    const res = await app(() => new AdapterError('lmdb', 'lmdb: the commit failed (Database is closed)', { retryable: true })).inject(
      '/fails',
    );
    expect(res.statusCode).toBe(503);
    expect(res.headers['retry-after']).toBe('5');
    expect(res.json()).toEqual([{ type: 'unavailable', message: expect.stringMatching(/lmdb store cannot take this request now/) }]);
  });
});
