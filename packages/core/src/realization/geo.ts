/**
 * Distances on the Earth for the activity report and geofences: great-circle (haversine) for
 * distances a user reads, and a flat approximation for "within r metres" checks over short
 * distances, where it errs by less than 0.1 % under a few kilometres.
 */

/** The Earth's mean radius (IUGG), metres. */
export const EARTH_RADIUS_M = 6_371_008.8;

const RAD = Math.PI / 180;

/** Great-circle distance in metres between two points given in degrees (haversine). */
export function greatCircleM(lat1: number, lon1: number, lat2: number, lon2: number): number {
  const dLat = (lat2 - lat1) * RAD;
  const dLon = (lon2 - lon1) * RAD;
  const a = Math.sin(dLat / 2) ** 2 + Math.cos(lat1 * RAD) * Math.cos(lat2 * RAD) * Math.sin(dLon / 2) ** 2;
  return 2 * EARTH_RADIUS_M * Math.asin(Math.min(1, Math.sqrt(a)));
}

/**
 * The distance in metres between two nearby points on a plane tangent at the first
 * (equirectangular): cheap, for comparisons with radii of metres to kilometres.
 */
export function nearM(lat1: number, lon1: number, lat2: number, lon2: number): number {
  let dLon = lon2 - lon1;
  if (dLon > 180) dLon -= 360;
  else if (dLon < -180) dLon += 360;
  const x = dLon * RAD * Math.cos(((lat1 + lat2) / 2) * RAD);
  const y = (lat2 - lat1) * RAD;
  return EARTH_RADIUS_M * Math.sqrt(x * x + y * y);
}

/** A ring of [lon, lat] points (GeoJSON order), closed or not. */
export type Ring = readonly (readonly [number, number])[];

/** Whether (lat, lon) lies inside the ring (even-odd rule; a point on an edge may go either way). */
export function inRing(lat: number, lon: number, ring: Ring): boolean {
  let inside = false;
  for (let i = 0, j = ring.length - 1; i < ring.length; j = i++) {
    const [xi, yi] = ring[i]!;
    const [xj, yj] = ring[j]!;
    if (yi > lat !== yj > lat && lon < ((xj - xi) * (lat - yi)) / (yj - yi) + xi) inside = !inside;
  }
  return inside;
}

/** Distance in metres from (lat, lon) to the nearest edge of the ring (flat approximation). */
export function ringEdgeM(lat: number, lon: number, ring: Ring): number {
  const kx = Math.cos(lat * RAD) * RAD * EARTH_RADIUS_M;
  const ky = RAD * EARTH_RADIUS_M;
  let best = Infinity;
  for (let i = 0, j = ring.length - 1; i < ring.length; j = i++) {
    const ax = (ring[j]![0] - lon) * kx;
    const ay = (ring[j]![1] - lat) * ky;
    const bx = (ring[i]![0] - lon) * kx;
    const by = (ring[i]![1] - lat) * ky;
    const dx = bx - ax;
    const dy = by - ay;
    const len = dx * dx + dy * dy;
    const t = len === 0 ? 0 : Math.max(0, Math.min(1, -(ax * dx + ay * dy) / len));
    const px = ax + t * dx;
    const py = ay + t * dy;
    best = Math.min(best, Math.sqrt(px * px + py * py));
  }
  return best;
}
