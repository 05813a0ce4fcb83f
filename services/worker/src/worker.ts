/**
 * Workers turn bus messages into store writes. The entity worker applies entity changes with the
 * model's semantics (apply-changes.ts in @otm/core) to the entity store, one unit of work per batch;
 * the telemetry worker writes telemetry events to the event store and then, when that store does
 * not keep them itself (ClickHouse), their change-feed entries and the latest positions of their
 * vehicles to the entity store (`TelemetrySideEffects`). A batch is acknowledged (its
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
  positionOfFix,
  TextPut,
  trackFix,
  type LatestPosition,
  type TelemetrySideEffects,
  type DocumentWrite,
  type Envelope,
  type EntityStore,
  type EventStore,
  type Logger,
} from '@otm/core';

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

/** A latest-position fix of a tenant's vehicle. */
type TenantFix = LatestPosition & { tenant: string };

/**
 * An event store that answers a write with the latest-position fixes of the location events it
 * stored, made from what it read of each event for its own columns (the ClickHouse store), so that
 * the worker reads no event for them. Not part of the EventStore port: a store has it or not.
 */
export interface FixingEventStore extends EventStore {
  writeWithFixes(writes: readonly DocumentWrite[]): Promise<TenantFix[]>;
}

const givesFixes = (store: EventStore): store is FixingEventStore =>
  typeof (store as Partial<FixingEventStore>).writeWithFixes === 'function';

/**
 * The feed entries of stored telemetry writes and, unless `withFixes` is false (the store gave
 * them), the latest-position fixes of their location events. A document at hand as a value is
 * looked at as it is; one at hand as text only is parsed when the text names locationUpdateEvent.
 */
export function telemetryEffects(
  writes: readonly DocumentWrite[],
  withFixes = true,
): {
  feed: Parameters<TelemetrySideEffects['appendFeed']>[0];
  fixes: TenantFix[];
} {
  const feed: Array<Parameters<TelemetrySideEffects['appendFeed']>[0][number]> = [];
  const fixes: TenantFix[] = [];
  for (const w of writes) {
    if (w.op === 'delete') {
      feed.push({ tenant: w.tenant, kind: w.kind, key: w.key, lifecycleRank: 0, op: 'delete' });
      continue;
    }
    const d = w.doc;
    feed.push({ tenant: w.tenant, kind: d.kind, key: d.key, lifecycleRank: d.lifecycleRank, op: 'put' });
    if (!withFixes) continue;
    let value = d.value;
    if (value === undefined) {
      if (!d.json.includes('locationUpdateEvent')) continue;
      value = JSON.parse(d.json) as Record<string, unknown>;
    }
    const fix = trackFix(value, d.stamp?.acceptedAt ?? 0);
    if (fix !== undefined) fixes.push(positionOfFix(fix, w.tenant, d.key));
  }
  return { feed, fixes };
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
 * never row by row. With `effects` (an event store that does not keep them itself), the write's
 * feed entries and positions are recorded after it, both at once, before the batches are
 * acknowledged; a store that answers with the fixes (`FixingEventStore`) spares the worker reading
 * the location events again.
 */
export function telemetryWorker(
  store: EventStore,
  deps: WorkerDeps,
  batching: TelemetryBatching = {},
  /** Where the feed entries and positions go when the event store does not keep them itself. */
  effects?: TelemetrySideEffects,
) {
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
    const recorded =
      effects === undefined || store.keepsTelemetryEffects === true
        ? store.write(writes)
        : (givesFixes(store) ? store.writeWithFixes(writes) : store.write(writes).then(() => undefined)).then(async (stored) => {
            // After the events are stored (a feed entry never names an event not yet readable),
            // before the batch is acknowledged (a crash in between replays it: at least once).
            // The feed and the positions are independent of each other: recorded at once.
            const { feed, fixes } = telemetryEffects(writes, stored === undefined);
            const positions = stored ?? fixes;
            await Promise.all([effects.appendFeed(feed), positions.length > 0 ? effects.updatePositions(positions) : undefined]);
          });
    recorded.then(
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
