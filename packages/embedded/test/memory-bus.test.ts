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

  it('hands a handler failure to the publishers of that batch', async () => {
    const bus = new MemoryBus();
    await bus.subscribe(TOPICS.entities, 'g', async () => {
      throw new Error('store down');
    });
    await expect(bus.publish([env('a', 1)])).rejects.toThrow('store down');
    await bus.close();
  });

  it('refuses messages nobody consumes, with a retryable 503', async () => {
    const bus = new MemoryBus();
    await expect(bus.publish([env('a', 1)])).rejects.toMatchObject({ status: 503, retryable: true });
  });
});
