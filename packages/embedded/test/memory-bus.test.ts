import { describe, expect, it } from 'vitest';
import { TOPICS, type Envelope } from '@otm/core';
import { MemoryBus } from '../src/index.js';

const env = (key: string, n: number): Envelope => ({
  topic: TOPICS.entities,
  key,
  message: { v: 1, op: 'delete', tenant: 't', kind: 'trips', key: `${key}-${n}`, acceptedAt: n },
});

describe('MemoryBus', () => {
  it('resolves publish only after the handler applied the message', async () => {
    const bus = new MemoryBus();
    const seen: string[] = [];
    await bus.subscribe(TOPICS.entities, 'g', async (batch) => {
      await new Promise((r) => setTimeout(r, 5));
      for (const e of batch) seen.push(e.message.key);
    });
    await bus.publish([env('a', 1)]);
    expect(seen).toEqual(['a-1']);
    await bus.close();
  });

  it('keeps publish order per key and batches what queues up', async () => {
    const bus = new MemoryBus({ partitions: 4, maxBatch: 50 });
    const perKey = new Map<string, number[]>();
    const sizes: number[] = [];
    await bus.subscribe(TOPICS.entities, 'g', async (batch) => {
      sizes.push(batch.length);
      await new Promise((r) => setImmediate(r));
      for (const e of batch) {
        const list = perKey.get(e.key) ?? [];
        list.push(e.message.acceptedAt);
        perKey.set(e.key, list);
      }
    });
    const all: Promise<void>[] = [];
    for (let n = 0; n < 400; n++) all.push(bus.publish([env(`k${n % 7}`, n)]));
    await Promise.all(all);
    for (const [, list] of perKey) expect(list).toEqual([...list].sort((a, b) => a - b));
    expect([...perKey.values()].flat()).toHaveLength(400);
    expect(Math.max(...sizes)).toBeGreaterThan(1);
    await bus.close();
  });

  it('publishEach answers message by message once all are settled: the failure of each one not applied', async () => {
    const bus = new MemoryBus({ partitions: 8 });
    const refused = new Error('no space left');
    // The batches holding key 'b' fail; every other one is applied.
    await bus.subscribe(TOPICS.entities, 'g', async (batch) => {
      await new Promise((r) => setTimeout(r, 1));
      if (batch.some((e) => e.key === 'b')) throw refused;
    });
    const outcomes = await bus.publishEach([env('a', 1), env('b', 2), env('c', 3), env('b', 4)]);
    expect(outcomes).toHaveLength(4);
    expect(outcomes[1]).toBe(refused);
    expect(outcomes[3]).toBe(refused);
    // 'a' and 'c' go to other partitions than 'b' (8 of them, by key): applied.
    expect([outcomes[0], outcomes[2]]).toEqual([undefined, undefined]);
    await bus.close();
  });

  it('hands a handler failure to the publishers of that batch', async () => {
    const bus = new MemoryBus();
    await bus.subscribe(TOPICS.entities, 'g', async () => {
      throw new Error('store down');
    });
    await expect(bus.publish([env('a', 1)])).rejects.toThrow('store down');
    await bus.close();
  });

  it('with a pipeline, hands the next batches over before earlier calls settled, in order, and settles each publish with its own batch', async () => {
    const bus = new MemoryBus({ partitions: 1, maxBatch: 3 });
    const calls: string[][] = [];
    const settle: Array<(ok: boolean) => void> = [];
    let held = 0;
    let maxHeld = 0;
    await bus.subscribe(
      TOPICS.entities,
      'g',
      (batch) => {
        calls.push(batch.map((e) => e.message.key));
        held++;
        maxHeld = Math.max(maxHeld, held);
        return new Promise<void>((resolve, reject) =>
          settle.push((ok) => {
            held--;
            if (ok) resolve();
            else reject(new Error('this batch failed'));
          }),
        );
      },
      { pipeline: 2 },
    );
    const outcomes = Array.from({ length: 8 }, (_, n) =>
      bus.publish([env('k', n)]).then(
        () => 'ok',
        (e: Error) => e.message,
      ),
    );
    await new Promise((r) => setImmediate(r));
    // Two calls held at once (one message, then the next), the rest waits.
    expect(calls).toEqual([['k-0'], ['k-1']]);
    settle[1]!(false); // the second batch fails: only its publisher hears of it
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual([['k-0'], ['k-1'], ['k-2', 'k-3', 'k-4']]);
    settle[0]!(true);
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual([['k-0'], ['k-1'], ['k-2', 'k-3', 'k-4'], ['k-5', 'k-6', 'k-7']]);
    settle[2]!(true);
    settle[3]!(true);
    expect(await Promise.all(outcomes)).toEqual(['ok', 'this batch failed', 'ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
    expect(maxHeld).toBe(2);
    await bus.close();
  });

  it('without a pipeline, hands the next batch of a partition over only once the last call settled', async () => {
    const bus = new MemoryBus({ partitions: 1 });
    let held = 0;
    let maxHeld = 0;
    await bus.subscribe(TOPICS.entities, 'g', async () => {
      held++;
      maxHeld = Math.max(maxHeld, held);
      await new Promise((r) => setTimeout(r, 2));
      held--;
    });
    await Promise.all(Array.from({ length: 50 }, (_, n) => bus.publish([env('k', n)])));
    expect(maxHeld).toBe(1);
    await bus.close();
  });

  it('close waits for the batches in hand', async () => {
    const bus = new MemoryBus({ partitions: 1 });
    let applied = 0;
    await bus.subscribe(
      TOPICS.entities,
      'g',
      async (batch) => {
        await new Promise((r) => setTimeout(r, 20));
        applied += batch.length;
      },
      { pipeline: 4 },
    );
    const published = Promise.all(Array.from({ length: 10 }, (_, n) => bus.publish([env('k', n)])));
    await new Promise((r) => setImmediate(r));
    await bus.close();
    expect(applied).toBe(10);
    await published;
  });

  it('refuses messages nobody consumes, with a retryable 503', async () => {
    const bus = new MemoryBus();
    await expect(bus.publish([env('a', 1)])).rejects.toMatchObject({ status: 503, retryable: true });
  });

  it('queues nothing of a publish when one of its topics has no consumer', async () => {
    const bus = new MemoryBus();
    const seen: string[] = [];
    await bus.subscribe(TOPICS.entities, 'g', async (batch) => {
      for (const e of batch) seen.push(e.message.key);
    });
    const telemetry: Envelope = { ...env('b', 2), topic: TOPICS.telemetry };
    await expect(bus.publish([env('a', 1), telemetry])).rejects.toMatchObject({ status: 503 });
    await bus.publish([env('c', 3)]);
    expect(seen).toEqual(['c-3']);
    await bus.close();
  });

  it('hands a many-message publish over in batches, and settles it once all are applied', async () => {
    const bus = new MemoryBus({ partitions: 2, maxBatch: 100 });
    const sizes: number[] = [];
    let applied = 0;
    await bus.subscribe(
      TOPICS.entities,
      'g',
      async (batch) => {
        sizes.push(batch.length);
        await new Promise((r) => setImmediate(r));
        applied += batch.length;
      },
      { pipeline: 8 },
    );
    await bus.publish(Array.from({ length: 1000 }, (_, n) => env(`k${n % 13}`, n)));
    expect(applied).toBe(1000);
    // Queued first, then handed over: full batches, not one call per message.
    expect(sizes.length).toBeLessThanOrEqual(12);
    await bus.close();
  });

  it('settles a publish with the first failure, once, when its messages fail in several batches', async () => {
    const bus = new MemoryBus({ partitions: 4, maxBatch: 10 });
    let calls = 0;
    await bus.subscribe(TOPICS.entities, 'g', async () => {
      calls++;
      throw new Error(`batch ${calls} failed`);
    });
    await expect(bus.publish(Array.from({ length: 100 }, (_, n) => env(`k${n}`, n)))).rejects.toThrow('batch 1 failed');
    await bus.close();
    expect(calls).toBeGreaterThan(1);
  });
});
