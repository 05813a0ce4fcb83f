/**
 * The telemetry effects of the distributed deployment: the change-feed entries and the vehicles'
 * latest positions of the telemetry events the worker stored, recorded in the entity store
 * (`EntityStore.telemetry`: Redis) once the event store's write resolved (a feed entry never names
 * an event not yet readable) and before the batch is acknowledged (a crash in between replays it:
 * at least once). The feed and the positions are independent of each other: recorded at once.
 *
 * An event store that keeps them itself (`EventStore.keepsTelemetryEffects`: the embedded event
 * log beside the embedded entity store, packages/embedded/src/event-log/telemetry-effects.ts, in
 * its index commit) gets no recording here. test/telemetry-effects.test.ts holds both to the same
 * feed and positions.
 *
 * What it saves: an event store that answers its write with the latest-position fixes it read of
 * each location event for its own columns (`FixingEventStore`, the ClickHouse store) spares the
 * worker reading those events again; else a document at hand as a value is looked at as it is, and
 * one at hand as text only is parsed when the text names locationUpdateEvent.
 */
import { positionOfFix, trackFix, type DocumentWrite, type EventStore, type LatestPosition, type TelemetrySideEffects } from '@otm/core';

/** A latest-position fix of a tenant's vehicle. */
export type TenantFix = LatestPosition & { tenant: string };

/**
 * An event store that answers a write with the latest-position fixes of the location events it
 * stored, made from what it read of each event for its own columns (the ClickHouse store). Not
 * part of the EventStore port: a store has it or not.
 */
export interface FixingEventStore extends EventStore {
  writeWithFixes(writes: readonly DocumentWrite[]): Promise<TenantFix[]>;
}

const givesFixes = (store: EventStore): store is FixingEventStore =>
  typeof (store as Partial<FixingEventStore>).writeWithFixes === 'function';

type FeedAppend = Parameters<TelemetrySideEffects['appendFeed']>[0][number];

/**
 * The feed entries of stored telemetry writes and, unless `withFixes` is false (the store gave
 * them), the latest-position fixes of their location events.
 */
export function telemetryEffects(writes: readonly DocumentWrite[], withFixes = true): { feed: FeedAppend[]; fixes: TenantFix[] } {
  const feed: FeedAppend[] = [];
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

/**
 * How the telemetry worker stores a gathered write on `store`, with its effects where the store
 * does not keep them (`effects`, the entity store's), decided once: the store's write alone (it
 * keeps them, or there is nowhere to record them), or the write and then the effects.
 */
export function storeTelemetry(store: EventStore, effects?: TelemetrySideEffects): (writes: readonly DocumentWrite[]) => Promise<void> {
  if (effects === undefined || store.keepsTelemetryEffects === true) return (writes) => store.write(writes);
  const record = async (writes: readonly DocumentWrite[], stored: TenantFix[] | undefined) => {
    const { feed, fixes } = telemetryEffects(writes, stored === undefined);
    const positions = stored ?? fixes;
    await Promise.all([effects.appendFeed(feed), positions.length > 0 ? effects.updatePositions(positions) : undefined]);
  };
  if (givesFixes(store)) return async (writes) => record(writes, await store.writeWithFixes(writes));
  return async (writes) => {
    await store.write(writes);
    await record(writes, undefined);
  };
}
