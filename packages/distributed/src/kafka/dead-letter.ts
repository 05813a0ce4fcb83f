/**
 * The dead-letter topic (`TOPICS.deadLetter`): where a message that can never be applied goes, so
 * that it cannot stop its partition. The record keeps the message's key and its own text (a line
 * of a packed record goes alone) with headers saying why and where it came from: `reason`, `code`,
 * `original-topic`, `original-partition`, `original-offset`, `original-key` and, for a message of
 * a packed record, `original-pack-index: <index from 0>/<count>`. It is produced with acks -1 and
 * bounded by the publish timeout; every failure of that produce is retryable, so the consumer
 * retries it until it worked (or the consumer stops) and commits past the message only once it
 * was applied or dead-lettered.
 */
import type { Message, Producer } from 'kafkajs';
import { AdapterError, OtmServiceError, TOPICS, unavailable } from '@otm/core';
import { errorText } from '../error-text.js';
import type { Decoded } from './record-pack.js';
import { withTimeout } from './timeout.js';

/** The `code` header for a handler's failure: the OtmServiceError's code, else `internal`. */
export const deadLetterCode = (failure: unknown): string => (failure instanceof OtmServiceError ? failure.code : 'internal');

/** The `reason` header for a handler's failure: its message, naming the adapter of an AdapterError. */
export const deadLetterReason = (failure: unknown): string =>
  failure instanceof AdapterError ? `${failure.adapter}: ${failure.message}` : failure instanceof Error ? failure.message : String(failure);

/** The dead-letter record of message `d`, taken from `partition` of `topic`. */
export function deadLetterRecord(d: Decoded, topic: string, partition: number, reason: string, code: string): Message {
  return {
    key: d.message.key,
    value: d.value,
    headers: {
      reason: reason.slice(0, 2_000),
      code,
      'original-topic': topic,
      'original-partition': String(partition),
      'original-offset': d.message.offset,
      ...(d.message.key ? { 'original-key': d.message.key } : {}),
      // Which message of a packed record it was (from 0), of how many.
      ...(d.part ? { 'original-pack-index': `${d.part.index}/${d.part.of}` } : {}),
    },
  };
}

/**
 * Produces one dead-letter record. Every failure is retryable: a 503 after `timeoutMs`, a
 * retryable AdapterError for what kafkajs threw (connecting the producer included). A producer
 * whose send failed is handed to `failed` (the bus replaces it: producer.ts says why).
 */
export async function sendDeadLetter(
  connected: () => Promise<Producer>,
  record: Message,
  timeoutMs: number,
  failed: (producer: Producer) => void = () => {},
): Promise<void> {
  let producer: Producer | undefined;
  try {
    producer = await connected();
    await withTimeout(producer.send({ topic: TOPICS.deadLetter, acks: -1, messages: [record] }), timeoutMs, () =>
      unavailable('dead-letter produce timed out'),
    );
  } catch (e) {
    if (producer) failed(producer);
    if (e instanceof OtmServiceError) throw e;
    throw new AdapterError('kafka', `dead-letter produce failed: ${errorText(e)}`, { retryable: true, cause: e });
  }
}
