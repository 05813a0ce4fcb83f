/** Vehicles' tracks and latest positions. */
import type { TrackFix } from '../event-facts.js';

/** One location event of a vehicle's track: its time and position, without its id or document. */
export interface TrackFixPoint {
  /** Event time (ms since the epoch). */
  readonly time: number;
  readonly lat: number;
  readonly lon: number;
  readonly speedKmh: number | null;
  readonly heading: number | null;
}

/** One location event of a vehicle's track, with its document. */
export interface TrackPoint extends TrackFixPoint {
  readonly key: string;
  readonly lifecycleRank: number;
  /** The event as GET answers it. */
  readonly doc: string | Buffer;
}

export interface TrackScan {
  readonly tenant: string;
  /** The vehicle's storage key. */
  readonly vehicle: string;
  /** Event time window, ms since the epoch: from inclusive, to exclusive. */
  readonly from: number;
  readonly to: number;
  /** Only points strictly after (time, key). */
  readonly after?: { readonly time: number; readonly key: string };
  /** At most this many points; absent: all of the window. */
  readonly limit?: number;
}

/** A window of a vehicle's track read for its positions only. */
export interface FixScan {
  readonly tenant: string;
  readonly vehicle: string;
  /** Event time window, ms since the epoch: from inclusive, to exclusive. */
  readonly from: number;
  readonly to: number;
  /** Newest first (then the greater key first). */
  readonly descending?: boolean;
  readonly limit?: number;
}

/**
 * Vehicles' tracks: their `locationUpdateEvent`s (event-facts.ts `trackFix`) in event time order
 * (then key), each event once, in its highest lifecycle version. Yielded as read, never gathered.
 */
export interface TrackReader {
  track(scan: TrackScan): AsyncIterable<TrackPoint>;
  /**
   * The same points without their ids and documents, for what only needs positions (a vehicle's
   * activity): in pieces of some hundreds, so that a year of them is read fast.
   */
  fixes(scan: FixScan): AsyncIterable<readonly TrackFixPoint[]>;
}

/** The newest position of a vehicle (by event time; the later key on a tie): its track fix and the event's key. */
export interface LatestPosition extends TrackFix {
  /** The location event's storage key. */
  readonly eventKey: string;
}

/** Latest positions, kept up to date as location events are stored; never computed from the events. */
export interface PositionReader {
  /**
   * The tenant's latest positions in vehicle key order. The array and its items may be shared with
   * later reads (an adapter keeps them in memory): callers must not change them.
   */
  positions(tenant: string): Promise<readonly LatestPosition[]>;
}
