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
 * event time order. Every LMDB operation costs CPU (its commit included) and ingest makes thousands
 * a second, so an event gets as few as can be, with binary keys that LMDB compares
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
 * the same transaction also holds the feed entries and latest positions of its changes
 * (telemetry-effects.ts). What a change records (`EventChange`), and the `event-vehicle` value, are
 * event-change.ts.
 */
import type { Database, RootDatabase } from 'lmdb';
import type { ListPosition, ListScan, TrackScan } from '@otm/core';
import { SEP } from '../keys.js';
import type { Fix } from '../positions.js';
import { decodeVehicleEntry, isTrackPoint, vehicleValue, type EventChange, type TrackEntry } from './event-change.js';
import { CommitTelemetry, committedTelemetry, type TelemetryEffects } from './telemetry-effects.js';
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
export {
  decodeFix,
  decodeVehicleEntry,
  putChange,
  type EventChange,
  type EventPut,
  type TrackEntry,
  type VehicleEntry,
} from './event-change.js';
export type { TelemetryEffects } from './telemetry-effects.js';

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
    const effects = telemetry && this.telemetry !== undefined ? new CommitTelemetry(this.telemetry) : undefined;
    for (const c of changes) {
      if (c.kind === 'events') this.place(c);
      effects?.add(c);
    }
    return effects === undefined ? [] : effects.write(now);
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
    committedTelemetry(this.telemetry, stored);
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
   * The points of the vehicle's track in [from, to), after `after` (oldest first only), at most
   * `limit`, oldest or newest first: its `event-vehicle` entries of location events with a
   * position, read TRACK_CHUNK at a time, so that a day of points at one a second is never held at
   * once.
   */
  *trackEntries(scan: TrackEntryScan): Generator<TrackEntry> {
    for (const chunk of this.trackChunks(scan, (key, baseLength, value) => decodeVehicleEntry(key, baseLength, value) as TrackEntry))
      yield* chunk;
  }

  /** The same points as `trackEntries`, each chunk as `decode` makes its entries. */
  *trackChunks<T>(scan: TrackEntryScan, decode: (key: Buffer, baseLength: number, value: Buffer) => T): Generator<T[]> {
    if (scan.vehicle.includes(SEP)) return;
    const base = vehicleBase(scan.tenant, scan.vehicle);
    const down = scan.descending === true;
    let start = boundOf(base, down ? scan.to : scan.from);
    const end = boundOf(base, down ? scan.from : scan.to);
    let skip: Buffer | undefined;
    if (!down && scan.after !== undefined) {
      const after = boundOf(base, scan.after.time, scan.after.key);
      if (Buffer.compare(after, start) >= 0) start = skip = after;
    }
    let left = scan.limit ?? Infinity;
    while (left > 0 && Buffer.compare(start, end) * (down ? -1 : 1) < 0) {
      const chunk: T[] = [];
      let last: Buffer | undefined;
      let read = 0;
      for (const { key, value } of this.byVehicle.getRange({ start, end, limit: TRACK_CHUNK, reverse: down })) {
        read++;
        last = key;
        if ((skip !== undefined && Buffer.compare(key, skip) === 0) || !isTrackPoint(value)) continue;
        chunk.push(decode(key, base.length, value));
        if (chunk.length >= left) break;
      }
      if (chunk.length > 0) yield chunk;
      left -= chunk.length;
      if (last === undefined || read < TRACK_CHUNK) return;
      start = skip = last;
    }
  }
}

/** A window of a vehicle's track entries (`trackEntries`, `trackChunks`): oldest first, or newest first. */
export type TrackEntryScan = TrackScan & { readonly descending?: boolean };
