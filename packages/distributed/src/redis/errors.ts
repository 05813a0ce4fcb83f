/**
 * Which Redis failures a retry can help: every command of the entity store goes through
 * `redisFailure` when it fails.
 * - A key that holds another type than the store writes there (WRONGTYPE): the data is not what
 *   the store's key layout says (keys.ts), so the same command fails again: a non-retryable
 *   AdapterError. So is a stored value that cannot be decoded (thrown where it is read).
 * - Anything else (Redis unreachable, no answer in time, a failover, out of memory): a retryable
 *   503 (`unavailable`); the worker retries, then the batch is replayed.
 */
import { AdapterError, OtmServiceError, unavailable } from '@otm/core';
import { errorText } from '../error-text.js';

/** The error to throw for a failed Redis command. */
export function redisFailure(e: unknown): Error {
  if (e instanceof OtmServiceError || (e instanceof AdapterError && !e.retryable)) return e;
  if (errorText(e).startsWith('WRONGTYPE')) return new AdapterError('redis', errorText(e), { retryable: false, cause: e });
  return unavailable(`redis: ${errorText(e)}`, 2, e);
}
