/**
 * The typed columns analysts query, taken from an OTM 5.9 telemetry event: ids of the vehicle,
 * trip, sensor and transport equipment (from inline entities or references, also inside the
 * `references` array), position, speed and heading, sensor value, emission / fuel amounts and
 * weights with their original unit and a normalised one; and a location event's track point read
 * from its columns (`columnsTrackFix`). Pure functions, no I/O.
 */
import { eventPosition, eventTimeMs, linkedKey, type TrackFix } from '@otm/core';

/** A quantity converted to the unit analysts sum in. */
export interface Normalised {
  readonly value: number;
  /** `kg` (mass, also CO2), `l` (volume, fuel), `kWh` (energy). */
  readonly unit: 'kg' | 'l' | 'kWh';
}

const MASS_KG: Record<string, number> = {
  mg: 1e-6,
  g: 1e-3,
  gram: 1e-3,
  grams: 1e-3,
  kg: 1,
  kilogram: 1,
  kilograms: 1,
  t: 1000,
  ton: 1000,
  tons: 1000,
  tonne: 1000,
  tonnes: 1000,
  lb: 0.45359237,
  lbs: 0.45359237,
};
const VOLUME_L: Record<string, number> = {
  ml: 1e-3,
  cl: 1e-2,
  dl: 0.1,
  l: 1,
  lt: 1,
  ltr: 1,
  liter: 1,
  liters: 1,
  litre: 1,
  litres: 1,
  m3: 1000,
  'm^3': 1000,
  'm³': 1000,
  gal: 3.785411784, // US gallon
  galus: 3.785411784,
  usgal: 3.785411784,
  galuk: 4.54609,
  impgal: 4.54609,
};
const ENERGY_KWH: Record<string, number> = {
  wh: 1e-3,
  kwh: 1,
  mwh: 1000,
  gwh: 1e6,
  j: 1 / 3.6e6,
  kj: 1 / 3600,
  mj: 1 / 3.6,
  gj: 1000 / 3.6,
};

/** Lower case, no spaces, no CO2 suffix ("kg CO2e" -> "kg"), "liter(s)"/"litre(s)" kept. */
function unitToken(unit: string): string {
  return unit
    .trim()
    .toLowerCase()
    .replace(/\s*(co2e?|co₂e?|-eq|eq)$/u, '')
    .replace(/\s+/g, '');
}

/**
 * Converts a quantity to kg (mass and CO2), litres (volume) or kWh (energy); undefined for a unit
 * it does not know (the original value and unit are kept in their own columns anyway).
 */
export function normaliseQuantity(value: number, unit: string): Normalised | undefined {
  if (!Number.isFinite(value)) return undefined;
  const u = unitToken(unit);
  const round = (x: number) => Number(x.toPrecision(15));
  if (u in MASS_KG) return { value: round(value * MASS_KG[u]!), unit: 'kg' };
  if (u in VOLUME_L) return { value: round(value * VOLUME_L[u]!), unit: 'l' };
  if (u in ENERGY_KWH) return { value: round(value * ENERGY_KWH[u]!), unit: 'kWh' };
  return undefined;
}

type Obj = Readonly<Record<string, unknown>>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

function valueUnit(v: unknown): { value: number | null; unit: string } {
  return isObj(v) ? { value: num(v.value), unit: str(v.unit) } : { value: null, unit: '' };
}

/** The analyst columns of otm_events (without tenant, id, rank, versions). */
export interface EventColumns {
  lifecycle: string;
  event_type: string;
  /** ms since the epoch (a DateTime64(3) column). */
  event_time: number;
  vehicle_id: string;
  trip_id: string;
  sensor_id: string;
  transport_equipment_id: string;
  lat: number | null;
  lon: number | null;
  speed: number | null;
  speed_unit: string;
  speed_kmh: number | null;
  heading: number | null;
  heading_unit: string;
  sensor_value: number | null;
  sensor_unit: string;
  amount: number | null;
  amount_unit: string;
  amount_normalised: number | null;
  amount_normalised_unit: string;
  fuel_type: string;
  emission_method: string;
  weight: number | null;
  weight_unit: string;
  weight_kg: number | null;
  weighing_type: string;
}

export function eventColumns(event: Obj, fallbackTimeMs: number): EventColumns {
  const pos = eventPosition(event.geoReference);
  const sensor = event.eventType === 'sensorUpdateEvent' ? valueUnit(event.value) : { value: null, unit: '' };
  const amount =
    event.eventType === 'emissionEvent' || event.eventType === 'fuelConsumedEvent' ? valueUnit(event.amount) : { value: null, unit: '' };
  const norm = amount.value === null ? undefined : normaliseQuantity(amount.value, amount.unit);
  const wr = isObj(event.weighingResult) ? event.weighingResult : undefined;
  const weight = valueUnit(wr?.weight);
  const weightNorm = weight.value === null ? undefined : normaliseQuantity(weight.value, weight.unit);
  return {
    lifecycle: str(event.lifecycle),
    event_type: str(event.eventType),
    event_time: eventTimeMs(event, fallbackTimeMs),
    vehicle_id: linkedKey(event, 'vehicle'),
    trip_id: linkedKey(event, 'trip'),
    sensor_id: linkedKey(event, 'sensor'),
    transport_equipment_id: linkedKey(event, 'transportEquipment'),
    lat: pos.lat,
    lon: pos.lon,
    speed: pos.speed.value,
    speed_unit: pos.speed.unit,
    speed_kmh: pos.speedKmh,
    heading: pos.heading.value,
    heading_unit: pos.heading.unit,
    sensor_value: sensor.value,
    sensor_unit: sensor.unit,
    amount: amount.value,
    amount_unit: amount.unit,
    amount_normalised: norm?.value ?? null,
    amount_normalised_unit: norm?.unit ?? '',
    fuel_type: event.eventType === 'fuelConsumedEvent' ? str(event.fuel) : '',
    emission_method: event.eventType === 'emissionEvent' ? str(event.method) : '',
    weight: weight.value,
    weight_unit: weight.unit,
    weight_kg: weightNorm?.unit === 'kg' ? weightNorm.value : null,
    weighing_type: str(wr?.weighingType),
  };
}

/**
 * The track point of a location event (event-facts.ts `trackFix` of the same event and fallback
 * time), read from its columns: the ClickHouse store hands the telemetry worker the latest
 * positions of what it wrote without reading the events again.
 */
export function columnsTrackFix(c: EventColumns): TrackFix | undefined {
  if (c.event_type !== 'locationUpdateEvent' || c.vehicle_id === '' || c.lat === null || c.lon === null) return undefined;
  return { vehicle: c.vehicle_id, time: c.event_time, lat: c.lat, lon: c.lon, speedKmh: c.speed_kmh, heading: c.heading };
}
