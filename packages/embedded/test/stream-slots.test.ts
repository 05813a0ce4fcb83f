/** The stream slots of one process (stream-slots.ts); the StreamSlots contract runs on them too (test/contract). */
import { describe, expect, it } from 'vitest';
import type { StreamSlot } from '@otm/core';
import { MemoryStreamSlots } from '../src/index.js';

describe('stream slots in the process (MemoryStreamSlots)', () => {
  const slot = (owner: string, id: string): StreamSlot => ({ owner, id });

  it("holds at most the limit of a token's slots; other tokens are not affected; a release frees one at once", async () => {
    const slots = new MemoryStreamSlots(() => 1_000);
    expect(await slots.acquire(slot('a', '1'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '2'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '3'), 2, 100)).toBe(false);
    // A slot already held is taken again (renewed), not counted twice.
    expect(await slots.acquire(slot('a', '2'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('b', '1'), 2, 100)).toBe(true);
    await slots.release(slot('a', '1'));
    await slots.release(slot('a', '1'));
    await slots.release(slot('c', 'never held'));
    expect(await slots.acquire(slot('a', '3'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '4'), 2, 100)).toBe(false);
    expect(slots.size).toBe(3);
  });

  it('frees a slot once it expires; a renewal holds it longer, and takes back one that expired or went missing', async () => {
    let now = 1_000;
    const slots = new MemoryStreamSlots(() => now);
    expect(await slots.acquire(slot('a', '1'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '2'), 2, 100)).toBe(true);
    now = 1_090;
    await slots.renew([slot('a', '1')], 100);
    now = 1_100; // '2' expires now, '1' at 1_190
    expect(await slots.acquire(slot('a', '3'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '4'), 2, 100)).toBe(false);
    // A stream let through uncounted (the store failed) is counted from its first renewal on.
    await slots.renew([slot('a', '5'), slot('b', '1')], 100);
    expect(slots.size).toBe(4);
    now = 1_200;
    await slots.release(slot('a', '5'));
    expect(await slots.acquire(slot('a', '6'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '7'), 2, 100)).toBe(true);
    expect(await slots.acquire(slot('a', '8'), 2, 100)).toBe(false);
  });
});
