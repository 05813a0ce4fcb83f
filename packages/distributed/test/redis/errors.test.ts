/** Which Redis failures a retry can help (no I/O). */
import { describe, expect, it } from 'vitest';
import { AdapterError, OtmServiceError } from '@otm/core';
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
    [new Error('OOM command not allowed when used memory > maxmemory')],
    [new AdapterError('redis', 'no answer within 5000 ms', { retryable: true })],
  ])('anything else is a retryable 503 (%s)', (failure) => {
    const e = redisFailure(failure);
    expect(e).toBeInstanceOf(OtmServiceError);
    expect(e).toMatchObject({ status: 503, retryable: true, message: `redis: ${failure.message}` });
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
