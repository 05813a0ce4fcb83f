/**
 * What the event log keeps besides its index, written in the index's own LMDB transaction (the one
 * that moves its checkpoint), so that all of it agrees with the log after any stop, `kill -9`
 * included: a replay from the checkpoint (recovery.ts) writes it again for the records it replays.
 *
 * Lists and tracks. An event is listed at its event time (event-facts.ts `eventTimeMs`:
 * `creationDate`, else `lastModified`, else when it was accepted, which the record of such a put
 * keeps for the replay at start: record.ts, operation 3), and only its latest put counts: a later put
 * with another time or vehicle moves it, a delete removes it. Event time rather than the time of
 * the change, unlike the entity store's lists (whose events, update and association events, stay
 * at the time of their unit): so one entry serves both a vehicle's list and its track, which is in
 * event time order. Every LMDB operation costs a µs or more of CPU (its commit included) and ingest
 * makes thousands a second, so an event gets as few as can be, with string keys that LMDB compares
 * with memcmp (`keyCodecOf`) and small binary values (no JSON, nothing to format or parse but the
 * numbers):
 *
 * - `event-time`: `tenant|<time as 15 digits>|<eventKey>` -> its rank (one byte). The list of all
 *   the tenant's events (facet `''`).
 * - `event-vehicle`: `tenant|<vehicle>|<time as 15 digits>|<eventKey>` -> rank, event type code,
 *   lat, lon, speedKmh, heading (`vehicleValue`), for an event linked to a vehicle. The list of the
 *   vehicle's events (facet `vehicle=`), and its track: the same range, keeping only the location
 *   events with a position (event-facts.ts `trackFix`), read without parsing any document.
 * - `event-records`: `tenant|<eventKey>` -> where its entries are: the time listed at and the
 *   vehicle (`recordValue`), to find them again when the event is put again or deleted. A put
 *   writes it where there is none without reading first (new events are most puts), and reads it
 *   only when one was there.
 *
 * A list by any other facet (`eventType=`, `lifecycle=`, `externalId=`) is answered with the list
 * of all the tenant's events: the query checks every filter on the document it reads and bounds
 * its scan (services/query/src/find.ts). An index of each would cost an LMDB write or more an event
 * at ingest, for lists seldom asked for. An event without a vehicle has its `event-time` entry only.
 *
 * When the event store keeps the telemetry effects (`telemetry`: beside the embedded entity store),
 * also a feed entry for every put and delete (feed.ts: no document, the log has it; each tenant's
 * of one transaction stored together, as one block: one LMDB write a transaction, not one an event)
 * and the vehicles' latest positions (positions.ts: the newest point of each vehicle among the
 * changes of a transaction, written only when newer than the stored one: a read and at most a write
 * a vehicle, not an event). A delete leaves the latest position as it is: it is where the vehicle
 * was last seen, and the events before it are not looked at again.
 *
 * The document is parsed once, when the write is encoded (or the record replayed), unless its value
 * is at hand (a bulk write's events come as text only); only the few facts these need are kept
 * (`EventChange`) until the index commit. (Picking the few members out of the text without a whole
 * JSON.parse was tried: a scanner in JavaScript took longer than the parse.)
 */
import type { Database, RootDatabase } from 'lmdb';
import { eventPosition, eventTimeMs, linkedId, storageKey, trackFix, type ListPosition, type ListScan } from '@otm/core';
import type { KindSegment } from '@otm/model';
import type { FeedSeq } from '../feed.js';
import { SEP } from '../keys.js';
import { pad15, readEntries } from '../lists.js';
import type { Fix, LmdbPositions } from '../positions.js';

/** What the index commit records of one put of the log. */
export interface EventPut {
  readonly op: 'put';
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  readonly rank: number;
  /** Event time (ms): where the event is listed. */
  readonly time: number;
  /** The vehicle's storage key; '' when the event is linked to none. */
  readonly vehicle: string;
  /** The event type's code in `event-vehicle` values (TYPE_CODES; LITERAL: `type` itself, NO_TYPE: none). */
  readonly code: number;
  readonly type: string | undefined;
  readonly lat: number | null;
  readonly lon: number | null;
  readonly speedKmh: number | null;
  readonly heading: number | null;
  /** Whether it is a point of its vehicle's track (`trackFix`): then also a latest position. */
  readonly located: boolean;
}

/** What the index commit records of one put or delete of the log. */
export type EventChange = EventPut | { readonly op: 'delete'; readonly tenant: string; readonly kind: KindSegment; readonly key: string };

type Doc = Readonly<Record<string, unknown>>;
const EMPTY: Doc = {};

/** The document's value; a text that is not a JSON object counts as an empty one (listed, no vehicle). */
function valueOf(text: string): Doc {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Doc) : EMPTY;
  } catch {
    return EMPTY;
  }
}

/** Codes of the telemetry event types in `event-vehicle` values. Stored: never change one. */
const TYPE_CODES: ReadonlyMap<string, number> = new Map([
  ['locationUpdateEvent', 1],
  ['sensorUpdateEvent', 2],
  ['emissionEvent', 3],
  ['fuelConsumedEvent', 4],
  ['weighEvent', 5],
  ['startEngineEvent', 6],
  ['stopEngineEvent', 7],
  ['startMovingEvent', 8],
  ['stopMovingEvent', 9],
  ['startWaitingEvent', 10],
]);
const TYPES_BY_CODE: ReadonlyMap<number, string> = new Map([...TYPE_CODES].map(([t, c]) => [c, t]));
const LOCATION = TYPE_CODES.get('locationUpdateEvent')!;
/** No event type (none, or not a string). */
const NO_TYPE = 0;
/** Another event type: its UTF-8 follows the fixed part of the value. */
const LITERAL = 255;

/**
 * The change a put records, from its value (parsed from `text` when not given). Never throws: a
 * record the log holds must not stop the replay at the next start, so a document these cannot be
 * read from is listed at `at`, without vehicle. Only events are listed (the event store holds no
 * other kind; a put of another kind records its feed entry only).
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
  let time = at;
  let vehicle = '';
  let code = NO_TYPE;
  let type: string | undefined;
  let lat: number | null = null;
  let lon: number | null = null;
  let speedKmh: number | null = null;
  let heading: number | null = null;
  let located = false;
  if (kind === 'events') {
    try {
      const doc = value ?? valueOf(text());
      if (typeof doc.eventType === 'string' && doc.eventType !== '') {
        type = doc.eventType;
        code = TYPE_CODES.get(type) ?? LITERAL;
      }
      // A track point by trackFix itself, so that the track is what event-facts.ts says it is.
      const fix = code === LOCATION ? trackFix(doc, at, storageKey) : undefined;
      if (fix !== undefined) {
        ({ time, vehicle, lat, lon, speedKmh, heading } = fix);
        located = true;
      } else {
        time = eventTimeMs(doc, at);
        const id = linkedId(doc, 'vehicle');
        if (id !== '') {
          vehicle = storageKey(id);
          const p = eventPosition(doc.geoReference);
          ({ lat, lon, speedKmh } = p);
          heading = p.heading.value;
        }
      }
    } catch {
      /* listed as far as it got */
    }
  }
  return { op: 'put', tenant, kind, key, rank, time, vehicle, code, type, lat, lon, speedKmh, heading, located };
}

/** One entry of `event-vehicle`, as read. */
export interface VehicleEntry {
  readonly time: number;
  readonly key: string;
  readonly rank: number;
  /** The event type; undefined without one. */
  readonly eventType: string | undefined;
  readonly lat: number | null;
  readonly lon: number | null;
  readonly speedKmh: number | null;
  readonly heading: number | null;
}

/** One entry of a track, as read: a location event with a position. */
export interface TrackEntry extends VehicleEntry {
  readonly lat: number;
  readonly lon: number;
}

/**
 * An `event-vehicle` value: u8 rank, u8 type code, then lat, lon, speedKmh, heading as float64 (LE;
 * NaN: none), then for a LITERAL type its UTF-8.
 */
const FIXED = 34;
/**
 * Where values are made before a put: LMDB copies a value inside the put when a write transaction
 * is open (lmdb-js writes at once then), which is the only place these are put, so one buffer
 * serves every put, with nothing allocated for it.
 */
const scratch = Buffer.allocUnsafeSlow(FIXED);
const orNaN = (n: number | null) => (n === null ? NaN : n);
const orNull = (n: number) => (Number.isNaN(n) ? null : n);

function vehicleValue(c: EventPut): Buffer {
  const b = c.code === LITERAL ? Buffer.allocUnsafe(FIXED + Buffer.byteLength(c.type!)) : scratch;
  b[0] = c.rank;
  b[1] = c.code;
  b.writeDoubleLE(orNaN(c.lat), 2);
  b.writeDoubleLE(orNaN(c.lon), 10);
  b.writeDoubleLE(orNaN(c.speedKmh), 18);
  b.writeDoubleLE(orNaN(c.heading), 26);
  if (b !== scratch) b.write(c.type!, FIXED, 'utf8');
  return b;
}

/** An `event-vehicle` entry from its key (after its base `tenant|vehicle|`) and value. */
export function decodeVehicleEntry(key: string, baseLength: number, value: Buffer): VehicleEntry {
  const code = value[1]!;
  return {
    time: Number(key.slice(baseLength, baseLength + 15)),
    key: key.slice(baseLength + 16),
    rank: value[0]!,
    eventType: code === LITERAL ? value.toString('utf8', FIXED) : TYPES_BY_CODE.get(code),
    lat: orNull(value.readDoubleLE(2)),
    lon: orNull(value.readDoubleLE(10)),
    speedKmh: orNull(value.readDoubleLE(18)),
    heading: orNull(value.readDoubleLE(26)),
  };
}

/** Whether an `event-vehicle` value is a track point's: a location event with a position. */
const isTrackPoint = (value: Buffer): boolean =>
  value[1] === LOCATION && !Number.isNaN(value.readDoubleLE(2)) && !Number.isNaN(value.readDoubleLE(10));

/** `event-time` values: the rank, one byte. */
const RANKS = Array.from({ length: 6 }, (_, r) => Buffer.from([r]));

/** An `event-records` value: the time listed at (float64 LE), then the vehicle's key (UTF-8; none: nothing). */
function recordValue(time: number, vehicle: string): Buffer {
  const b = vehicle.length <= 40 ? recordScratch : Buffer.allocUnsafe(8 + Buffer.byteLength(vehicle));
  b.writeDoubleLE(time, 0);
  const end = 8 + b.write(vehicle, 8, 'utf8');
  return b === recordScratch ? (recordViews[end] ??= b.subarray(0, end)) : b;
}
/** Up to 40 characters of UTF-8 (a storage key has 36). */
const recordScratch = Buffer.allocUnsafeSlow(8 + 3 * 40);
/** Views of `recordScratch` by length, made once: values are read through them, nothing allocated a put. */
const recordViews: Buffer[] = [];

const NO_OVERWRITE = { noOverwrite: true } as const;

/** lmdb-js's key encoding (ordered-binary) of the strings of a database, as its database objects carry it. */
export interface KeyCodec {
  writeKey(key: unknown, target: Uint8Array, position: number): number;
  readKey(buffer: Uint8Array, start: number, end: number): unknown;
}

/** Node's Buffer writes UTF-8 natively (as ordered-binary does for long strings). */
type Utf8Target = Uint8Array & { utf8Write?: (s: string, offset: number) => number };

/**
 * The key encoding to open the event log's databases with: the bytes of lmdb-js's own
 * (ordered-binary, as ever), given as the database's `keyEncoder`, for two reasons.
 *
 * - LMDB's comparator. lmdb-js gives a database whose keys it encodes itself a comparator of its
 *   own that compares four bytes at a time; one opened with a key encoder keeps LMDB's, a memcmp.
 *   These keys are long and share long prefixes (tenant, vehicle, the time's digits, ids of one
 *   sender), so a put's descent through the B-tree was mostly key comparisons. Both comparators
 *   order the bytes of strings alike (bytewise, a prefix first: ordered-binary writes no 0 byte of
 *   its own into a string), so databases written before are read and written as they are.
 * - A string of fewer than 64 characters is written by ordered-binary a character at a time in
 *   JavaScript (to escape those below 5 and encode the others). These keys are ASCII without such
 *   characters: written natively, then looked at; any other string is left to ordered-binary.
 *
 * Together they took about a quarter of the CPU of an event off the event store (bench/diag/bulk/
 * README.md). Undefined when the root does not carry lmdb-js's functions: the databases are then
 * opened as before. A handle of these databases opened without it (a tool, a test) gives them
 * lmdb-js's comparator back until the environment is closed: slower, in the same order.
 */
export function keyCodecOf(root: RootDatabase): KeyCodec | undefined {
  const { writeKey, readKey } = root as unknown as Partial<KeyCodec>;
  if (typeof writeKey !== 'function' || typeof readKey !== 'function') return undefined;
  return {
    writeKey(key: unknown, target: Utf8Target, position: number): number {
      // ordered-binary escapes a first character below 28, and writes strings of 64 and more natively.
      if (typeof key !== 'string' || key.length >= 64 || !(key.charCodeAt(0) >= 28) || target.utf8Write === undefined) {
        return writeKey(key, target, position);
      }
      const end = position + target.utf8Write(key, position);
      // More bytes than characters: not ASCII. A byte below 5: a character ordered-binary escapes.
      if (end - position !== key.length) return writeKey(key, target, position);
      for (let i = position; i < end; i++) if (target[i]! < 5) return writeKey(key, target, position);
      return end;
    },
    readKey,
  };
}

/** Options of a database of the event log: binary values, string keys (`keyCodecOf`). */
export const binaryDb = (name: string, keys: KeyCodec | undefined) =>
  keys === undefined ? { name, encoding: 'binary' as const } : { name, encoding: 'binary' as const, keyEncoder: keys };

/** `event-vehicle` entries read from LMDB in one go (a fresh read transaction each; none is held between). */
const TRACK_CHUNK = 512;

type Bin = Database<Buffer, string>;

/** One tenant's changes in an index transaction, and the newest track point of each of its vehicles among them. */
interface TenantChanges {
  readonly changes: EventChange[];
  newest: Map<string, EventPut> | undefined;
}

export interface TelemetryEffects {
  readonly seq: FeedSeq;
  readonly positions: LmdbPositions;
}

export class EventEffects {
  private readonly byTime: Bin;
  private readonly byVehicle: Bin;
  private readonly records: Bin;

  constructor(
    root: RootDatabase,
    /** Feed entries and latest positions, when this store keeps them. */
    private readonly telemetry: TelemetryEffects | undefined,
  ) {
    const keys = keyCodecOf(root);
    const open = (name: string) => root.openDB<Buffer, string>(binaryDb(name, keys));
    this.byTime = open('event-time');
    this.byVehicle = open('event-vehicle');
    this.records = open('event-records');
  }

  /**
   * Inside the index's write transaction: records `changes` in order. Returns the latest positions
   * it stored, to be handed to `committed` once the transaction is.
   */
  apply(changes: Iterable<EventChange>, now = Date.now()): Fix[] {
    const seq = this.telemetry?.seq;
    /**
     * Each tenant's changes, in order, for its feed block (feed.ts: one LMDB write, not one a
     * change), and the newest track point of each of its vehicles among them.
     */
    let tenants: Map<string, TenantChanges> | undefined;
    let tenant: string | undefined;
    let of: TenantChanges | undefined;
    for (const c of changes) {
      if (c.kind === 'events') this.place(c);
      if (seq === undefined) continue;
      if (c.tenant !== tenant) {
        tenants ??= new Map();
        tenant = c.tenant;
        of = tenants.get(tenant);
        if (of === undefined) tenants.set(tenant, (of = { changes: [], newest: undefined }));
      }
      of!.changes.push(c);
      if (c.op === 'delete' || !c.located) continue;
      const newest = (of!.newest ??= new Map<string, EventPut>());
      const had = newest.get(c.vehicle);
      // Not older, as positions.ts `isNewerFix`: a later version of the same event replaces the earlier.
      if (had === undefined || c.time > had.time || (c.time === had.time && c.key >= had.key)) newest.set(c.vehicle, c);
    }
    if (seq === undefined || tenants === undefined) return [];
    const fixes: Fix[] = [];
    for (const [t, { changes: list, newest }] of tenants) {
      seq.appendChanges(t, now, list);
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
    if (fixes.length === 0) return [];
    return this.telemetry!.positions.offer(fixes);
  }

  /**
   * Moves the event's entries to where `c` puts them (a delete: removes them), from where its record
   * says they are. A record that stays the same is not written again, nor are entries that stay
   * removed; their values (the rank and position of the latest put) are.
   */
  private place(c: EventChange): void {
    const recordKey = `${c.tenant}${SEP}${c.key}`;
    if (c.op === 'delete') {
      const prev = this.records.getBinaryFast(recordKey);
      if (prev === undefined) return;
      this.unplace(c.tenant, c.key, prev);
      void this.records.remove(recordKey);
      return;
    }
    const time = pad15(c.time);
    const record = recordValue(Number(time), c.vehicle);
    // Most puts are of new events: their record is written where there is none, without a read
    // first (lmdb-js's putSync says whether it wrote; its typings say void). Else it is read.
    if (!(this.records.putSync(recordKey, record, NO_OVERWRITE) as unknown as boolean)) {
      // Read at once: the buffer is LMDB's, valid until the next read.
      const prev = this.records.getBinaryFast(recordKey)!;
      if (!prev.equals(record)) {
        this.unplace(c.tenant, c.key, prev, time);
        void this.records.put(recordKey, record);
      }
    }
    void this.byTime.put(`${c.tenant}${SEP}${time}${SEP}${c.key}`, RANKS[c.rank] ?? Buffer.from([c.rank]));
    if (c.vehicle !== '') void this.byVehicle.put(`${c.tenant}${SEP}${c.vehicle}${SEP}${time}${SEP}${c.key}`, vehicleValue(c));
  }

  /** Removes the entries the record `prev` names, but for the `event-time` entry at `keep` (15 digits), which is written again. */
  private unplace(tenant: string, key: string, prev: Buffer, keep?: string): void {
    const was = pad15(prev.readDoubleLE(0));
    const vehicle = prev.toString('utf8', 8);
    if (was !== keep) void this.byTime.remove(`${tenant}${SEP}${was}${SEP}${key}`);
    if (vehicle !== '') void this.byVehicle.remove(`${tenant}${SEP}${vehicle}${SEP}${was}${SEP}${key}`);
  }

  /** After the commit of `apply`'s transaction. */
  committed(stored: readonly Fix[]): void {
    if (stored.length > 0) this.telemetry?.positions.committed(stored);
  }

  /**
   * A page of a list of the events: by vehicle from `event-vehicle`, else from `event-time` (for
   * any other facet too: see the module comment). Other kinds: none.
   */
  list(scan: ListScan): ListPosition[] {
    if (scan.kind !== 'events') return [];
    if (scan.facet.startsWith('vehicle=')) {
      const vehicle = scan.facet.slice('vehicle='.length);
      // Vehicles are storage keys (UUIDs): a value with a separator (or hashed) is none of them.
      if (vehicle === '' || vehicle.includes(SEP)) return [];
      return readEntries(this.byVehicle, `${scan.tenant}${SEP}${vehicle}${SEP}`, scan);
    }
    return readEntries(this.byTime, `${scan.tenant}${SEP}`, scan);
  }

  /**
   * The points of the vehicle's track in [from, to), after `after`, at most `limit`: its
   * `event-vehicle` entries of location events with a position, read TRACK_CHUNK at a time, so that
   * a day of points at one a second is never held at once.
   */
  *trackEntries(scan: {
    tenant: string;
    vehicle: string;
    from: number;
    to: number;
    after?: { time: number; key: string };
    limit?: number;
  }): Generator<TrackEntry> {
    if (scan.vehicle.includes(SEP)) return;
    const base = `${scan.tenant}${SEP}${scan.vehicle}${SEP}`;
    let start = `${base}${pad15(scan.from)}${SEP}`;
    let skip: string | undefined;
    if (scan.after !== undefined) {
      const after = `${base}${pad15(scan.after.time)}${SEP}${scan.after.key}`;
      if (after >= start) start = skip = after;
    }
    const end = `${base}${pad15(scan.to)}${SEP}`;
    let left = scan.limit ?? Infinity;
    while (left > 0 && start < end) {
      const chunk: TrackEntry[] = [];
      let last: string | undefined;
      let read = 0;
      for (const { key, value } of this.byVehicle.getRange({ start, end, limit: TRACK_CHUNK })) {
        read++;
        last = key;
        if (key === skip || !isTrackPoint(value)) continue;
        chunk.push(decodeVehicleEntry(key, base.length, value) as TrackEntry);
        if (chunk.length >= left) break;
      }
      for (const e of chunk) yield e;
      left -= chunk.length;
      if (last === undefined || read < TRACK_CHUNK) return;
      start = skip = last;
    }
  }
}
