/**
 * Workers turn bus messages into store writes. The entity worker applies entity changes with the
 * model's semantics (apply-changes.ts in @otm/core) to the entity store, one unit of work per batch;
 * the telemetry worker writes telemetry events to the event store and then, when that store does
 * not keep them itself (ClickHouse), their change-feed entries and the latest positions of their
 * vehicles to the entity store (telemetry-effects.ts). A batch is acknowledged (its
 * offsets committed) only after the store made it durable, so a crash replays it; replays are
 * harmless: every write is keyed by tenant, kind, id and lifecycle, and an effect applied twice
 * in the same order gives the same state.
 */
import {
  appliedMessages,
  applyChanges,
  batchSeconds,
  jsonOf,
  lifecycleRank,
  modifiedOf,
  TextPut,
  type TelemetrySideEffects,
  type DocumentWrite,
  type Envelope,
  type EntityStore,
  type EventStore,
  type Logger,
} from '@otm/core';
import { storeTelemetry } from './telemetry-effects.js';

export function toWrite(envelope: Envelope): DocumentWrite {
  const m = envelope.message;
  if (m.op === 'delete') return { op: 'delete', tenant: m.tenant, kind: m.kind, key: m.key };
  if (m instanceof TextPut) {
    // Checked and encoded before (by a bulk request's checking): the message is the version it
    // writes, its text and facts, nothing parsed here. No `value`: a store that indexes fields
    // (ClickHouse) parses the text itself.
    return { op: 'put', tenant: m.tenant, doc: m };
  }
  return {
    op: 'put',
    tenant: m.tenant,
    doc: {
      kind: m.kind,
      key: m.key,
      lifecycleRank: lifecycleRank(m.doc.lifecycle),
      json: jsonOf(m.doc),
      value: m.doc,
      stamp: { modified: modifiedOf(m.doc), acceptedAt: m.acceptedAt },
    },
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

export interface TelemetryBatching {
  /** Write as soon as this many events are waiting (default 5000). */
  readonly maxRows?: number;
  /** Longest an event waits for others to share its write (ms, default 0: the next tick). */
  readonly maxDelayMs?: number;
}

/**
 * The telemetry worker. Batches handed to it (by several partitions at once) are gathered into one
 * store write of up to `maxRows` events, or whatever arrived within `maxDelayMs`; each batch is
 * acknowledged when the write that holds it is durable. The event store is written in batches,
 * never row by row. With `effects`, the write's feed entries and positions are recorded where the
 * event store does not keep them itself, before the batches are acknowledged (telemetry-effects.ts).
 */
export function telemetryWorker(
  store: EventStore,
  deps: WorkerDeps,
  batching: TelemetryBatching = {},
  /** Where the feed entries and positions go when the event store does not keep them itself. */
  effects?: TelemetrySideEffects,
) {
  const write = storeTelemetry(store, effects);
  const maxRows = batching.maxRows ?? 5_000;
  const maxDelayMs = batching.maxDelayMs ?? 0;
  let waiting: Array<{ writes: DocumentWrite[]; resolve: () => void; reject: (e: unknown) => void }> = [];
  let rows = 0;
  let timer: NodeJS.Timeout | NodeJS.Immediate | undefined;

  const flush = () => {
    if (timer) {
      if (maxDelayMs > 0) clearTimeout(timer as NodeJS.Timeout);
      else clearImmediate(timer as NodeJS.Immediate);
    }
    timer = undefined;
    const taken = waiting;
    waiting = [];
    rows = 0;
    if (taken.length === 0) return;
    const writes = taken.flatMap((t) => t.writes);
    const end = batchSeconds.startTimer({ topic: 'telemetry' });
    write(writes).then(
      () => {
        const seconds = end();
        deps.logger.debug({ rows: writes.length, batches: taken.length, ms: Math.round(seconds * 1000) }, 'telemetry written');
        appliedMessages.inc({ topic: 'telemetry' }, writes.length);
        for (const t of taken) t.resolve();
      },
      (e: unknown) => {
        for (const t of taken) t.reject(e);
      },
    );
  };

  return (batch: readonly Envelope[]): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      waiting.push({ writes: batch.map(toWrite), resolve, reject });
      rows += batch.length;
      if (rows >= maxRows) flush();
      // setTimeout(fn, 0) waits at least 1 ms; setImmediate runs once this turn's I/O is handled.
      else timer ??= maxDelayMs > 0 ? setTimeout(flush, maxDelayMs) : setImmediate(flush);
    });
}
