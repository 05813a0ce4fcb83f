/**
 * Facts read from an OTM event the same way everywhere: the entities it is linked to (inline or by
 * reference, also in its `references` array), its position, speed and heading, and its time. The
 * ClickHouse columns, tracks and latest positions are all made from these, so they agree.
 * Pure functions, no I/O.
 */
import { storageKey } from './ids.js';
import type { LatestPosition } from './ports.js';

type Obj = Readonly<Record<string, unknown>>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

/** km/h per unit of speed, by the unit's name in lower case without spaces. */
const SPEED_KMH: ReadonlyMap<string, number> = new Map([
  ['km/h', 1],
  ['kmh', 1],
  ['kph', 1],
  ['km/u', 1],
  ['m/s', 3.6],
  ['mps', 3.6],
  ['mph', 1.609344],
  ['mi/h', 1.609344],
  ['kn', 1.852],
  ['kt', 1.852],
  ['knot', 1.852],
  ['knots', 1.852],
]);

/**
 * The factors of the units met so far, by the unit as sent (undefined: unknown), so that an event
 * costs a lookup rather than a normalised copy of its unit: every location event of a fleet names
 * the same one or two. Bounded: a client sending a new unit each time only makes its own events
 * normalise theirs.
 */
const unitFactors = new Map<string, number | undefined>();
const UNIT_FACTORS_MAX = 256;

function factorOf(unit: string): number | undefined {
  const known = unitFactors.get(unit);
  if (known !== undefined || unitFactors.has(unit)) return known;
  const f = SPEED_KMH.get(unit.trim().toLowerCase().replace(/\s+/g, ''));
  if (unitFactors.size < UNIT_FACTORS_MAX) unitFactors.set(unit, f);
  return f;
}

/**
 * Speed in km/h, or undefined for an unknown unit. A speed in km/h is the value as sent; another is
 * converted and rounded to 15 significant digits (10 m/s is 36 km/h, not 36.00000000000001).
 */
export function speedKmh(value: number, unit: string): number | undefined {
  const f = factorOf(unit);
  if (f === undefined || !Number.isFinite(value)) return undefined;
  return f === 1 ? value : Number((value * f).toPrecision(15));
}

/** The id an association points at, as sent: the inline entity's `id` or the reference's `uuid`. */
function associationId(a: unknown): string {
  if (!isObj(a)) return '';
  if (a.associationType === 'inline' && isObj(a.entity)) return str(a.entity.id);
  if (a.associationType === 'reference') return str(a.uuid);
  return '';
}

function associationEntityType(a: unknown): string {
  if (!isObj(a)) return '';
  if (a.associationType === 'inline' && isObj(a.entity)) return str(a.entity.entityType);
  return str(a.entityType);
}

/**
 * The storage key (ids.ts `storageKey`) of the first association of the given entity type: the
 * member named so, else `references`. The key the entity is stored and found under, whatever form
 * its id takes (a UUID in any case, a URI that ends in one, a name); '' when the event names none.
 */
export function linkedKey(event: Obj, member: string): string {
  let id = associationId(event[member]);
  if (id === '') {
    const refs = Array.isArray(event.references) ? event.references : [];
    for (const r of refs)
      if (associationEntityType(r) === member) {
        id = associationId(r);
        break;
      }
  }
  return id === '' ? '' : storageKey(id);
}

function valueUnit(v: unknown): { value: number | null; unit: string } {
  return isObj(v) ? { value: num(v.value), unit: str(v.unit) } : { value: null, unit: '' };
}

export interface EventPosition {
  readonly lat: number | null;
  readonly lon: number | null;
  readonly speed: { readonly value: number | null; readonly unit: string };
  readonly speedKmh: number | null;
  readonly heading: { readonly value: number | null; readonly unit: string };
}

/** lat, lon, speed, heading of a geoReference (lat/lon point, first point of an array, or a GeoJSON Point feature). */
export function eventPosition(geo: unknown): EventPosition {
  let p: Obj | undefined;
  if (isObj(geo)) {
    if (geo.type === 'latLonPointGeoReference') p = geo;
    else if (geo.type === 'latLonArrayGeoReference' && Array.isArray(geo.points) && isObj(geo.points[0])) p = geo.points[0];
    else if (geo.type === 'Feature' && isObj(geo.geometry) && geo.geometry.type === 'Point' && Array.isArray(geo.geometry.coordinates)) {
      const [lon, lat] = geo.geometry.coordinates as unknown[];
      p = { lat, lon };
    }
  }
  if (!p) return { lat: null, lon: null, speed: { value: null, unit: '' }, speedKmh: null, heading: { value: null, unit: '' } };
  const speed = valueUnit(p.speed);
  return {
    lat: num(p.lat),
    lon: num(p.lon),
    speed,
    speedKmh: speed.value === null ? null : (speedKmh(speed.value, speed.unit) ?? null),
    heading: valueUnit(p.heading),
  };
}

/** Event time: `creationDate`, else `lastModified`, else the fallback (ms since the epoch). */
export function eventTimeMs(event: Obj, fallbackMs: number): number {
  const created = Date.parse(str(event.creationDate));
  if (Number.isFinite(created)) return created;
  const modified = Date.parse(str(event.lastModified));
  return Number.isFinite(modified) ? modified : fallbackMs;
}

/** A point of a vehicle's track: one locationUpdateEvent with a position and a vehicle. */
export interface TrackFix {
  /** The vehicle's storage key. */
  readonly vehicle: string;
  /** Event time (ms since the epoch). */
  readonly time: number;
  readonly lat: number;
  readonly lon: number;
  readonly speedKmh: number | null;
  /** Heading as sent (degrees in practice). */
  readonly heading: number | null;
}

/**
 * The track point of a location event: a `locationUpdateEvent` linked to a vehicle with a
 * position; undefined for any other event. `acceptedAt` stands in for a missing event time.
 */
export function trackFix(event: Obj, acceptedAt: number): TrackFix | undefined {
  if (event.eventType !== 'locationUpdateEvent') return undefined;
  const vehicle = linkedKey(event, 'vehicle');
  if (vehicle === '') return undefined;
  const pos = eventPosition(event.geoReference);
  if (pos.lat === null || pos.lon === null) return undefined;
  return {
    vehicle,
    time: eventTimeMs(event, acceptedAt),
    lat: pos.lat,
    lon: pos.lon,
    speedKmh: pos.speedKmh,
    heading: pos.heading.value,
  };
}

/**
 * The latest position a track point makes: the tenant's, of the event `eventKey`. Its members are
 * named: in V8 (Node 20) an object spread followed by more members (`{ ...fix, tenant, eventKey }`)
 * costs many times as much, on a path taken per event (docs/PERFORMANCE.md, object spreads).
 */
export function positionOfFix(fix: TrackFix, tenant: string, eventKey: string): LatestPosition & { readonly tenant: string } {
  return {
    tenant,
    eventKey,
    vehicle: fix.vehicle,
    time: fix.time,
    lat: fix.lat,
    lon: fix.lon,
    speedKmh: fix.speedKmh,
    heading: fix.heading,
  };
}

/**
 * What an event is listed by in the embedded event store (its lists, track and latest positions:
 * packages/embedded/src/event-log/effects.ts), read from its document once.
 */
export interface EventFacts {
  /** Its event time (`eventTimeMs`), or NaN when it has none: the time it was accepted stands in. */
  readonly time: number;
  /** The storage key of the vehicle it is linked to; '' for none. */
  readonly vehicle: string;
  /** Its `eventType`; undefined when it has none (or not a string). */
  readonly type: string | undefined;
  /** Its position, speed (km/h) and heading, when linked to a vehicle (null: none). */
  readonly lat: number | null;
  readonly lon: number | null;
  readonly speedKmh: number | null;
  readonly heading: number | null;
  /** A point of its vehicle's track (`trackFix`): a locationUpdateEvent with a vehicle and a position. */
  readonly located: boolean;
}

/** The facts of an event document (see `EventFacts`): its track point when it is one, else its time, vehicle and position. */
export function eventFacts(event: Obj): EventFacts {
  const type = typeof event.eventType === 'string' && event.eventType !== '' ? event.eventType : undefined;
  const time = eventTimeMs(event, Number.NaN);
  const vehicle = linkedKey(event, 'vehicle');
  if (vehicle === '') return { time, vehicle, type, lat: null, lon: null, speedKmh: null, heading: null, located: false };
  const p = eventPosition(event.geoReference);
  // A track point exactly when `trackFix` gives one; each member named (a spread followed by
  // more members costs far more in V8: docs/PERFORMANCE.md, object spreads).
  const located = type === 'locationUpdateEvent' && p.lat !== null && p.lon !== null;
  return { time, vehicle, type, lat: p.lat, lon: p.lon, speedKmh: p.speedKmh, heading: p.heading.value, located };
}

/**
 * The facts of many events (a bulk request's) in flat arrays, which cross threads cheaply: the
 * bulk checking thread reads them beside its checks, from the documents it parsed anyway, and the
 * event store lists each event by them instead of parsing its text again on the event loop.
 */
export interface EventFactsTable {
  /** Per event: 0 none read, 1 read, 2 read and a track point. */
  readonly flags: Uint8Array;
  /** Per event, five numbers: time, lat, lon, speedKmh, heading (NaN: none). */
  readonly numbers: Float64Array;
  readonly vehicles: string[];
  /** '' for none. */
  readonly types: string[];
}

export const newEventFactsTable = (count: number): EventFactsTable => ({
  flags: new Uint8Array(count),
  numbers: new Float64Array(5 * count),
  vehicles: new Array<string>(count).fill(''),
  types: new Array<string>(count).fill(''),
});

const orNaN = (n: number | null): number => (n === null ? Number.NaN : n);
const orNull = (n: number): number | null => (Number.isNaN(n) ? null : n);

export function setEventFacts(table: EventFactsTable, i: number, f: EventFacts): void {
  table.flags[i] = f.located ? 2 : 1;
  const n = table.numbers;
  n[5 * i] = f.time;
  n[5 * i + 1] = orNaN(f.lat);
  n[5 * i + 2] = orNaN(f.lon);
  n[5 * i + 3] = orNaN(f.speedKmh);
  n[5 * i + 4] = orNaN(f.heading);
  table.vehicles[i] = f.vehicle;
  table.types[i] = f.type ?? '';
}

/** The facts of event `i` of the table; undefined when none were read for it. */
export function eventFactsAt(table: EventFactsTable, i: number): EventFacts | undefined {
  const flag = table.flags[i];
  if (flag !== 1 && flag !== 2) return undefined;
  const n = table.numbers;
  return {
    time: n[5 * i]!,
    vehicle: table.vehicles[i]!,
    type: table.types[i] === '' ? undefined : table.types[i],
    lat: orNull(n[5 * i + 1]!),
    lon: orNull(n[5 * i + 2]!),
    speedKmh: orNull(n[5 * i + 3]!),
    heading: orNull(n[5 * i + 4]!),
    located: flag === 2,
  };
}
