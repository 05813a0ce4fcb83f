/**
 * The Kafka topics of the pipeline, for `otm migrate`: their names are core's `TOPICS`, their
 * default partition counts `DEFAULT_TOPIC_PARTITIONS`. Creating them is optional: a cluster that
 * refuses CreateTopics (the librdkafka mock used in tests does) is logged and skipped, and topic
 * creation is then the operator's job (or the broker's auto-create).
 */
import type { Admin } from 'kafkajs';
import { AdapterError, TOPICS, type Logger, type Topic } from '@otm/core';
import { errorText } from '../error-text.js';
import { withTimeout } from './timeout.js';

/**
 * Creates topics with the given partition counts; topics that exist are left alone. Clusters that
 * refuse are logged and skipped. Returns whether the cluster accepted the request.
 */
export async function ensureTopics(
  admin: Admin,
  topics: Readonly<Record<string, number>>,
  opts: { replicationFactor?: number; logger?: Logger; timeoutMs?: number } = {},
): Promise<boolean> {
  const list = Object.entries(topics).map(([topic, numPartitions]) => ({
    topic,
    numPartitions,
    ...(opts.replicationFactor === undefined ? {} : { replicationFactor: opts.replicationFactor }),
  }));
  try {
    await withTimeout(
      admin.createTopics({ topics: list, waitForLeaders: true, timeout: opts.timeoutMs ?? 10_000 }),
      (opts.timeoutMs ?? 10_000) + 1_000,
      () => new AdapterError('kafka', 'createTopics timed out', { retryable: true }),
    );
    opts.logger?.info({ topics }, 'kafka topics ensured');
    return true;
  } catch (e) {
    opts.logger?.warn(
      { topics, err: errorText(e) },
      'kafka refused to create topics; continuing (create them on the cluster, or rely on auto-create)',
    );
    return false;
  }
}

/** The topics of the pipeline with default partition counts (for `otm migrate`). */
export const DEFAULT_TOPIC_PARTITIONS: Readonly<Record<Topic, number>> = Object.freeze({
  [TOPICS.entities]: 12,
  [TOPICS.telemetry]: 24,
  [TOPICS.deadLetter]: 3,
});
