/**
 * A Lua script of the entity store, run with EVALSHA (its SHA-1, not its body, on the wire) and
 * sent once more with EVAL when the server does not have it (NOSCRIPT: a restart, a failover,
 * SCRIPT FLUSH). Inside MULTI a NOSCRIPT could not be answered that way: scripts run in a unit's
 * commit are sent with EVAL (feed.ts `addFeedTrim`).
 */
import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { errorText } from '../error-text.js';

export class LuaScript {
  readonly sha: string;

  constructor(readonly body: string) {
    this.sha = createHash('sha1').update(body).digest('hex');
  }

  /** Runs the script on `keys` (all in one slot on Cluster) with `args`; its reply. */
  run(redis: Redis | Cluster, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    return redis.evalsha(this.sha, keys.length, ...keys, ...args).catch((e: unknown) => {
      if (!errorText(e).startsWith('NOSCRIPT')) throw e;
      return redis.eval(this.body, keys.length, ...keys, ...args);
    });
  }
}
