/**
 * Which Redis failures a retry can help: every command of the entity store goes through
 * `redisFailure` when it fails.
 * - A key that holds another type than the store writes there (WRONGTYPE): the data is not what
 *   the store's key layout says (keys.ts), so the same command fails again: a non-retryable
 *   AdapterError. So is a stored value that cannot be decoded (thrown where it is read).
 * - Out of memory: Redis at `maxmemory` with the `noeviction` policy refuses every command that
 *   may grow its memory with "OOM command not allowed when used memory > 'maxmemory'." (in a
 *   MULTI, at queueing, and EXEC then answers EXECABORT, the OOM among its `previousErrors`): a
 *   StorageRefused (core/storage.ts), retryable, which marks the store's write state down (/readyz
 *   names it) until a write succeeds. The worker retries without committing its offsets.
 * - Anything else (Redis unreachable, no answer in time, a failover): a retryable 503
 *   (`unavailable`); the worker retries, then the batch is replayed.
 */
import { AdapterError, OtmServiceError, StorageRefused, unavailable, type WriteState } from '@otm/core';
import { errorText } from '../error-text.js';

/** The OOM refusal in a failure: its own text, or one of a refused transaction's `previousErrors`. */
export function redisOom(e: unknown): string | undefined {
  const texts = [errorText(e), ...((e as { previousErrors?: unknown[] } | null)?.previousErrors ?? []).map(errorText)];
  return texts.find((t) => t.startsWith('OOM '));
}

/** The error to throw for a failed Redis command (`writes`: the store's write state, marked down on OOM). */
export function redisFailure(e: unknown, writes?: WriteState): Error {
  if (e instanceof OtmServiceError || (e instanceof AdapterError && !e.retryable)) return e;
  if (e instanceof StorageRefused) return e;
  if (errorText(e).startsWith('WRONGTYPE')) return new AdapterError('redis', errorText(e), { retryable: false, cause: e });
  const oom = redisOom(e);
  if (oom !== undefined) {
    return writes === undefined ? new StorageRefused('redis', 'out-of-memory', oom, e) : writes.refuse('out-of-memory', oom, e);
  }
  return unavailable(`redis: ${errorText(e)}`, 2, e);
}
