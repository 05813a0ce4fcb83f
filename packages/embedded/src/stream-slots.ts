/** The slots of open streams (core ports.ts `StreamSlots`) in the process: Redis's twin is distributed redis/stream-slots.ts. */
import type { StreamSlot, StreamSlots } from '@otm/core';

/**
 * The stream slots of one process (the embedded deployment): per token, the ids
 * of its streams with the time each expires (`clock`). In one process a stream that closes always
 * releases its slot; the expiry is kept so that this one and Redis's answer alike.
 */
export class MemoryStreamSlots implements StreamSlots {
  /** Token (owner) → stream id → expiry (ms). */
  private readonly held = new Map<string, Map<string, number>>();

  constructor(private readonly clock: () => number = Date.now) {}

  /** Slots held now, over all tokens (expired ones not swept yet included): for tests. */
  get size(): number {
    let n = 0;
    for (const ids of this.held.values()) n += ids.size;
    return n;
  }

  acquire(slot: StreamSlot, limit: number, ttlMs: number): Promise<boolean> {
    const now = this.clock();
    let ids = this.held.get(slot.owner);
    if (ids !== undefined) for (const [id, expires] of ids) if (expires <= now) ids.delete(id);
    if (!ids?.has(slot.id) && (ids?.size ?? 0) >= limit) return Promise.resolve(false);
    if (ids === undefined) this.held.set(slot.owner, (ids = new Map<string, number>()));
    ids.set(slot.id, now + ttlMs);
    return Promise.resolve(true);
  }

  renew(slots: readonly StreamSlot[], ttlMs: number): Promise<void> {
    const expires = this.clock() + ttlMs;
    for (const slot of slots) {
      let ids = this.held.get(slot.owner);
      if (ids === undefined) this.held.set(slot.owner, (ids = new Map<string, number>()));
      ids.set(slot.id, expires);
    }
    return Promise.resolve();
  }

  release(slot: StreamSlot): Promise<void> {
    const ids = this.held.get(slot.owner);
    if (ids?.delete(slot.id) && ids.size === 0) this.held.delete(slot.owner);
    return Promise.resolve();
  }
}
