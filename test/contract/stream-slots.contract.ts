/**
 * The contract of the StreamSlots port (packages/core/src/ports.ts: the slots of open streams per
 * token, OTM_STREAMS_PER_TOKEN), run against every adapter: at most `limit` slots a token, a held
 * slot taken again without counting twice, a release freeing its slot at once, a slot not renewed
 * expiring after its time, a renewal keeping a slot (and taking back one that went missing), and,
 * where the adapter is shared by several processes, one count for all of them.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { StreamSlot, StreamSlots } from '@otm/core';
import { openedPerTest } from './fixture.js';

export interface StreamSlotsFixture {
  readonly slots: StreamSlots;
  /** Another process's view of the same slots, where the adapter is shared (Redis); absent in the process's own. */
  readonly other?: StreamSlots;
  close(): Promise<void>;
}

/** `shared`: the adapter is one count for several processes (its fixture gives `other`). */
export function streamSlotsContract(name: string, open: () => Promise<StreamSlotsFixture>, opts: { shared: boolean }): void {
  describe(`StreamSlots contract: ${name}`, () => {
    const fixture = openedPerTest(open);
    /** A token's reference (never a token: `StreamTickets.ref`), fresh for each test. */
    const owner = () => `ref-${randomUUID()}`;
    const slot = (o: string): StreamSlot => ({ owner: o, id: randomUUID() });
    const TTL = 30_000;

    it('lets a token hold at most `limit` slots, each token counted on its own', async () => {
      const { slots } = await fixture();
      const [a, b] = [owner(), owner()];
      for (let i = 0; i < 3; i++) expect(await slots.acquire(slot(a), 3, TTL)).toBe(true);
      expect(await slots.acquire(slot(a), 3, TTL)).toBe(false);
      expect(await slots.acquire(slot(b), 3, TTL)).toBe(true);
      // A larger limit (the setting changed) lets more in.
      expect(await slots.acquire(slot(a), 4, TTL)).toBe(true);
    });

    it('takes a slot already held again, renewed, without counting it twice', async () => {
      const { slots } = await fixture();
      const a = owner();
      const held = slot(a);
      expect(await slots.acquire(held, 2, TTL)).toBe(true);
      expect(await slots.acquire(held, 2, TTL)).toBe(true);
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(true);
      expect(await slots.acquire(held, 2, TTL)).toBe(true); // at the limit, and held: taken
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(false);
    });

    it('frees a released slot at once; releasing a slot not held changes nothing', async () => {
      const { slots } = await fixture();
      const a = owner();
      const [s1, s2] = [slot(a), slot(a)];
      expect(await slots.acquire(s1, 2, TTL)).toBe(true);
      expect(await slots.acquire(s2, 2, TTL)).toBe(true);
      await slots.release(slot(a));
      await slots.release(slot(owner()));
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(false);
      await slots.release(s1);
      await slots.release(s1);
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(true);
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(false);
    });

    it('stops counting a slot once its time is over unless it was renewed', async () => {
      const { slots } = await fixture();
      const a = owner();
      const [kept, lapsed] = [slot(a), slot(a)];
      expect(await slots.acquire(kept, 2, 400)).toBe(true);
      expect(await slots.acquire(lapsed, 2, 400)).toBe(true);
      await sleep(200);
      await slots.renew([kept], TTL);
      await sleep(400);
      // `lapsed` expired (a process that died holding it); `kept` is still held.
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(true);
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(false);
    });

    it('takes back, without counting, a slot a renewal finds missing (a stream let through uncounted)', async () => {
      const { slots } = await fixture();
      const [a, b] = [owner(), owner()];
      expect(await slots.acquire(slot(a), 1, TTL)).toBe(true);
      // Streams opened while the store failed hold no slot; their renewal takes one, past the limit.
      await slots.renew([slot(a), slot(b), slot(b)], TTL);
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(false);
      expect(await slots.acquire(slot(b), 2, TTL)).toBe(false);
      expect(await slots.acquire(slot(b), 3, TTL)).toBe(true);
      await slots.renew([], TTL); // nothing to renew: the counts stay as they are
      expect(await slots.acquire(slot(b), 3, TTL)).toBe(false);
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(false);
    });

    if (!opts.shared) return;
    it('counts the slots of every process sharing it together', async () => {
      const { slots, other } = await fixture();
      if (other === undefined) throw new Error("a shared adapter's fixture gives `other`");
      const a = owner();
      const mine = slot(a);
      expect(await slots.acquire(mine, 2, TTL)).toBe(true);
      expect(await other.acquire(slot(a), 2, TTL)).toBe(true);
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(false);
      expect(await other.acquire(slot(a), 2, TTL)).toBe(false);
      await other.release(mine); // a release from another process frees it too
      expect(await slots.acquire(slot(a), 2, TTL)).toBe(true);
    });
  });
}
