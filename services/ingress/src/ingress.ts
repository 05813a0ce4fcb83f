/**
 * The ingress: checks a change, gives a new document its id, and publishes it to the bus. It
 * answers only after the bus has durably accepted the change.
 */
import { validateEntity, type KindSegment, type OtmError } from '@otm/model';
import {
  TOPICS,
  invalidDocument,
  isTelemetry,
  newId,
  notFound,
  storageKey,
  type Bus,
  type DocumentReader,
  type Envelope,
  type PutMessage,
} from '@otm/core';

export interface IngressDeps {
  readonly bus: Bus;
  /** Where existing documents are looked up (for DELETE): the entity store, then the event store. */
  readonly readers: { readonly entities: DocumentReader; readonly events: DocumentReader };
  readonly now?: () => number;
}

export interface Accepted {
  readonly key: string;
  readonly doc: Readonly<Record<string, unknown>>;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Id of an entity association (inline entity id or reference uuid), if any. */
function associationId(assoc: unknown): string | undefined {
  if (!isObject(assoc)) return undefined;
  if (typeof assoc.uuid === 'string') return assoc.uuid;
  if (isObject(assoc.entity) && typeof assoc.entity.id === 'string') return assoc.entity.id;
  return undefined;
}

/**
 * Partition key of a telemetry event: its vehicle, else its sensor, else the event itself; so
 * that one vehicle's positions stay in order.
 */
export function telemetryKey(doc: Readonly<Record<string, unknown>>, key: string): string {
  const id = associationId(doc.vehicle) ?? associationId(doc.sensor);
  return id === undefined ? key : storageKey(id);
}

export function envelopeFor(message: PutMessage): Envelope {
  if (isTelemetry(message.kind, message.doc)) {
    return { topic: TOPICS.telemetry, key: telemetryKey(message.doc, message.key), message };
  }
  return { topic: TOPICS.entities, key: message.key, message };
}

export class Ingress {
  private readonly now: () => number;

  constructor(private readonly deps: IngressDeps) {
    this.now = deps.now ?? Date.now;
  }

  /** Checks a document of `kind`; returns it with its id and storage key, or throws a 400. */
  check(kind: KindSegment, body: unknown): Accepted {
    const errors: OtmError[] = validateEntity(kind, body);
    if (errors.length === 0 && isObject(body) && body.id === '') {
      errors.push({ type: 'invalidField', field: 'id', message: 'must not be empty; leave it out to have one generated' });
    }
    if (errors.length > 0) throw invalidDocument(errors);
    const doc = body as Record<string, unknown>;
    const withId = typeof doc.id === 'string' ? doc : { id: newId(), ...doc };
    return { key: storageKey(withId.id as string), doc: withId };
  }

  async put(tenant: string, kind: KindSegment, body: unknown): Promise<Accepted> {
    const accepted = this.check(kind, body);
    const message: PutMessage = { v: 1, op: 'put', tenant, kind, key: accepted.key, doc: accepted.doc, acceptedAt: this.now() };
    await this.deps.bus.publish([envelopeFor(message)]);
    return accepted;
  }

  /** Deletes every lifecycle version of the entity; 404 when there is none. */
  async delete(tenant: string, kind: KindSegment, key: string): Promise<void> {
    const message = { v: 1, op: 'delete', tenant, kind, key, acceptedAt: this.now() } as const;
    const inEntities = await this.deps.readers.entities.get(tenant, kind, key);
    if (inEntities !== undefined) {
      await this.deps.bus.publish([{ topic: TOPICS.entities, key, message }]);
      return;
    }
    const inEvents = kind === 'events' ? await this.deps.readers.events.get(tenant, kind, key) : undefined;
    if (inEvents === undefined) throw notFound(`no ${kind} entity with id ${key}`);
    const doc = JSON.parse(inEvents.json) as Record<string, unknown>;
    await this.deps.bus.publish([{ topic: TOPICS.telemetry, key: telemetryKey(doc, key), message }]);
  }
}
