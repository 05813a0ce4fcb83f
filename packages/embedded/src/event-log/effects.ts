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
 * makes thousands a second, so an event gets as few as can be, with binary keys that LMDB compares
 * with memcmp and small binary values (no JSON, nothing to format or parse but the numbers). The
 * keys are made of parts (index-keys.ts: the tenant, then 16 bytes a UUID and 7 a time, so that an
 * event costs about half the bytes of text keys), written below as `<tenant>` and so on:
 *
 * - `event-time`: `<tenant><time><eventKey>` -> its rank (one byte). The list of all the tenant's
 *   events (facet `''`).
 * - `event-vehicle`: `<tenant><vehicle><time><eventKey>` -> rank, event type code, lat, lon,
 *   speedKmh, heading (`vehicleValue`), for an event linked to a vehicle. The list of the vehicle's
 *   events (facet `vehicle=`), and its track: the same range, keeping only the location events with
 *   a position (event-facts.ts `trackFix`), read without parsing any document.
 * - `event-records`: `<tenant><eventKey>` -> where its entries are: the time listed at and the
 *   vehicle, as in the keys (`<time><vehicle>`), to find them again when the event is put again or
 *   deleted. A put writes it where there is none without reading first (new events are most puts),
 *   and reads it only when one was there.
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
 * The facts these need (core's `eventFacts`) are read once, when the write is encoded (or the record
 * replayed): from the document's value when at hand (a single PUT's), else from the facts a bulk
 * request's checking thread read beside its checks (its events come as text, and parsing them
 * again here took about a third of the event store's time on the event loop), else from its text,
 * parsed; only those facts are kept (`EventChange`) until the index commit. (Picking the few
 * members out of the text without a whole JSON.parse was tried: a scanner in JavaScript took
 * longer than the parse.)
 */
import type { Database, RootDatabase } from 'lmdb';
import { eventFacts, type EventFacts, type ListPosition, type LogPosition, type ListScan } from '@otm/core';
import type { KindSegment } from '@otm/model';
import type { FeedSeq } from '../feed.js';
import { SEP } from '../keys.js';
import type { Fix, LmdbPositions } from '../positions.js';
import {
  KeyScratch,
  TIME_BYTES,
  binaryKeysDb,
  copyBytes,
  readKeyPart,
  readTime,
  tenantPart,
  writeKeyPart,
  writeTime,
  writeVehiclePart,
} from './index-keys.js';

export { binaryDb, keyCodecOf, type KeyCodec } from './index-keys.js';

/** What the index commit records of one put of the log: its event's facts (none for another kind), and where it goes. */
export interface EventPut extends EventFacts {
  readonly op: 'put';
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  readonly rank: number;
  /** Event time (ms): where the event is listed; when it was accepted for an event without one. */
  readonly time: number;
  /** The event type's code in `event-vehicle` values (TYPE_CODES; LITERAL: `type` itself, NO_TYPE: none). */
  readonly code: number;
  /** Where the log holds its document, once its record is placed: its feed entry keeps it (feed.ts). */
  where: LogPosition | undefined;
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

/** The facts of a put that is not an event, or whose document cannot be read. */
const NO_FACTS: EventFacts = {
  time: Number.NaN,
  vehicle: '',
  type: undefined,
  lat: null,
  lon: null,
  speedKmh: null,
  heading: null,
  located: false,
};

/**
 * The change a put records, from its facts when read already (a bulk request's: core's
 * `eventFacts`, read by its checking thread), else from its value (parsed from `text` when not
 * given). Never throws: a record the log holds must not stop the replay at the next start, so a
 * document these cannot be read from is listed at `at`, without vehicle. Only events are listed
 * (the event store holds no other kind; a put of another kind records its feed entry only).
 */
export function putChange(
  tenant: string,
  kind: KindSegment,
  key: string,
  rank: number,
  at: number,
  value: Doc | undefined,
  text: () => string,
  known?: EventFacts,
): EventChange {
  let f = NO_FACTS;
  if (kind === 'events') {
    try {
      f = known ?? eventFacts(value ?? valueOf(text()));
    } catch {
      /* listed at `at`, without vehicle */
    }
  }
  const { type } = f;
  // Each member named: a spread of `f` costs about a µs more an event.
  return {
    op: 'put',
    tenant,
    kind,
    key,
    rank,
    time: Number.isNaN(f.time) ? at : f.time,
    vehicle: f.vehicle,
    code: type === undefined ? NO_TYPE : (TYPE_CODES.get(type) ?? LITERAL),
    type,
    lat: f.lat,
    lon: f.lon,
    speedKmh: f.speedKmh,
    heading: f.heading,
    located: f.located,
    where: undefined,
  };
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

/** An `event-vehicle` entry from its key (after its base, `vehicleBase`) and value. */
export function decodeVehicleEntry(key: Uint8Array, baseLength: number, value: Buffer): VehicleEntry {
  const code = value[1]!;
  return {
    time: readTime(key, baseLength),
    key: readKeyPart(key, baseLength + TIME_BYTES, key.length),
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

/**
 * An `event-records` value: the time listed at (7 bytes, as in the keys), then the vehicle's 16
 * bytes (none: nothing): the parts of its list keys, copied into them as they are.
 */
const recordScratch = new KeyScratch();
/** Bytes of an `event-records` value with a vehicle. */
const RECORD_WITH_VEHICLE = TIME_BYTES + 16;

/** Where each kind of list key is made (`KeyScratch`): the record's key lives on while the others are made. */
const RECORD_KEY = new KeyScratch();
const TIME_KEY = new KeyScratch();
const VEHICLE_KEY = new KeyScratch();
/** A key's event key part, made once a change and copied into each of its keys. */
const KEY_PART = new KeyScratch();

const NO_OVERWRITE = { noOverwrite: true } as const;

/**
 * Whether `value` holds the bytes of `b`. A value read with `getBinaryFast` is lmdb-js's buffer,
 * larger than the value, its `length` set to the value's: Buffer's own `equals` (and `copy`,
 * `compare`) look at all of it. Hence byte loops (`copyBytes` too).
 */
function sameBytes(value: Buffer, b: Buffer): boolean {
  if (value.length !== b.length) return false;
  for (let i = 0; i < b.length; i++) if (value[i] !== b[i]) return false;
  return true;
}

/** The first bytes of every `event-vehicle` key of the tenant's vehicle: its list, and its track. */
export function vehicleBase(tenant: string, vehicle: string): Buffer {
  const t = tenantPart(tenant);
  const b = Buffer.allocUnsafe(t.length + 16);
  t.copy(b, 0);
  writeVehiclePart(vehicle, b, t.length);
  return b;
}

/** `base`, then the time, then the event key when given: a bound of a range of a list. */
function boundOf(base: Buffer, time: number, key?: string): Buffer {
  const b = Buffer.allocUnsafe(base.length + TIME_BYTES + (key === undefined ? 0 : key.length * 3 + 4));
  base.copy(b, 0);
  let end = writeTime(time, b, base.length);
  if (key !== undefined) end = writeKeyPart(key, b, end);
  return b.subarray(0, end);
}

/** `base` and one byte of 255: after every key that starts with `base` (a time's first byte is below 4). */
const afterAll = (base: Buffer): Buffer => Buffer.concat([base, Buffer.from([255])]);

/**
 * One page of the entries `base<time><key>` of `db` (one tenant's `event-time`, or one vehicle's
 * `event-vehicle`), with `scan`'s keyset bounds, as `readEntries` (lists.ts) reads the entity
 * store's lists: strictly after `after`, at or after `since`, before `before`, at most `limit`.
 */
function readEntries(db: Bin, base: Buffer, scan: Omit<ListScan, 'tenant' | 'kind' | 'facet'>): ListPosition[] {
  if (scan.limit <= 0) return [];
  let start = base;
  let skip: Buffer | undefined;
  if (scan.after !== undefined) start = skip = boundOf(base, scan.after.at, scan.after.key);
  if (scan.since !== undefined) {
    const since = boundOf(base, scan.since);
    if (Buffer.compare(since, start) > 0) {
      start = since;
      skip = undefined;
    }
  }
  const end = scan.before === undefined ? afterAll(base) : boundOf(base, scan.before);
  if (Buffer.compare(start, end) >= 0) return [];
  const out: ListPosition[] = [];
  for (const k of db.getKeys({ start, end, limit: scan.limit + 1 })) {
    if (skip !== undefined && Buffer.compare(k, skip) === 0) continue;
    out.push({ at: readTime(k, base.length), key: readKeyPart(k, base.length + TIME_BYTES, k.length) });
    if (out.length >= scan.limit) break;
  }
  return out;
}

/** `event-vehicle` entries read from LMDB in one go (a fresh read transaction each; none is held between). */
const TRACK_CHUNK = 512;

/** A database of the lists: binary keys (index-keys.ts), binary values. */
type Bin = Database<Buffer, Buffer>;

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
    const open = (name: string) => root.openDB<Buffer, Buffer>(binaryKeysDb(name));
    this.byTime = open('event-time');
    this.byVehicle = open('event-vehicle');
    this.records = open('event-records');
  }

  /** Inside a write transaction: removes every list entry and record (the index is rebuilt: recovery.ts). */
  clear(): void {
    for (const db of [this.byTime, this.byVehicle, this.records]) db.clearSync();
  }

  /**
   * Inside the index's write transaction: records `changes` in order. Returns the latest positions
   * it stored, to be handed to `committed` once the transaction is. With `telemetry` false, only
   * the lists: the feed entries and positions of these changes are stored already (a rebuild of the
   * index from the log: recovery.ts).
   */
  apply(changes: Iterable<EventChange>, now = Date.now(), telemetry = true): Fix[] {
    const seq = telemetry ? this.telemetry?.seq : undefined;
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
    const tenant = tenantPart(c.tenant);
    const tn = tenant.length;
    const kp = KEY_PART.buf;
    const kpEnd = writeKeyPart(c.key, kp, 0);
    const recordKey = RECORD_KEY.view(copyBytes(kp, 0, kpEnd, RECORD_KEY.buf, copyBytes(tenant, 0, tn, RECORD_KEY.buf, 0)));
    if (c.op === 'delete') {
      const prev = this.records.getBinaryFast(recordKey);
      if (prev === undefined) return;
      this.unplace(tenant, kpEnd, prev, undefined);
      void this.records.remove(recordKey);
      return;
    }
    const v = recordScratch.buf;
    writeTime(c.time, v, 0);
    const record = recordScratch.view(c.vehicle === '' ? TIME_BYTES : writeVehiclePart(c.vehicle, v, TIME_BYTES));
    // Most puts are of new events: their record is written where there is none, without a read
    // first (lmdb-js's putSync says whether it wrote; its typings say void). Else it is read.
    if (!(this.records.putSync(recordKey, record, NO_OVERWRITE) as unknown as boolean)) {
      // Read at once: the buffer is LMDB's, valid until the next read.
      const prev = this.records.getBinaryFast(recordKey)!;
      if (!sameBytes(prev, record)) {
        this.unplace(tenant, kpEnd, prev, record);
        void this.records.put(recordKey, record);
      }
    }
    // `<tenant><time><eventKey>`
    const t = TIME_KEY.buf;
    const timeKey = TIME_KEY.view(copyBytes(kp, 0, kpEnd, t, copyBytes(v, 0, TIME_BYTES, t, copyBytes(tenant, 0, tn, t, 0))));
    void this.byTime.put(timeKey, RANKS[c.rank] ?? Buffer.from([c.rank]));
    if (record.length === RECORD_WITH_VEHICLE) {
      // `<tenant><vehicle><time><eventKey>`
      const k = VEHICLE_KEY.buf;
      let at = copyBytes(v, TIME_BYTES, RECORD_WITH_VEHICLE, k, copyBytes(tenant, 0, tn, k, 0));
      at = copyBytes(kp, 0, kpEnd, k, copyBytes(v, 0, TIME_BYTES, k, at));
      void this.byVehicle.put(VEHICLE_KEY.view(at), vehicleValue(c));
    }
  }

  /**
   * Removes the entries the record `prev` names (the event key part in KEY_PART, `kpEnd` bytes),
   * but for the `event-time` entry at the time of `next` (the new record), which is written again.
   * `prev` is LMDB's buffer (valid until the next read, its `length` the value's), read first.
   */
  private unplace(tenant: Buffer, kpEnd: number, prev: Buffer, next: Buffer | undefined): void {
    const tn = tenant.length;
    const kp = KEY_PART.buf;
    const t = TIME_KEY.buf;
    const k = VEHICLE_KEY.buf;
    const vehicle = prev.length === RECORD_WITH_VEHICLE;
    copyBytes(prev, 0, TIME_BYTES, t, tn);
    if (vehicle) copyBytes(prev, 0, TIME_BYTES, k, copyBytes(prev, TIME_BYTES, RECORD_WITH_VEHICLE, k, tn));
    let moved = next === undefined;
    for (let i = 0; i < TIME_BYTES && !moved; i++) moved = t[tn + i] !== next![i];
    if (moved) {
      copyBytes(tenant, 0, tn, t, 0);
      void this.byTime.remove(TIME_KEY.view(copyBytes(kp, 0, kpEnd, t, tn + TIME_BYTES)));
    }
    if (vehicle) {
      copyBytes(tenant, 0, tn, k, 0);
      void this.byVehicle.remove(VEHICLE_KEY.view(copyBytes(kp, 0, kpEnd, k, tn + 16 + TIME_BYTES)));
    }
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
      return readEntries(this.byVehicle, vehicleBase(scan.tenant, vehicle), scan);
    }
    return readEntries(this.byTime, tenantPart(scan.tenant), scan);
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
    const base = vehicleBase(scan.tenant, scan.vehicle);
    let start = boundOf(base, scan.from);
    let skip: Buffer | undefined;
    if (scan.after !== undefined) {
      const after = boundOf(base, scan.after.time, scan.after.key);
      if (Buffer.compare(after, start) >= 0) start = skip = after;
    }
    const end = boundOf(base, scan.to);
    let left = scan.limit ?? Infinity;
    while (left > 0 && Buffer.compare(start, end) < 0) {
      const chunk: TrackEntry[] = [];
      let last: Buffer | undefined;
      let read = 0;
      for (const { key, value } of this.byVehicle.getRange({ start, end, limit: TRACK_CHUNK })) {
        read++;
        last = key;
        if ((skip !== undefined && Buffer.compare(key, skip) === 0) || !isTrackPoint(value)) continue;
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
