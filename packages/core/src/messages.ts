/**
 * What travels on the bus from ingress to workers. The same shape is used by the in-process bus
 * and by Kafka (as JSON), so both deployments run the same worker code.
 */
import type { KindSegment } from '@otm/model';

export const TOPICS = {
  /** Changes to entities; key: the storage key of the entity changed (per-entity order). */
  entities: 'otm.entities.v1',
  /** Location, sensor, emission, fuel, weigh and start/stop events; key: vehicle or sensor id. */
  telemetry: 'otm.telemetry.v1',
  /** Messages a worker can never apply, with the reason. */
  deadLetter: 'otm.dead-letter.v1',
} as const;
export type Topic = (typeof TOPICS)[keyof typeof TOPICS];

export interface PutMessage {
  readonly v: 1;
  readonly op: 'put';
  readonly tenant: string;
  readonly kind: KindSegment;
  /** Storage key (a lower-case UUID) of the entity. */
  readonly key: string;
  /** The validated document, with its `id` (generated when the request had none). */
  readonly doc: Readonly<Record<string, unknown>>;
  /** When the ingress accepted the change (ms since the epoch). */
  readonly acceptedAt: number;
  /**
   * Set on the copy of a telemetry event sent to the entity worker only to keep the entities it
   * holds inline; the event itself is kept by the telemetry worker.
   */
  readonly inlineOnly?: boolean;
}

export interface DeleteMessage {
  readonly v: 1;
  readonly op: 'delete';
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  readonly acceptedAt: number;
}

export type ChangeMessage = PutMessage | DeleteMessage;

export interface Envelope {
  readonly topic: Topic;
  /** Partition key: messages with the same key are handled in the order they were published. */
  readonly key: string;
  readonly message: ChangeMessage;
}

/** Event kinds that are high-volume telemetry and go to the event store. */
export const TELEMETRY_EVENT_TYPES: ReadonlySet<string> = new Set([
  'locationUpdateEvent',
  'sensorUpdateEvent',
  'emissionEvent',
  'fuelConsumedEvent',
  'weighEvent',
  'startEngineEvent',
  'stopEngineEvent',
  'startMovingEvent',
  'stopMovingEvent',
  'startWaitingEvent',
]);

export const isTelemetry = (kind: KindSegment, doc: Readonly<Record<string, unknown>> | undefined): boolean =>
  kind === 'events' && doc !== undefined && TELEMETRY_EVENT_TYPES.has(doc.eventType as string);
