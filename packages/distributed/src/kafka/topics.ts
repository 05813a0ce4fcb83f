/**
 * The Kafka topics of the pipeline, for `otm migrate`: their names are core's `TOPICS`, their
 * default partition counts `DEFAULT_TOPIC_PARTITIONS`, their settings `TOPIC_CONFIG`. Creating
 * them is optional: a cluster that refuses CreateTopics (no permission, a replication factor it
 * cannot give, a policy) is logged and skipped, and topic creation is then the operator's job.
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
  opts: { replicationFactor?: number; config?: Readonly<Record<string, string>>; logger?: Logger; timeoutMs?: number } = {},
): Promise<boolean> {
  const configEntries = Object.entries(opts.config ?? {}).map(([name, value]) => ({ name, value }));
  const list = Object.entries(topics).map(([topic, numPartitions]) => ({
    topic,
    numPartitions,
    ...(opts.replicationFactor === undefined ? {} : { replicationFactor: opts.replicationFactor }),
    ...(configEntries.length > 0 ? { configEntries } : {}),
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

/**
 * The settings `otm migrate` gives each topic it creates (the replication factor and
 * `min.insync.replicas` are the cluster's defaults: docs/deployment.md).
 * - `max.message.bytes`: one message carries a whole PUT body (`OTM_BODY_LIMIT`, 1 MiB by default)
 *   with its envelope, more than Kafka's default of 1 MB; a record batch over it is refused for
 *   good. 2 MiB, as docker-compose.yml sets for the whole broker.
 * - `unclean.leader.election.enable=false` (Kafka's default, stated so that a cluster default
 *   cannot change it): a replica that missed acknowledged writes never becomes the leader.
 */
export const TOPIC_CONFIG: Readonly<Record<string, string>> = Object.freeze({
  'max.message.bytes': '2097152',
  'unclean.leader.election.enable': 'false',
});
