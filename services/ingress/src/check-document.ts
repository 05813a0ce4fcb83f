/**
 * What a PUT of one document is checked against, on its own: the model's rules, its id, and
 * where telemetry goes. No store, no bus: used by the ingress and by bulk checking threads.
 */
import { associationTarget, inlineEntities, validateEntity, type KindSegment, type OtmError } from '@otm/model';
import { invalidDocument, isTelemetry, newId, storageKey } from '@otm/core';

/** A checked document with its id, and its storage key. */
export interface Accepted {
  readonly key: string;
  readonly doc: Readonly<Record<string, unknown>>;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Partition key of a telemetry event: its vehicle, else its sensor, else the event itself; so
 * that one vehicle's positions stay in order.
 */
export function telemetryKey(doc: Readonly<Record<string, unknown>>, key: string): string {
  const id = associationTarget(doc.vehicle)?.id ?? associationTarget(doc.sensor)?.id;
  return id === undefined ? key : storageKey(id);
}

/**
 * Checks a document of `kind` as a PUT of it: the model's rules, and an `id` that is not empty.
 * Returns it with its id (one is generated when it has none) and storage key, or throws a 400.
 */
export function checkDocument(kind: KindSegment, body: unknown): Accepted {
  const errors: OtmError[] = validateEntity(kind, body);
  if (errors.length === 0 && isObject(body) && body.id === '') {
    errors.push({ type: 'invalidField', field: 'id', message: 'must not be empty; leave it out to have one generated' });
  }
  if (errors.length > 0) throw invalidDocument(errors);
  const doc = body as Record<string, unknown>;
  const withId = typeof doc.id === 'string' ? doc : { id: newId(), ...doc };
  return { key: storageKey(withId.id as string), doc: withId };
}

/**
 * Whether a checked document goes to the event store as it is: telemetry that holds no entity
 * with an id inline (those are also kept by the entity worker).
 */
export const isPlainTelemetry = (kind: KindSegment, doc: Readonly<Record<string, unknown>>): boolean =>
  isTelemetry(kind, doc) && !inlineEntities(kind, doc).some((e) => typeof e.entity.id === 'string');
