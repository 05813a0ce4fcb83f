/** Which Redis failures a retry can help (no I/O). */
import { describe, expect, it } from 'vitest';
import { AdapterError, OtmServiceError, StorageRefused, WriteState } from '@otm/core';
import { RedisEntityStore } from '../../src/index.js';
import { redisFailure } from '../../src/redis/errors.js';

describe('redisFailure', () => {
  it('a key holding another type than the store writes there: not retryable', () => {
    const e = redisFailure(new Error('WRONGTYPE Operation against a key holding the wrong kind of value'));
    expect(e).toBeInstanceOf(AdapterError);
    expect(e).toMatchObject({ adapter: 'redis', retryable: false });
  });

  it.each([
    [new Error('connect ECONNREFUSED 127.0.0.1:1')],
    [new Error('Command timed out')],
    [new AdapterError('redis', 'no answer within 5000 ms', { retryable: true })],
  ])('anything else is a retryable 503 (%s)', (failure) => {
    const e = redisFailure(failure);
    expect(e).toBeInstanceOf(OtmServiceError);
    expect(e).toMatchObject({ status: 503, retryable: true, message: `redis: ${failure.message}` });
  });

  it("Redis at maxmemory with noeviction: a retryable StorageRefused, itself or in a refused transaction's previousErrors", () => {
    const oom = new Error("OOM command not allowed when used memory > 'maxmemory'.");
    const execAbort = Object.assign(new Error('EXECABORT Transaction discarded because of previous errors.'), { previousErrors: [oom] });
    for (const failure of [oom, execAbort]) {
      const writes = new WriteState('redis');
      const e = redisFailure(failure, writes);
      expect(e).toBeInstanceOf(StorageRefused);
      expect(e).toMatchObject({ store: 'redis', refusal: 'out-of-memory', retryable: true, cause: failure });
      expect(e.message).toMatch(/OOM command not allowed/);
      expect(writes.part.status().up).toBe(false);
    }
  });

  it('a non-retryable AdapterError and an OtmServiceError are kept as they are', () => {
    const own = new AdapterError('redis', 'a pending effect cannot be decoded', { retryable: false });
    expect(redisFailure(own)).toBe(own);
    const unavailable = new OtmServiceError('unavailable', 503, 'x', { retryable: true });
    expect(redisFailure(unavailable)).toBe(unavailable);
  });

  it('a store without a redis:// URL is refused for good', () => {
    expect(() => new RedisEntityStore({ url: 'http://127.0.0.1:6379' })).toThrow(AdapterError);
    expect(() => new RedisEntityStore({})).toThrow(/a redis:\/\/ URL is needed/);
  });
});
