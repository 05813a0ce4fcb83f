/** Bounds on waits: the Kafka adapter never hangs on a broker that does not answer. */

/** Rejects with `onTimeout()` when `p` has not settled after `ms`. */
export function withTimeout<T>(p: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
