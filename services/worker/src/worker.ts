/**
 * Workers turn bus messages into store writes. The entity worker applies entity changes to the
 * entity store; the telemetry worker writes telemetry events to the event store. A batch is
 * acknowledged (its offsets committed) only after the store resolved the write, so a crash
 * replays it; the writes are idempotent (a document is stored under its tenant, kind, key and
 * lifecycle), so a replay is harmless.
 */
import {
  lifecycleRank,
  type DocumentWrite,
  type Envelope,
  type EntityStore,
  type EventStore,
  type Logger,
} from '@otm/core';

export function toWrite(envelope: Envelope): DocumentWrite {
  const m = envelope.message;
  if (m.op === 'delete') return { op: 'delete', tenant: m.tenant, kind: m.kind, key: m.key };
  return {
    op: 'put',
    tenant: m.tenant,
    doc: { kind: m.kind, key: m.key, lifecycleRank: lifecycleRank(m.doc.lifecycle), json: JSON.stringify(m.doc), value: m.doc },
  };
}

export interface WorkerDeps {
  readonly logger: Logger;
}

export function entityWorker(store: EntityStore, deps: WorkerDeps) {
  return async (batch: readonly Envelope[]): Promise<void> => {
    await store.write(batch.map(toWrite));
    deps.logger.debug({ count: batch.length }, 'entity batch applied');
  };
}

export function telemetryWorker(store: EventStore, deps: WorkerDeps) {
  return async (batch: readonly Envelope[]): Promise<void> => {
    await store.write(batch.map(toWrite));
    deps.logger.debug({ count: batch.length }, 'telemetry batch applied');
  };
}
