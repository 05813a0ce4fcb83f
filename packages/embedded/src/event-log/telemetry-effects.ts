/**
 * The telemetry effects of the embedded deployment: the feed entries and the vehicles' latest
 * positions of the events the log stores, written in the index's own LMDB transaction (effects.ts
 * `apply`), when the event log is beside the embedded entity store (else the telemetry worker
 * records them where the entity store is: services/worker/src/telemetry-effects.ts).
 *
 * What it saves: a transaction of their own for each batch. Each tenant's feed entries of one
 * transaction are stored together, as one block (feed.ts: one LMDB write a transaction, not one an
 * event), and a vehicle's position only for the newest point among the transaction's changes,
 * and only when newer than the stored one (positions.ts: a read and at most a write a vehicle, not
 * an event). Written in the index commit, they agree with the log after any stop, `kill -9`
 * included: a replay from the checkpoint (recovery.ts) writes them again for what it replays. A
 * delete leaves the latest position as it is: it is where the vehicle was last seen.
 *
 * test/telemetry-effects.test.ts holds this module and the worker's to the same feed and positions.
 */
import type { EventChange, EventPut } from './event-change.js';
import type { FeedSeq } from '../feed.js';
import type { Fix, LmdbPositions } from '../positions.js';

/** Where the feed entries and latest positions go: the embedded entity store's (lmdb-store.ts). */
export interface TelemetryEffects {
  readonly seq: FeedSeq;
  readonly positions: LmdbPositions;
}

/** One tenant's changes in an index transaction, and the newest track point of each of its vehicles among them. */
interface TenantChanges {
  readonly changes: EventChange[];
  newest: Map<string, EventPut> | undefined;
}

/** The telemetry effects of one index transaction: gathered change by change, then written in it. */
export class CommitTelemetry {
  /** Each tenant's changes, in order, for its feed block, and the newest track point of each of its vehicles. */
  private tenants: Map<string, TenantChanges> | undefined;
  private tenant: string | undefined;
  private of: TenantChanges | undefined;

  constructor(private readonly sinks: TelemetryEffects) {}

  add(c: EventChange): void {
    if (c.tenant !== this.tenant) {
      this.tenants ??= new Map();
      this.tenant = c.tenant;
      this.of = this.tenants.get(c.tenant);
      if (this.of === undefined) this.tenants.set(c.tenant, (this.of = { changes: [], newest: undefined }));
    }
    const of = this.of!;
    of.changes.push(c);
    if (c.op === 'delete' || !c.located) return;
    const newest = (of.newest ??= new Map<string, EventPut>());
    const had = newest.get(c.vehicle);
    // Not older, as positions.ts `isNewerFix`: a later version of the same event replaces the earlier.
    if (had === undefined || c.time > had.time || (c.time === had.time && c.key >= had.key)) newest.set(c.vehicle, c);
  }

  /**
   * Inside the index's write transaction: the feed blocks and the positions. Returns the positions
   * it stored, for `committed` once the transaction is.
   */
  write(now: number): Fix[] {
    if (this.tenants === undefined) return [];
    const { seq, positions } = this.sinks;
    const fixes: Fix[] = [];
    for (const [t, { changes, newest }] of this.tenants) {
      seq.appendChanges(t, now, changes);
      for (const c of newest?.values() ?? []) {
        fixes.push({
          tenant: c.tenant,
          vehicle: c.vehicle,
          time: c.time,
          lat: c.lat!,
          lon: c.lon!,
          speedKmh: c.speedKmh,
          heading: c.heading,
          eventKey: c.key,
        });
      }
    }
    seq.save();
    return fixes.length === 0 ? [] : positions.offer(fixes);
  }
}

/** After the commit of the transaction `CommitTelemetry.write` wrote in: the positions' copies in memory. */
export function committedTelemetry(sinks: TelemetryEffects | undefined, stored: readonly Fix[]): void {
  if (stored.length > 0) sinks?.positions.committed(stored);
}
