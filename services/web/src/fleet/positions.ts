/** A vehicle's latest position, as the positions list answers it or as a stream item carries it. Pure. */

export interface Position {
  vehicle: string;
  time: string;
  lat: number;
  lon: number;
}

/** The vehicle and position of a stored location event, from a stream item's document (`now`: its time when it has none). */
export function positionOf(doc: Record<string, unknown>, now: () => string = () => new Date().toISOString()): Position | undefined {
  if (doc.eventType !== 'locationUpdateEvent') return undefined;
  const v = doc.vehicle as { uuid?: string; id?: string; entity?: { id?: string } } | undefined;
  const vehicle = v?.uuid ?? v?.id ?? v?.entity?.id;
  const geo = doc.geoReference as { type?: string; lat?: number; lon?: number } | undefined;
  if (vehicle === undefined || geo?.type !== 'latLonPointGeoReference' || typeof geo.lat !== 'number' || typeof geo.lon !== 'number') {
    return undefined;
  }
  const time = typeof doc.creationDate === 'string' ? doc.creationDate : now();
  return { vehicle: vehicle.toLowerCase(), time, lat: geo.lat, lon: geo.lon };
}
