/**
 * Consuming: one consumer (group member) per `subscribe`, `eachBatch` with auto-resolve and
 * auto-commit off. A partition's batch is handed to the handler in chunks of about `maxBatch`
 * messages (a packed record is never split between two), in partition order; the offset of a
 * chunk is committed only after the handler resolved. With `fetchAhead`, kafkajs goes on fetching
 * while the handler works (`consumeAhead`); the commit rule is the same.
 *
 * The retry decision, by the type of the error the handler threw (`isRetryable`, `isClassified`):
 * - an OtmServiceError or an AdapterError says itself, by its `retryable`:
 *   - retryable (a store unreachable, a timeout, a 503): nothing is committed, the same chunk is
 *     retried with exponential backoff (heartbeating meanwhile), for as long as it takes. If the
 *     consumer is stopped or loses the partition meanwhile, the chunk is left uncommitted and the
 *     next owner of the partition receives it again.
 *   - not retryable (a document that can never be applied, a record that cannot be decoded, a
 *     value a store refuses as malformed): the chunk is re-run one message at a time to find the
 *     culprit(s) (re-applying the messages before it is harmless: handlers are idempotent); each
 *     message that fails non-retryably on its own goes to the dead-letter topic (dead-letter.ts),
 *     then processing continues.
 * - any other error is unclassified (most likely a bug of the worker's own code: the adapters
 *   type their failures): it is logged as unclassified and retried like a retryable one, but only
 *   UNCLASSIFIED_ATTEMPTS times; then it is handled like a non-retryable one, so that a poison
 *   message cannot stop a partition for good.
 * Messages that cannot be decoded go to the dead-letter topic directly. Batch-first keeps the
 * common path fast (one store round trip per chunk); the per-message pass only runs for the rare
 * poison message.
 *
 * Supervision: a consumer that crashes with an error kafkajs does not retry itself, or that cannot
 * start (Kafka down), is replaced by a new one after a capped exponential backoff with jitter, for
 * as long as the subscription is open, so a worker never sits idle while looking alive;
 * uncommitted batches are replayed. Its state (core/health.ts; otm_consumer_up) is down from a crash
 * or a failed start until the new consumer joins its group, and /readyz and /healthz report it.
 * The group's lag is read from the broker every few seconds (consumer-lag.ts).
 */
import type { Admin, Consumer, EachBatchPayload, Kafka, Producer } from 'kafkajs';
import {
  AdapterError,
  OtmServiceError,
  PartState,
  TOPICS,
  backoffDelay,
  consumerRestarts,
  consumerUp,
  unavailable,
  type Envelope,
  type Logger,
  type SubscribeOptions,
  type Subscription,
  type Topic,
} from '@otm/core';
import { errorText } from '../error-text.js';
import { watchLag } from './consumer-lag.js';
import { deadLetterCode, deadLetterReason, deadLetterRecord, sendDeadLetter } from './dead-letter.js';
import { consumerConfig, type KafkaConsumerSettings } from './options.js';
import { decodeRecord, type Decoded } from './record-pack.js';
import { sleep, withTimeout } from './timeout.js';

export type Handler = (batch: readonly Envelope[]) => Promise<void>;

/** A Subscription that can also tell when its consumer first joined the group (tests, readiness). */
export interface KafkaSubscription extends Subscription {
  /** Resolves when the consumer first got its partition assignment. */
  readonly joined: Promise<void>;
  /** The kafkajs consumer now in use (a crashed one is replaced); for fault tests. */
  consumer(): Consumer | undefined;
}

/** Whether the error says itself whether a retry can help: an OtmServiceError or an AdapterError. */
export const isClassified = (e: unknown): e is OtmServiceError | AdapterError => e instanceof OtmServiceError || e instanceof AdapterError;

/**
 * Whether a retry can help: an OtmServiceError or AdapterError says so itself; anything else is
 * unclassified and retried, but only UNCLASSIFIED_ATTEMPTS times.
 */
export const isRetryable = (e: unknown): boolean => (isClassified(e) ? e.retryable : true);

/**
 * Attempts at a batch that keeps failing with an unclassified error (neither an OtmServiceError
 * nor an AdapterError: a fault of the worker's own code, not a store being unavailable, since the
 * adapters type their failures). After them the messages are applied one by one and the one that
 * still fails goes to the dead-letter topic.
 */
export const UNCLASSIFIED_ATTEMPTS = 5;

/** What the consumers of a bus share. */
export interface ConsumerContext {
  readonly kafka: Kafka;
  readonly settings: Required<KafkaConsumerSettings>;
  readonly logger: Logger | undefined;
  readonly retryAfterSeconds: number;
  /** Bound on a dead-letter produce (the publish timeout). */
  readonly publishTimeoutMs: number;
  /** The bus's producer, for dead letters. */
  readonly producer: () => Promise<Producer>;
  /** Told of a producer whose dead-letter send failed (the bus replaces it). */
  readonly producerFailed?: (producer: Producer) => void;
  /** A connected admin client, for reading the groups' lag; absent: no lag is read. */
  readonly admin?: () => Promise<Admin>;
}

/** Per partition: messages fetched ahead, the loop applying them, and whether it had to stop. */
interface Pipeline {
  readonly parts: Map<string, { tail: Promise<void>; queue: Decoded[]; running: boolean; failed: boolean }>;
  /** Set when the subscription closes: a failing chunk is then given up (not committed). */
  stopping: boolean;
}

/**
 * Takes the next chunk off `queue`: `max` messages (or what there is), and then the rest of the
 * record the last of them came from, so that a chunk always ends with a whole record, whose
 * offset is committed after it.
 */
function takeChunk(queue: Decoded[], max: number): Decoded[] {
  let n = Math.min(max, queue.length);
  while (n < queue.length && !queue[n - 1]!.last) n++;
  return queue.splice(0, n);
}

/** The consumers of one bus: subscriptions and how their batches are applied. */
export class Consumers {
  constructor(private readonly ctx: ConsumerContext) {}

  /**
   * Consumes `topic` as a member of `group`. `onClose` is told when the subscription closes.
   */
  async subscribe(
    topic: Topic,
    group: string,
    handler: Handler,
    options: SubscribeOptions,
    onClose: (sub: KafkaSubscription) => void,
  ): Promise<KafkaSubscription> {
    const s = this.ctx.settings;
    const logger = this.ctx.logger;
    let resolveJoined!: () => void;
    const joined = new Promise<void>((r) => (resolveJoined = r));
    let closing: Promise<void> | undefined;
    let current: Consumer | undefined;
    let restartTimer: NodeJS.Timeout | undefined;
    /** Failed starts and crashes since the consumer last joined: the backoff's attempt. */
    let failures = 0;
    const pipeline: Pipeline | undefined = options.fetchAhead ? { parts: new Map(), stopping: false } : undefined;
    const state = new PartState(`consumer ${group}/${topic}`, 'loop', {
      up: false,
      onChange: (up) => consumerUp.set({ group, topic }, up ? 1 : 0),
    });
    const lag = this.ctx.admin === undefined ? undefined : watchLag(this.ctx.admin, group, topic, s.lagIntervalMs);

    // A consumer that failed for good (kafkajs does not restart it) or could not start is replaced
    // by a new one after a backoff, for as long as the subscription is open: never a worker that
    // looks alive with no consumer.
    const replace = (consumer: Consumer | undefined, cause: string): void => {
      if (closing || restartTimer !== undefined || (consumer !== undefined && consumer !== current)) return;
      failures++;
      state.down(cause);
      void consumer?.disconnect().catch(() => {});
      const delay = backoffDelay(failures, s.restartBackoff);
      logger?.warn({ topic, group, attempt: failures, retryInMs: delay, err: cause }, 'kafka consumer down; starting a new one');
      restartTimer = setTimeout(() => {
        restartTimer = undefined;
        if (closing) return;
        consumerRestarts.inc({ group, topic });
        start().catch((e: unknown) => replace(undefined, `cannot start: ${errorText(e)}`));
      }, delay);
    };

    const start = async (): Promise<void> => {
      const consumer = this.ctx.kafka.consumer(consumerConfig(group, s));
      current = consumer;
      consumer.on(consumer.events.GROUP_JOIN, () => {
        if (consumer !== current) return;
        failures = 0;
        state.up();
        resolveJoined();
      });
      // kafkajs restarts no consumer itself (options.ts): every crash is replaced here.
      consumer.on(consumer.events.CRASH, (event) => {
        const { error } = event.payload as { error: unknown };
        replace(consumer, `crashed: ${errorText(error)}`);
      });
      // A consumer that stops without being asked to is dead too. kafkajs stops a crashing consumer
      // before it reports the crash: give the crash (with its cause) a moment to come first.
      consumer.on(consumer.events.STOP, () => {
        if (closing || consumer !== current) return;
        setTimeout(() => replace(consumer, 'stopped without being asked to'), 1_000).unref();
      });
      try {
        await consumer.connect();
        await consumer.subscribe({ topics: [topic], fromBeginning: s.fromBeginning });
        await consumer.run({
          autoCommit: false,
          eachBatchAutoResolve: false,
          partitionsConsumedConcurrently: options.concurrency ?? s.partitionsConsumedConcurrently,
          eachBatch: (payload) => (pipeline ? this.consumeAhead(payload, handler, pipeline) : this.consumeBatch(payload, handler)),
        });
      } catch (e) {
        await consumer.disconnect().catch(() => {});
        throw unavailable(`cannot consume ${topic}: ${errorText(e)}`, this.ctx.retryAfterSeconds, e);
      }
    };
    // A first start that fails (Kafka down as the worker starts) is retried like any other.
    await start().catch((e: unknown) => replace(undefined, `cannot start: ${errorText(e)}`));

    const sub: KafkaSubscription = {
      joined,
      consumer: () => current,
      name: state.name,
      kind: state.kind,
      status: () => state.status(),
      close: () =>
        (closing ??= (async () => {
          onClose(sub);
          lag?.stop();
          if (restartTimer) clearTimeout(restartTimer);
          if (pipeline && current) {
            // Take no more batches; what is being applied finishes and is committed, a chunk that
            // keeps failing is given up; then stop.
            pipeline.stopping = true;
            current.pause([{ topic }]);
            const drained = Promise.all([...pipeline.parts.values()].map((p) => p.tail));
            await withTimeout(drained, 10_000, () => new AdapterError('kafka', 'drain timed out', { retryable: true })).catch(() => {});
          }
          // stop() waits for the batch in hand, which commits what its handler finished.
          await current?.stop().catch(() => {});
          await current?.disconnect().catch(() => {});
          state.down('closed');
        })()),
    };
    return sub;
  }

  /**
   * Fetch-ahead consumption: offsets are resolved as soon as a batch is queued, so kafkajs goes on
   * fetching while the handler works. Per partition, what was fetched meanwhile is handed to the
   * handler in one call (up to `maxBatch` messages), in order, and committed only after that call
   * resolved. Queued messages are bounded (2 x maxBatch per partition): then the fetch waits. When
   * a call cannot finish (the consumer stopped or lost the partition) nothing more of that
   * partition is committed; the next owner, or this member after a rebalance, starts again from
   * the last commit.
   */
  private async consumeAhead(payload: EachBatchPayload, handler: Handler, pipeline: Pipeline): Promise<void> {
    // eslint-disable-next-line @typescript-eslint/unbound-method -- kafkajs makes these arrow functions (consumer/runner.js), bound to nothing
    const { batch, isRunning, isStale, resolveOffset, heartbeat, commitOffsetsIfNecessary } = payload;
    const live = () => isRunning() && !isStale() && !pipeline.stopping;
    const key = `${batch.topic}\u0000${batch.partition}`;
    let st = pipeline.parts.get(key);
    if (st?.failed) {
      await st.tail;
      st = undefined;
    }
    if (!st) {
      st = { tail: Promise.resolve(), queue: [], running: false, failed: false };
      pipeline.parts.set(key, st);
    }
    const state = st;
    if (!live() || batch.messages.length === 0) return;
    for (const m of batch.messages) state.queue.push(...decodeRecord(batch.topic, m));
    resolveOffset(batch.messages[batch.messages.length - 1]!.offset);
    const max = this.ctx.settings.maxBatch;
    if (!state.running) {
      state.running = true;
      state.tail = (async () => {
        try {
          while (state.queue.length > 0 && !state.failed) {
            const chunk = takeChunk(state.queue, max);
            const done = await this.handleChunk(chunk, batch.topic, batch.partition, handler, live, heartbeat);
            if (!done) {
              state.failed = true;
              break;
            }
            const last = chunk[chunk.length - 1]!.message.offset;
            await commitOffsetsIfNecessary({
              topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: (BigInt(last) + 1n).toString() }] }],
            });
          }
        } catch (e) {
          state.failed = true;
          this.ctx.logger?.warn(
            { topic: batch.topic, partition: batch.partition, err: errorText(e) },
            'fetched-ahead messages not committed',
          );
        } finally {
          if (state.failed) state.queue.length = 0;
          state.running = false;
        }
      })();
    }
    if (state.queue.length >= 2 * max) await state.tail;
  }

  private async consumeBatch(payload: EachBatchPayload, handler: Handler): Promise<void> {
    // eslint-disable-next-line @typescript-eslint/unbound-method -- kafkajs makes these arrow functions (consumer/runner.js), bound to nothing
    const { batch, isRunning, isStale, resolveOffset, heartbeat, commitOffsetsIfNecessary } = payload;
    const live = () => isRunning() && !isStale();
    const commit = async (lastOffset: string) => {
      resolveOffset(lastOffset);
      await commitOffsetsIfNecessary({
        topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: (BigInt(lastOffset) + 1n).toString() }] }],
      });
    };
    const max = this.ctx.settings.maxBatch;
    const queue = batch.messages.flatMap((m) => decodeRecord(batch.topic, m));
    while (queue.length > 0) {
      if (!live()) return;
      const chunk = takeChunk(queue, max);
      const done = await this.handleChunk(chunk, batch.topic, batch.partition, handler, live, heartbeat);
      if (!done) return; // stopped or lost the partition: leave the rest uncommitted
      await commit(chunk[chunk.length - 1]!.message.offset);
      await heartbeat().catch(() => {});
    }
  }

  /** Runs the handler with heartbeats while it works. */
  private async withHeartbeat<T>(work: Promise<T>, heartbeat: () => Promise<void>): Promise<T> {
    const timer = setInterval(() => void heartbeat().catch(() => {}), this.ctx.settings.heartbeatInterval);
    try {
      return await work;
    } finally {
      clearInterval(timer);
    }
  }

  /**
   * Applies one chunk; true once every message of it was applied or dead-lettered, false when the
   * consumer stopped (or lost the partition) before that.
   */
  private async handleChunk(
    chunk: readonly Decoded[],
    topic: string,
    partition: number,
    handler: Handler,
    live: () => boolean,
    heartbeat: () => Promise<void>,
  ): Promise<boolean> {
    const good = chunk.filter((d) => d.envelope !== undefined);
    if (good.length === chunk.length) {
      const outcome = await this.retrying(() => handler(chunk.map((d) => d.envelope!)), live, heartbeat, {
        topic,
        partition,
        offset: chunk[0]!.message.offset,
      });
      if (outcome === 'ok') return true;
      if (outcome === 'stopped') return false;
    }
    // A poison message somewhere in the chunk: one message at a time.
    for (const d of chunk) {
      if (!live()) return false;
      if (d.envelope === undefined) {
        if (!(await this.deadLetter(d, topic, partition, 'unparseable message: ' + d.parseError, 'invalidMessage', live, heartbeat)))
          return false;
        continue;
      }
      let failure: unknown;
      const outcome = await this.retrying(
        () => handler([d.envelope!]),
        live,
        heartbeat,
        { topic, partition, offset: d.message.offset },
        (e) => (failure = e),
      );
      if (outcome === 'stopped') return false;
      if (outcome === 'failed') {
        if (!(await this.deadLetter(d, topic, partition, deadLetterReason(failure), deadLetterCode(failure), live, heartbeat)))
          return false;
      }
    }
    return true;
  }

  /** Calls `work` until it resolves ('ok'), fails for good ('failed') or the consumer stops ('stopped'). */
  private async retrying(
    work: () => Promise<void>,
    live: () => boolean,
    heartbeat: () => Promise<void>,
    where: { topic: string; partition: number; offset: string },
    onFailed?: (e: unknown) => void,
  ): Promise<'ok' | 'failed' | 'stopped'> {
    const s = this.ctx.settings;
    let delay = s.retryInitialMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.withHeartbeat(work(), heartbeat);
        return 'ok';
      } catch (e) {
        const classified = isClassified(e);
        if (!classified) {
          this.ctx.logger?.error(
            { ...where, attempt, of: UNCLASSIFIED_ATTEMPTS, err: errorText(e), type: e instanceof Error ? e.name : typeof e },
            'handler failed with an unclassified error (neither an OtmServiceError nor an AdapterError: a bug?)',
          );
        }
        if (!isRetryable(e) || (!classified && attempt >= UNCLASSIFIED_ATTEMPTS)) {
          onFailed?.(e);
          return 'failed';
        }
        this.ctx.logger?.warn({ ...where, attempt, err: errorText(e) }, 'handler failed; retrying the batch');
      }
      // Back off in small steps, heartbeating, so that stop() and rebalances are not held up.
      const until = Date.now() + delay;
      while (Date.now() < until) {
        if (!live()) return 'stopped';
        await sleep(Math.min(100, until - Date.now()));
        await heartbeat().catch(() => {});
      }
      if (!live()) return 'stopped';
      delay = Math.min(delay * 2, s.retryMaxMs);
    }
  }

  /** Sends `d` to the dead-letter topic, retrying until that worked ('ok') or the consumer stopped. */
  private async deadLetter(
    d: Decoded,
    topic: string,
    partition: number,
    reason: string,
    code: string,
    live: () => boolean,
    heartbeat: () => Promise<void>,
  ): Promise<boolean> {
    this.ctx.logger?.error({ topic, partition, offset: d.message.offset, code, reason }, 'message sent to the dead-letter topic');
    const record = deadLetterRecord(d, topic, partition, reason, code);
    const outcome = await this.retrying(
      () => sendDeadLetter(this.ctx.producer, record, this.ctx.publishTimeoutMs, this.ctx.producerFailed),
      live,
      heartbeat,
      {
        topic: TOPICS.deadLetter,
        partition,
        offset: d.message.offset,
      },
    );
    return outcome === 'ok';
  }
}
