/**
 * The contract of the Bus port (packages/core/src/ports.ts), run against every adapter.
 *
 * What differs between adapters is stated as capabilities, not hidden:
 * - `retains`: messages are kept by the bus itself (Kafka) and reach a group that subscribes
 *   later, and a group resumes from its committed offset; an in-process bus refuses messages
 *   nobody consumes and applies a message before `publish` resolves.
 * - `groupMembers`: several members of one group share the partitions of a topic.
 * Either way the same promise holds: a message whose `publish` resolved is applied by every
 * subscribed group, in publish order per key, at least once; a failing batch is never committed.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { OtmServiceError, type Bus, type Envelope, type Subscription, type Topic } from '@otm/core';
import { openedPerTest } from './fixture.js';

export interface BusFixture {
  /** The bus under test (publishes and subscribes). */
  readonly bus: Bus;
  /** What the adapter can do beyond the common contract. */
  readonly capabilities: { readonly retains: boolean; readonly groupMembers: boolean };
  /** A fresh topic name, not used by any other test. */
  topic(): Topic;
  /** Resolves once `sub` takes part in its group (Kafka: the first join); immediate otherwise. */
  joined(sub: Subscription): Promise<void>;
  /** Another bus on the same cluster, like another process (in-process buses: the same one). */
  peer(): Promise<Bus>;
  close(): Promise<void>;
}

export const envelope = (topic: Topic, key: string, n: number): Envelope => ({
  topic,
  key,
  message: { v: 1, op: 'delete', tenant: 'contract', kind: 'trips', key: `${key}#${n}`, acceptedAt: n },
});

export async function eventually(check: () => void | Promise<void>, timeoutMs = 20_000, stepMs = 25): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await check();
      return;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, stepMs));
    }
  }
}

/** Publishes, retrying while the bus answers a retryable error (what the ingress' clients do on 503). */
async function publishUntilAccepted(bus: Bus, envelopes: readonly Envelope[], attempts = 20): Promise<number> {
  for (let i = 1; ; i++) {
    try {
      await bus.publish(envelopes);
      return i;
    } catch (e) {
      if (i >= attempts) throw e;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

const fail = (retryable: boolean) =>
  new OtmServiceError(retryable ? 'unavailable' : 'internal', retryable ? 503 : 500, 'contract: induced failure', { retryable });

/**
 * `groupMembers: false` leaves out the test of several members in one group (an in-process bus
 * has one member per group), rather than registering it as skipped.
 */
export function busContract(name: string, factory: () => Promise<BusFixture>, opts: { groupMembers?: boolean } = {}): void {
  describe(`Bus contract: ${name}`, () => {
    const open = openedPerTest(factory);

    it('applies every message whose publish resolved, in publish order per key', async () => {
      const f = await open();
      const topic = f.topic();
      const seen = new Map<string, number[]>();
      const sub = await f.bus.subscribe(topic, `g-${randomUUID()}`, async (batch) => {
        for (const e of batch) seen.set(e.key, [...(seen.get(e.key) ?? []), e.message.acceptedAt]);
      });
      await f.joined(sub);
      // per key, each publish starts after the previous one resolved; keys run concurrently
      await Promise.all(
        Array.from({ length: 6 }, async (_, k) => {
          for (let n = k; n < 300; n += 6) await f.bus.publish([envelope(topic, `k${k}`, n)]);
        }),
      );
      // one publish with many messages, several keys
      await f.bus.publish(Array.from({ length: 100 }, (_, i) => envelope(topic, `k${i % 5}`, 300 + i)));
      await eventually(() => expect([...seen.values()].flat()).toHaveLength(400));
      for (const [, list] of seen) expect(list).toEqual([...list].sort((a, b) => a - b));
      await sub.close();
    });

    it('hands a failing batch back: it is delivered again until it succeeds, nothing is lost', async () => {
      const f = await open();
      const topic = f.topic();
      let failuresLeft = 3;
      const attempts = new Map<number, number>();
      const applied = new Set<number>();
      const sub = await f.bus.subscribe(topic, `g-${randomUUID()}`, async (batch) => {
        for (const e of batch) attempts.set(e.message.acceptedAt, (attempts.get(e.message.acceptedAt) ?? 0) + 1);
        if (batch.some((e) => e.message.acceptedAt === 7) && failuresLeft-- > 0) throw fail(true);
        for (const e of batch) applied.add(e.message.acceptedAt);
      });
      await f.joined(sub);
      await Promise.all(Array.from({ length: 20 }, (_, n) => publishUntilAccepted(f.bus, [envelope(topic, `k${n % 3}`, n)])));
      await eventually(() => expect(applied.size).toBe(20));
      expect(attempts.get(7)).toBeGreaterThanOrEqual(4);
      await sub.close();
    });

    it('a non-retryable failure of one message does not block the messages after it', async () => {
      const f = await open();
      const topic = f.topic();
      const applied: number[] = [];
      const sub = await f.bus.subscribe(topic, `g-${randomUUID()}`, async (batch) => {
        if (batch.some((e) => e.message.acceptedAt === 2)) throw fail(false);
        for (const e of batch) applied.push(e.message.acceptedAt);
      });
      await f.joined(sub);
      await f.bus.publish([envelope(topic, 'same', 1)]);
      // in-process: the publisher gets the error; Kafka: accepted, then dead-lettered by the consumer
      await f.bus.publish([envelope(topic, 'same', 2)]).catch((e: unknown) => expect(e).toBeInstanceOf(OtmServiceError));
      await f.bus.publish([envelope(topic, 'same', 3)]);
      await eventually(() => expect(applied).toEqual([1, 3]));
      await sub.close();
    });

    it('a member that closes commits what it applied: the next member of the group resumes after it', async () => {
      const f = await open();
      const topic = f.topic();
      const group = `g-${randomUUID()}`;
      const first: number[] = [];
      const sub1 = await f.bus.subscribe(topic, group, async (batch) => void first.push(...batch.map((e) => e.message.acceptedAt)));
      await f.joined(sub1);
      await f.bus.publish(Array.from({ length: 10 }, (_, n) => envelope(topic, `k${n % 3}`, n)));
      await eventually(() => expect(first).toHaveLength(10));
      await sub1.close();

      const second: number[] = [];
      const peer = await f.peer();
      if (f.capabilities.retains) {
        // published while no member runs: kept by the bus for the group
        await f.bus.publish(Array.from({ length: 5 }, (_, n) => envelope(topic, `k${n % 3}`, 10 + n)));
      }
      const sub2 = await peer.subscribe(topic, group, async (batch) => void second.push(...batch.map((e) => e.message.acceptedAt)));
      await f.joined(sub2);
      await f.bus.publish(Array.from({ length: 5 }, (_, n) => envelope(topic, `k${n % 3}`, 20 + n)));
      const expected = [...(f.capabilities.retains ? [10, 11, 12, 13, 14] : []), 20, 21, 22, 23, 24];
      await eventually(() => expect([...second].sort((a, b) => a - b)).toEqual(expected));
      await sub2.close();
    });

    it('a member that stops while its batch keeps failing commits nothing of it', async () => {
      const f = await open();
      const topic = f.topic();
      const group = `g-${randomUUID()}`;
      let calls = 0;
      const sub1 = await f.bus.subscribe(topic, group, async () => {
        calls++;
        throw fail(true);
      });
      await f.joined(sub1);
      const published = publishUntilAccepted(f.bus, [envelope(topic, 'k', 1)], 3).then(
        () => true,
        () => false,
      );
      await eventually(() => expect(calls).toBeGreaterThanOrEqual(2));
      await sub1.close();
      const accepted = await published;
      if (!accepted) return; // in-process: the publisher was told (no message was accepted)
      const got: number[] = [];
      const peer = await f.peer();
      const sub2 = await peer.subscribe(topic, group, async (batch) => void got.push(...batch.map((e) => e.message.acceptedAt)));
      await eventually(() => expect(got).toEqual([1]));
      await sub2.close();
    });

    if (opts.groupMembers !== false)
      it('two members of a group share the partitions; one leaving hands its partitions over without loss', async () => {
        const f = await open();
        const topic = f.topic();
        const group = `g-${randomUUID()}`;
        const byMember: [Set<number>, Set<number>] = [new Set(), new Set()];
        const peer = await f.peer();
        const subA = await f.bus.subscribe(topic, group, async (b) => void b.forEach((e) => byMember[0].add(e.message.acceptedAt)));
        const subB = await peer.subscribe(topic, group, async (b) => void b.forEach((e) => byMember[1].add(e.message.acceptedAt)));
        await Promise.all([f.joined(subA), f.joined(subB)]);
        const union = () => new Set([...byMember[0], ...byMember[1]]);
        await f.bus.publish(Array.from({ length: 200 }, (_, n) => envelope(topic, `k${n % 40}`, n)));
        await eventually(() => expect(union().size).toBe(200));
        expect(byMember[0].size).toBeGreaterThan(0);
        expect(byMember[1].size).toBeGreaterThan(0);
        await subA.close();
        const before = byMember[1].size;
        await f.bus.publish(Array.from({ length: 200 }, (_, n) => envelope(topic, `k${n % 40}`, 200 + n)));
        await eventually(() => expect(union().size).toBe(400), 25_000);
        // every message of the second half reached the member that stayed
        for (let n = 200; n < 400; n++) expect(byMember[1].has(n)).toBe(true);
        expect(byMember[1].size).toBeGreaterThan(before);
        await subB.close();
      }, 40_000);

    it('is ready while it runs', async () => {
      const f = await open();
      expect(await f.bus.ready()).toBe(true);
    });
  });
}
