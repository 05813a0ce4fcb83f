/**
 * For a contract's `describe`: a function that opens the adapter's fixture for a test, the
 * fixture being closed after that test (whether it passed or not).
 */
import { afterEach } from 'vitest';

export function openedPerTest<F extends { close(): Promise<void> }>(factory: () => Promise<F>): () => Promise<F> {
  let fx: F | undefined;
  afterEach(async () => {
    await fx?.close();
    fx = undefined;
  });
  return async () => (fx = await factory());
}
