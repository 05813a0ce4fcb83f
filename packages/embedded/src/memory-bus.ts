/**
 * The in-process bus of the embedded deployment. Like a Kafka topic it has partitions: messages
 * with the same key go to the same partition and are handled one batch at a time, in publish
 * order. `publish` resolves only after every subscribed group has applied the message, so a write
 * is visible to the next read; if a handler fails, the publishers of that batch get the error.
 */
import { PartState, unavailable, type Bus, type Envelope, type SubscribeOptions, type Subscription, type Topic } from '@otm/core';

/**
 * One publish call: settles once every message of it has been applied by every group, or with the
 * first failure. One promise per call, not one per message (a bulk request publishes thousands).
 */
class Publication {
  private settled = false;

  constructor(
    private remaining: number,
    private readonly resolve: () => void,
    private readonly reject: (e: unknown) => void,
    /** `publishEach`: the failure of each message by its index, settled once every message is. */
    readonly outcomes?: unknown[],
  ) {
    if (remaining === 0) this.finish();
  }

  applied(): void {
    if (--this.remaining === 0) this.finish();
  }

  failed(e: unknown, index: number): void {
    if (this.outcomes !== undefined) {
      this.outcomes[index] ??= e;
      this.applied();
      return;
    }
    if (this.settled) return;
    this.settled = true;
    this.reject(e);
  }

  private finish(): void {
    if (this.settled) return;
    this.settled = true;
    this.resolve();
  }
}

interface Pending {
  readonly envelope: Envelope;
  readonly publication: Publication;
  /** The message's index in its publish call. */
  readonly index: number;
}

class Partition {
  private queue: Pending[] = [];
  /** Batches handed to the handler whose calls have not settled. */
  private inHand = 0;

  constructor(
    private readonly handler: (batch: readonly Envelope[]) => Promise<void>,
    private readonly maxBatch: number,
    /** Batches the handler may hold at once (1: the next batch waits until the last one settled). */
    private readonly depth: number,
  ) {}

  /** Queues a message; `pump` hands it over. */
  push(p: Pending): void {
    this.queue.push(p);
  }

  /** Resolves when the partition has nothing queued or in hand. */
  idle(): Promise<void> {
    if (this.inHand === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }
  private waiters: Array<() => void> = [];

  /** Hands what is queued to the handler, in order, in batches of up to maxBatch, while it may take more. */
  pump(): void {
    while (this.inHand < this.depth && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.inHand++;
      let call: Promise<void>;
      try {
        call = this.handler(batch.map((p) => p.envelope));
      } catch (e) {
        call = Promise.reject(e);
      }
      call
        .then(
          () => {
            for (const p of batch) p.publication.applied();
          },
          (e: unknown) => {
            for (const p of batch) p.publication.failed(e, p.index);
          },
        )
        .finally(() => {
          this.inHand--;
          this.pump();
          if (this.inHand === 0 && this.queue.length === 0) {
            const waiters = this.waiters;
            this.waiters = [];
            for (const w of waiters) w();
          }
        });
    }
  }
}

interface Group {
  readonly name: string;
  readonly partitions: Partition[];
  closed: boolean;
}

export interface MemoryBusOptions {
  /** Partitions per topic (default 8): the number of batches of a topic applied at once. */
  partitions?: number;
  /** Partitions of particular topics, overriding `partitions`. */
  topicPartitions?: Partial<Record<Topic, number>>;
  /** Most messages handed to a handler at once (default 500). */
  maxBatch?: number;
}

/** FNV-1a hash of the key, as a partition number. */
function partitionOf(key: string, n: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % n;
}

export class MemoryBus implements Bus {
  private readonly groups = new Map<Topic, Group[]>();
  private readonly partitions: number;
  private readonly topicPartitions: Partial<Record<Topic, number>>;
  private readonly maxBatch: number;
  private closed = false;

  constructor(opts: MemoryBusOptions = {}) {
    this.partitions = opts.partitions ?? 8;
    this.topicPartitions = opts.topicPartitions ?? {};
    this.maxBatch = opts.maxBatch ?? 500;
  }

  /**
   * Queues every message, then hands the touched partitions their work. Nothing is queued unless
   * every topic of the call has a consumer.
   */
  publish(envelopes: readonly Envelope[]): Promise<void> {
    return this.queue(envelopes);
  }

  /** `publish`, answered message by message once all are settled (a failure each, or undefined). */
  async publishEach(envelopes: readonly Envelope[]): Promise<Array<unknown>> {
    const outcomes = new Array<unknown>(envelopes.length);
    await this.queue(envelopes, outcomes);
    return outcomes;
  }

  private async queue(envelopes: readonly Envelope[], outcomes?: unknown[]): Promise<void> {
    if (this.closed) throw unavailable('the bus is closed');
    const live = new Map<Topic, Group[]>();
    let count = 0;
    for (const { topic } of envelopes) {
      let groups = live.get(topic);
      if (groups === undefined) {
        groups = (this.groups.get(topic) ?? []).filter((g) => !g.closed);
        if (groups.length === 0) throw unavailable(`no worker is subscribed to ${topic}`);
        live.set(topic, groups);
      }
      count += groups.length;
    }
    return new Promise<void>((resolve, reject) => {
      const publication = new Publication(count, resolve, reject, outcomes);
      const touched = new Set<Partition>();
      for (let index = 0; index < envelopes.length; index++) {
        const envelope = envelopes[index]!;
        for (const g of live.get(envelope.topic)!) {
          const partition = g.partitions[partitionOf(envelope.key, g.partitions.length)]!;
          partition.push({ envelope, publication, index });
          touched.add(partition);
        }
      }
      for (const partition of touched) partition.pump();
    });
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: a group already consuming the topic is refused by a rejection, not a throw
  async subscribe(
    topic: Topic,
    group: string,
    handler: (batch: readonly Envelope[]) => Promise<void>,
    options: SubscribeOptions = {},
  ): Promise<Subscription> {
    const list = this.groups.get(topic) ?? [];
    if (list.some((g) => g.name === group && !g.closed)) throw new Error(`group ${group} already consumes ${topic}`);
    const g: Group = {
      name: group,
      partitions: Array.from(
        { length: this.topicPartitions[topic] ?? this.partitions },
        () => new Partition(handler, this.maxBatch, Math.max(1, options.pipeline ?? 1)),
      ),
      closed: false,
    };
    list.push(g);
    this.groups.set(topic, list);
    // In process, a handler's failure fails the publish that called it: the consumer itself never stops.
    const state = new PartState(`consumer ${group}/${topic}`, 'loop');
    return {
      name: state.name,
      kind: state.kind,
      status: () => state.status(),
      close: async () => {
        g.closed = true;
        await Promise.all(g.partitions.map((p) => p.idle()));
      },
    };
  }

  ready(): Promise<boolean> {
    return Promise.resolve(!this.closed);
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.groups.values()].flat();
    await Promise.all(all.flatMap((g) => g.partitions.map((p) => p.idle())));
  }
}
