/**
 * What the event log keeps besides its index, written in the index's own LMDB transaction (the one
 * that moves its checkpoint), so that all of it agrees with the log after any stop, `kill -9`
 * included: a replay from the checkpoint (recovery.ts) writes it again for the records it replays.
 *
 * - Lists of events (`event-lists`, `event-list-records`, the layout of lists.ts): an event is
 *   listed at the time the ingress accepted its latest version (for a record replayed at start,
 *   which does not carry that time, the time of the replay), under the facets of all its versions.
 *   Its list record also names its track entry, so that the entry is found again to be moved or
 *   removed.
 * - Tracks (`track`): `tenant|vehicle|<event time as 15 digits>|<eventKey>` ->
 *   `[rank, lat, lon, speedKmh, heading]` for each location event (event-facts.ts `trackFix`): the
 *   point of its latest version; a later version with another time or vehicle moves it, one without
 *   a position and a delete remove it. The point carries its position, so that a track is read
 *   without parsing any document.
 * - When the event store keeps the telemetry effects (`telemetry`: beside the embedded entity
 *   store), a feed entry for every put and delete (feed.ts: no document, the log has it) and the
 *   vehicles' latest positions (positions.ts). A delete leaves the latest position as it is: it is
 *   where the vehicle was last seen, and the events before it are not looked at again.
 *
 * The document is parsed once, when the write is encoded (or the record replayed); only what these
 * need is kept (`EventChange`) until the index commit.
 */
import { facetsOf, storageKey, trackFix, type ListRecord, type ListScan, type ListPosition, type TrackFix } from '@otm/core';
import type { KindSegment } from '@otm/model';
import type { FeedSeq } from '../feed.js';
import { SEP, prefixOf } from '../keys.js';
import { pad15, readList, relist, type ListDbs, type Str } from '../lists.js';
import type { Fix, LmdbPositions } from '../positions.js';

/** What the index commit records of one put or delete of the log. */
export type EventChange =
  | {
      readonly op: 'put';
      readonly tenant: string;
      readonly kind: KindSegment;
      readonly key: string;
      readonly rank: number;
      /** When the version was accepted (ms): where the event is listed. */
      readonly at: number;
      readonly facets: readonly string[];
      readonly fix: TrackFix | undefined;
    }
  | { readonly op: 'delete'; readonly tenant: string; readonly kind: KindSegment; readonly key: string };

type Doc = Readonly<Record<string, unknown>>;
const EMPTY: Doc = {};

/** The document's value; a text that is not a JSON object counts as an empty one (listed, no facet). */
function valueOf(text: string): Doc {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Doc) : EMPTY;
  } catch {
    return EMPTY;
  }
}

/**
 * The change a put records: its facets and track point, from its value (parsed from `text` when not
 * given). Never throws: a record the log holds must not stop the replay at the next start, so a
 * document these cannot be read from is listed without facets and has no track point.
 */
export function putChange(
  tenant: string,
  kind: KindSegment,
  key: string,
  rank: number,
  at: number,
  value: Doc | undefined,
  text: () => string,
): EventChange {
  let facets: readonly string[] = [''];
  let fix: TrackFix | undefined;
  try {
    const doc = value ?? valueOf(text());
    facets = facetsOf(kind, doc);
    fix = kind === 'events' ? trackFix(doc, at, storageKey) : undefined;
  } catch {
    /* listed under '' only */
  }
  return { op: 'put', tenant, kind, key, rank, at, facets, fix };
}

/** An event's list record, and the key of its track entry. */
interface EventListRecord extends ListRecord {
  readonly track?: string;
}

/** A track entry's value. */
type TrackValue = [rank: number, lat: number, lon: number, speedKmh: number | null, heading: number | null];

export const trackBase = (tenant: string, vehicle: string) => `${tenant}${SEP}${vehicle}${SEP}`;
const trackKey = (tenant: string, fix: TrackFix, key: string) => `${trackBase(tenant, fix.vehicle)}${pad15(fix.time)}${SEP}${key}`;

/** One entry of a track, as read. */
export interface TrackEntry {
  readonly time: number;
  readonly key: string;
  readonly rank: number;
  readonly lat: number;
  readonly lon: number;
  readonly speedKmh: number | null;
  readonly heading: number | null;
}

/** Track entries read from LMDB in one go (a fresh read transaction each; none is held between). */
const TRACK_CHUNK = 512;

export interface TelemetryEffects {
  readonly seq: FeedSeq;
  readonly positions: LmdbPositions;
}

export class EventEffects {
  private readonly lists: ListDbs;
  private readonly track: Str;
  private readonly records: Str;

  constructor(
    open: (name: string) => Str,
    /** Feed entries and latest positions, when this store keeps them. */
    private readonly telemetry: TelemetryEffects | undefined,
  ) {
    this.records = open('event-list-records');
    this.lists = { entries: open('event-lists'), records: this.records };
    this.track = open('track');
  }

  /**
   * Inside the index's write transaction: records `changes` in order. Returns the latest positions
   * it stored, to be handed to `committed` once the transaction is.
   */
  apply(changes: Iterable<EventChange>, now = Date.now()): Fix[] {
    const fixes: Fix[] = [];
    let any = false;
    for (const c of changes) {
      any = true;
      const raw = this.records.get(prefixOf(c.tenant, c.kind, c.key));
      const prev = raw === undefined ? undefined : (JSON.parse(raw) as EventListRecord);
      if (c.op === 'delete') {
        if (prev?.track !== undefined) void this.track.remove(prev.track);
        if (prev !== undefined) relist(this.lists, c.tenant, c.kind, c.key, undefined, prev);
        this.telemetry?.seq.append(c.tenant, { at: now, op: 'delete', kind: c.kind, key: c.key, rank: 0 });
        continue;
      }
      const track = c.fix === undefined ? undefined : trackKey(c.tenant, c.fix, c.key);
      if (prev?.track !== undefined && prev.track !== track) void this.track.remove(prev.track);
      if (track !== undefined) {
        const f = c.fix!;
        const value: TrackValue = [c.rank, f.lat, f.lon, f.speedKmh, f.heading];
        void this.track.put(track, JSON.stringify(value));
        if (this.telemetry) fixes.push({ tenant: c.tenant, eventKey: c.key, ...f });
      }
      const next: EventListRecord = { at: c.at, ranks: { ...prev?.ranks, [c.rank]: c.facets }, ...(track === undefined ? {} : { track }) };
      relist(this.lists, c.tenant, c.kind, c.key, next, prev, JSON.stringify(next));
      this.telemetry?.seq.append(c.tenant, { at: now, op: 'put', kind: c.kind, key: c.key, rank: c.rank });
    }
    if (!any || this.telemetry === undefined) return [];
    this.telemetry.seq.save();
    return fixes.length === 0 ? [] : this.telemetry.positions.offer(fixes);
  }

  /** After the commit of `apply`'s transaction. */
  committed(stored: readonly Fix[]): void {
    if (stored.length > 0) this.telemetry?.positions.committed(stored);
  }

  list(scan: ListScan): ListPosition[] {
    return readList(this.lists.entries, scan);
  }

  /**
   * The entries of the vehicle's track in [from, to), after `after`, at most `limit`: read
   * TRACK_CHUNK at a time, so that a day of points at one a second is never held at once.
   */
  *trackEntries(scan: {
    tenant: string;
    vehicle: string;
    from: number;
    to: number;
    after?: { time: number; key: string };
    limit?: number;
  }): Generator<TrackEntry> {
    const base = trackBase(scan.tenant, scan.vehicle);
    let start = `${base}${pad15(scan.from)}${SEP}`;
    let exclusive = false;
    if (scan.after !== undefined) {
      const after = `${base}${pad15(scan.after.time)}${SEP}${scan.after.key}`;
      if (after >= start) {
        start = after;
        exclusive = true;
      }
    }
    const end = `${base}${pad15(scan.to)}${SEP}`;
    let left = scan.limit ?? Infinity;
    while (left > 0 && start < end) {
      const chunk: TrackEntry[] = [];
      let last: string | undefined;
      for (const { key, value } of this.track.getRange({ start, end, limit: Math.min(TRACK_CHUNK, left) + 1 })) {
        if (exclusive && key === start) continue;
        if (chunk.length >= Math.min(TRACK_CHUNK, left)) break;
        last = key;
        const rest = key.slice(base.length);
        const [rank, lat, lon, speedKmh, heading] = JSON.parse(value) as TrackValue;
        chunk.push({ time: Number(rest.slice(0, 15)), key: rest.slice(16), rank, lat, lon, speedKmh, heading });
      }
      for (const e of chunk) yield e;
      if (last === undefined || chunk.length < Math.min(TRACK_CHUNK, left)) return;
      left -= chunk.length;
      start = last;
      exclusive = true;
    }
  }
}
