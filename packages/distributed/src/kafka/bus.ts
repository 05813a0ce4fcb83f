/**
 * The bus of the distributed deployment on Kafka (kafkajs): the `Bus` port made of the jobs of
 * this folder. Publishing is `producer.ts` (records as `record-pack.ts` makes them), consuming and
 * the retry decision `consumer.ts`, messages that can never be applied `dead-letter.ts`, topic
 * creation `topics.ts`, settings and their defaults `options.ts`. The bus owns one kafkajs client,
 * one producer (shared by publishes and dead letters), one consumer per subscription, an admin
 * client that reads the consumers' lag (consumer-lag.ts) and, once `ready()` was asked, one more
 * admin client; `close()` ends them all.
 */
import { Kafka, type Admin, type Producer } from 'kafkajs';
import { AdapterError, unavailable, type Bus, type Envelope, type SubscribeOptions, type Subscription, type Topic } from '@otm/core';
import { Consumers, type Handler, type KafkaSubscription } from './consumer.js';
import { clientConfig, resolveOptions, type KafkaBusOptions, type ResolvedKafkaOptions } from './options.js';
import { Publisher } from './producer.js';
import { withTimeout } from './timeout.js';

export class KafkaBus implements Bus {
  private readonly kafka: Kafka;
  private readonly settings: ResolvedKafkaOptions;
  private readonly publisher: Publisher;
  private readonly consumers: Consumers;
  private admin: Admin | undefined;
  /** The admin client that reads the consumers' lag (connected again after a failure). */
  private lagAdminClient: Admin | undefined;
  private readonly subscriptions = new Set<Subscription>();
  private closed = false;

  constructor(opts: KafkaBusOptions) {
    if (opts.brokers.length === 0) throw new AdapterError('kafka', 'KafkaBus: no brokers', { retryable: false });
    this.settings = resolveOptions(opts);
    this.kafka = new Kafka(clientConfig(opts, this.settings));
    this.publisher = new Publisher(this.kafka, this.settings);
    this.consumers = new Consumers({
      kafka: this.kafka,
      settings: this.settings.consumer,
      logger: opts.logger,
      retryAfterSeconds: this.settings.retryAfterSeconds,
      publishTimeoutMs: this.settings.publishTimeoutMs,
      producer: () => this.connectedProducer(),
      producerFailed: (producer) => this.publisher.replace(producer),
      admin: () => this.lagAdmin(),
    });
  }

  /** The kafkajs client (for `ensureTopics(bus.client.admin(), ...)` and tests). */
  get client(): Kafka {
    return this.kafka;
  }

  /** The bus's producer, connected (publishes, dead letters; tests watch its requests). */
  private connectedProducer(): Promise<Producer> {
    return this.publisher.connected();
  }

  /** Publishes with acks from all in-sync replicas, within `publishTimeoutMs` (producer.ts). */
  async publish(envelopes: readonly Envelope[]): Promise<void> {
    if (this.closed) throw unavailable('the bus is closed', this.settings.retryAfterSeconds);
    return this.publisher.publish(envelopes);
  }

  /** Consumes `topic` as a member of `group` (consumer.ts). */
  async subscribe(topic: Topic, group: string, handler: Handler, options: SubscribeOptions = {}): Promise<KafkaSubscription> {
    if (this.closed) throw unavailable('the bus is closed', this.settings.retryAfterSeconds);
    const sub = await this.consumers.subscribe(topic, group, handler, options, (s) => this.subscriptions.delete(s));
    this.subscriptions.add(sub);
    return sub;
  }

  private async lagAdmin(): Promise<Admin> {
    if (this.closed) throw new AdapterError('kafka', 'the bus is closed', { retryable: false });
    const admin = (this.lagAdminClient ??= this.kafka.admin({ retry: { retries: 0 } }));
    try {
      await admin.connect();
      return admin;
    } catch (e) {
      this.lagAdminClient = undefined;
      await admin.disconnect().catch(() => {});
      throw e;
    }
  }

  async ready(): Promise<boolean> {
    if (this.closed) return false;
    try {
      this.admin ??= this.kafka.admin({ retry: { retries: 0 } });
      const admin = this.admin;
      await withTimeout(
        (async () => {
          await admin.connect();
          await admin.describeCluster();
        })(),
        this.settings.readyTimeoutMs,
        () => new AdapterError('kafka', 'ready() timed out', { retryable: true }),
      );
      return true;
    } catch {
      const admin = this.admin;
      this.admin = undefined;
      await admin?.disconnect().catch(() => {});
      return false;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subscriptions].map((s) => s.close()));
    await this.publisher.close();
    await this.admin?.disconnect().catch(() => {});
    await this.lagAdminClient?.disconnect().catch(() => {});
  }
}
