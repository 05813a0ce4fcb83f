/**
 * Workers turn bus messages into store writes. The entity worker applies entity changes with the
 * model's semantics (semantics.ts in @otm/core) to the entity store, one unit of work per batch;
 * the telemetry worker writes telemetry events to the event store. A batch is acknowledged (its
 * offsets committed) only after the store made it durable, so a crash replays it; replays are
 * harmless: every write is keyed by tenant, kind, id and lifecycle, and an effect applied twice
 * in the same order gives the same state.
 */
import {
  appliedMessages,
  applyChanges,
  batchSeconds,
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
    const end = batchSeconds.startTimer({ topic: 'entities' });
    await store.unit((tx) => applyChanges(tx, batch, deps));
    end();
    appliedMessages.inc({ topic: 'entities' }, batch.length);
  };
}

export function telemetryWorker(store: EventStore, _deps: WorkerDeps) {
  return async (batch: readonly Envelope[]): Promise<void> => {
    const end = batchSeconds.startTimer({ topic: 'telemetry' });
    await store.write(batch.map(toWrite));
    end();
    appliedMessages.inc({ topic: 'telemetry' }, batch.length);
  };
}
