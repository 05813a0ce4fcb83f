/**
 * What the event log's index commit records of one put or delete (`EventChange`), made from the
 * event's facts once, when the write is encoded or the record replayed, and the `event-vehicle`
 * value those facts become (effects.ts keeps them in its lists; a track is read from these values
 * without parsing any document).
 *
 * The facts (core's `eventFacts`) come from the document's value when at hand (a single PUT's),
 * else from the facts a bulk request's checking thread read beside its checks (its events come as
 * text: parsing them again here would cost the event loop a share of the event store's time), else
 * from its text, parsed; only those facts are kept until the index commit. (Picking the few
 * members out of the text without a whole JSON.parse was tried: a scanner in JavaScript took
 * longer than the parse.)
 */
import { eventFacts, type EventFacts, type LogPosition, type TrackFixPoint } from '@otm/core';
import type { KindSegment } from '@otm/model';
import { TIME_BYTES, readKeyPart, readTime } from './index-keys.js';

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
  // Each member named: a spread of `f` costs more (docs/PERFORMANCE.md, object spreads).
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

/** The time and position of a track point's `event-vehicle` entry (`isTrackPoint`), without its key or type. */
export function decodeFix(key: Uint8Array, baseLength: number, value: Buffer): TrackFixPoint {
  return {
    time: readTime(key, baseLength),
    lat: value.readDoubleLE(2),
    lon: value.readDoubleLE(10),
    speedKmh: orNull(value.readDoubleLE(18)),
    heading: orNull(value.readDoubleLE(26)),
  };
}

export function vehicleValue(c: EventPut): Buffer {
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
export const isTrackPoint = (value: Buffer): boolean =>
  value[1] === LOCATION && !Number.isNaN(value.readDoubleLE(2)) && !Number.isNaN(value.readDoubleLE(10));
