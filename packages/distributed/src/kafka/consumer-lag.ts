/**
 * The lag of a consumer group, as Kafka itself knows it: for each partition of the topic, the end
 * of the partition minus the group's committed offset. Read from the broker (not from the batches
 * the consumer saw), so that it keeps growing while the consumer is dead, which is what an alert
 * on lag must see. Exported as otm_consumer_lag{group,topic,partition}.
 */
import type { Admin } from 'kafkajs';
import { AdapterError, consumerLag } from '@otm/core';
import { withTimeout } from './timeout.js';

/** Records after the committed offset, by partition (a partition the group never committed counts from its start). */
export async function readLag(admin: Admin, group: string, topic: string, timeoutMs: number): Promise<Map<number, number>> {
  const [ends, commits] = await withTimeout(
    Promise.all([admin.fetchTopicOffsets(topic), admin.fetchOffsets({ groupId: group, topics: [topic] })]),
    timeoutMs,
    () => new AdapterError('kafka', 'reading the consumer lag timed out', { retryable: true }),
  );
  const committed = new Map<number, bigint>();
  for (const t of commits) for (const p of t.partitions) committed.set(p.partition, BigInt(p.offset));
  const lag = new Map<number, number>();
  for (const p of ends) {
    const low = BigInt(p.low);
    const c = committed.get(p.partition) ?? -1n;
    const from = c < low ? low : c;
    const behind = BigInt(p.high) - from;
    lag.set(p.partition, Number(behind > 0n ? behind : 0n));
  }
  return lag;
}

/**
 * Reads the lag of `group` on `topic` every `intervalMs` into the gauge, until stopped. A failed
 * read (Kafka down) keeps the last figures: the lag of a stalled group stays visible.
 */
export function watchLag(admin: () => Promise<Admin>, group: string, topic: string, intervalMs: number): { stop(): void } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const tick = async () => {
    try {
      const lag = await readLag(await admin(), group, topic, Math.max(1_000, intervalMs));
      if (stopped) return;
      for (const [partition, n] of lag) consumerLag.set({ group, topic, partition: String(partition) }, n);
    } catch {
      // Kafka unreachable: the consumer's own state says so; the last lag stays.
    }
    if (!stopped) timer = setTimeout(() => void tick(), intervalMs);
  };
  timer = setTimeout(() => void tick(), 0);
  return {
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
