/**
 * The contract of the SubscriptionStore port (packages/core/src/ports.ts), run against every
 * adapter: subscriptions kept per tenant with a limit, the cursor moved only as intended (the
 * revision and cursor the dispatcher read), pause, resume and replay, the capped list of delivery
 * attempts, leases, and durability across a reopen.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { DeliveryAttempt, SubscriptionStore, WebhookSubscription } from '@otm/core';
import { openedPerTest } from './fixture.js';

export interface SubscriptionStoreFixture {
  readonly store: SubscriptionStore;
  /** The same data opened again (another process, or the data folder reopened). */
  reopen(): Promise<SubscriptionStore>;
  close(): Promise<void>;
}

const sub = (tenant: string, extra: Partial<WebhookSubscription> = {}): WebhookSubscription => ({
  id: randomUUID(),
  tenant,
  url: 'https://hooks.example.com/otm',
  filter: {},
  secret: 'a'.repeat(64),
  state: 'active',
  cursor: '5',
  createdAt: Date.now(),
  rev: 0,
  ...extra,
});

const attempt = (n: number, outcome: DeliveryAttempt['outcome'] = 'delivered', at = Date.now()): DeliveryAttempt => ({
  id: randomUUID(),
  at,
  attempt: n,
  changes: 3,
  firstCursor: '1',
  lastCursor: '3',
  outcome,
  ...(outcome === 'delivered' ? { status: 200 } : { error: 'HTTP 500' }),
  durationMs: 12,
});

export function subscriptionStoreContract(name: string, factory: () => Promise<SubscriptionStoreFixture>): void {
  describe(`SubscriptionStore contract: ${name}`, () => {
    const open = openedPerTest(factory);

    it('keeps subscriptions per tenant, oldest first, up to the limit; deletes them with their deliveries', async () => {
      const { store } = await open();
      const a = sub('t1', { createdAt: 1_000, kinds: ['trips', 'events'], filter: { vehicle: 'v1', eventType: 'locationUpdateEvent' } });
      const b = sub('t1', { createdAt: 2_000, cursor: undefined });
      const other = sub('t2');
      expect(await store.create(b, 2)).toBe(true);
      expect(await store.create(a, 2)).toBe(true);
      expect(await store.create(sub('t1'), 2)).toBe(false);
      expect(await store.create(other, 2)).toBe(true);
      expect(await store.get('t1', a.id)).toEqual(a);
      expect(await store.get('t1', b.id)).toEqual(b);
      expect(await store.get('t2', a.id)).toBeUndefined();
      expect((await store.list('t1')).map((s) => s.id)).toEqual([a.id, b.id]);
      expect(await store.list('t3')).toEqual([]);
      const all = await store.all();
      expect(all).toEqual(
        expect.arrayContaining([
          { tenant: 't1', id: a.id },
          { tenant: 't1', id: b.id },
          { tenant: 't2', id: other.id },
        ]),
      );
      expect(all.length).toBe(3);

      await store.recordDelivery('t1', a.id, attempt(1), 10);
      expect(await store.delete('t1', a.id)).toBe(true);
      expect(await store.delete('t1', a.id)).toBe(false);
      expect(await store.get('t1', a.id)).toBeUndefined();
      expect(await store.deliveries('t1', a.id, 10)).toEqual([]);
      expect((await store.all()).length).toBe(2);
      // Room again under the limit.
      expect(await store.create(sub('t1'), 2)).toBe(true);
    });

    it('moves the cursor only from the revision and cursor read, and forgets failingSince', async () => {
      const { store } = await open();
      const s = sub('t1', { cursor: undefined });
      await store.create(s, 10);
      await store.recordDelivery('t1', s.id, attempt(1, 'failed', 42), 10);
      expect((await store.get('t1', s.id))?.failingSince).toBe(42);
      expect(await store.advance('t1', s.id, 0, '9', '10')).toBe(false); // not the cursor it has
      expect(await store.advance('t1', s.id, 1, undefined, '10')).toBe(false); // not its revision
      expect(await store.advance('t1', s.id, 0, undefined, '10')).toBe(true);
      let now = await store.get('t1', s.id);
      expect(now).toMatchObject({ cursor: '10', rev: 0 });
      expect(now?.failingSince).toBeUndefined();
      expect(await store.advance('t1', s.id, 0, '10', '20')).toBe(true);
      // A replay meanwhile wins over a dispatcher that read before it.
      now = await store.replay('t1', s.id, '3');
      expect(now).toMatchObject({ cursor: '3', rev: 1, state: 'active' });
      expect(await store.advance('t1', s.id, 0, '20', '30')).toBe(false);
      expect((await store.get('t1', s.id))?.cursor).toBe('3');
      expect(await store.advance('t1', randomUUID(), 0, '3', '4')).toBe(false);
    });

    it('pauses (from the revision read), resumes at the same cursor, replays', async () => {
      const { store } = await open();
      const s = sub('t1');
      await store.create(s, 10);
      await store.recordDelivery('t1', s.id, attempt(1, 'failed', 7), 10);
      expect(await store.pause('t1', s.id, 5, 'stale')).toBe(false);
      expect(await store.pause('t1', s.id, 0, 'HTTP 500 for 24 h')).toBe(true);
      expect(await store.get('t1', s.id)).toMatchObject({
        state: 'paused',
        reason: 'HTTP 500 for 24 h',
        rev: 1,
        cursor: '5',
        failingSince: 7,
      });
      const resumed = await store.resume('t1', s.id);
      expect(resumed).toMatchObject({ state: 'active', rev: 2, cursor: '5' });
      expect(resumed?.reason).toBeUndefined();
      expect(resumed?.failingSince).toBeUndefined();
      expect(await store.get('t1', s.id)).toEqual(resumed);
      expect(await store.resume('t1', randomUUID())).toBeUndefined();
      expect(await store.replay('t1', randomUUID(), '1')).toBeUndefined();
      expect(await store.pause('t1', randomUUID(), 0, 'x')).toBe(false);
    });

    it('keeps the newest delivery attempts, newest first; failingSince from the first failure', async () => {
      const { store } = await open();
      const s = sub('t1');
      await store.create(s, 10);
      for (let i = 1; i <= 7; i++) await store.recordDelivery('t1', s.id, attempt(i, i % 2 === 0 ? 'failed' : 'delivered', 1_000 + i), 5);
      const list = await store.deliveries('t1', s.id, 100);
      expect(list.map((d) => d.attempt)).toEqual([7, 6, 5, 4, 3]);
      expect(list[1]).toMatchObject({ outcome: 'failed', error: 'HTTP 500', at: 1_006 });
      expect((await store.deliveries('t1', s.id, 2)).map((d) => d.attempt)).toEqual([7, 6]);
      // The first failure (attempt 2, at 1002) set it; later ones left it.
      expect((await store.get('t1', s.id))?.failingSince).toBe(1_002);
      // Nothing for a subscription that is gone.
      const gone = randomUUID();
      await store.recordDelivery('t1', gone, attempt(1), 5);
      expect(await store.deliveries('t1', gone, 5)).toEqual([]);
      expect(await store.get('t1', gone)).toBeUndefined();
    });

    it('leases a subscription to one owner at a time, until released or expired', async () => {
      const { store } = await open();
      const s = sub('t1');
      await store.create(s, 10);
      expect(await store.lease('t1', s.id, 'a', 10_000)).toBe(true);
      expect(await store.lease('t1', s.id, 'b', 10_000)).toBe(false);
      expect(await store.lease('t1', s.id, 'a', 200)).toBe(true); // renewed, shorter
      await store.release('t1', s.id, 'b'); // not b's: nothing
      expect(await store.lease('t1', s.id, 'b', 10_000)).toBe(false);
      await new Promise((r) => setTimeout(r, 300));
      expect(await store.lease('t1', s.id, 'b', 10_000)).toBe(true);
      await store.release('t1', s.id, 'b');
      expect(await store.lease('t1', s.id, 'a', 10_000)).toBe(true);
      expect(await store.dispatchers('a', 5_000)).toBeGreaterThanOrEqual(1);
    });

    it('keeps what it answered across a reopen', async () => {
      const fixture = await open();
      const s = sub('t1');
      await fixture.store.create(s, 10);
      await fixture.store.advance('t1', s.id, 0, '5', '8');
      await fixture.store.recordDelivery('t1', s.id, attempt(1), 10);
      const again = await fixture.reopen();
      expect(await again.get('t1', s.id)).toMatchObject({ id: s.id, cursor: '8', state: 'active' });
      expect((await again.deliveries('t1', s.id, 10)).length).toBe(1);
    });
  });
}
