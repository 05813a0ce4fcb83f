/**
 * Geofences are the tenant's OTM locations: a location whose `geoReference` is a
 * `latLonPointGeoReference` is a circle around that point (`OTM_GEOFENCE_RADIUS_M`, or the
 * location's `externalAttributes.geofenceRadius` in metres); one with a `latLonArrayGeoReference`
 * of three points or more is that polygon; a GeoJSON `Feature` with a `Polygon` or `MultiPolygon`
 * geometry is that shape (holes included). Any other location (an address only) has no fence.
 */
import type { DocumentReader, Lister } from '../ports.js';
import { inRing, nearM, ringEdgeM, type Ring } from './geo.js';

export type Geofence =
  | { readonly location: string; readonly shape: 'circle'; readonly lat: number; readonly lon: number; readonly radiusM: number }
  | { readonly location: string; readonly shape: 'polygon'; readonly polygons: readonly (readonly Ring[])[]; readonly box: Box };

/** [minLon, minLat, maxLon, maxLat] */
type Box = readonly [number, number, number, number];

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const finite = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isLatLon = (lat: unknown, lon: unknown): boolean => finite(lat) && finite(lon) && Math.abs(lat) <= 90 && Math.abs(lon) <= 180;

/** A GeoJSON ring of [lon, lat] positions, when it is one of at least three valid positions. */
function ringOf(v: unknown): Ring | undefined {
  if (!Array.isArray(v) || v.length < 3) return undefined;
  const ring: [number, number][] = [];
  for (const p of v) {
    if (!Array.isArray(p) || !isLatLon(p[1], p[0])) return undefined;
    ring.push([p[0] as number, p[1] as number]);
  }
  return ring;
}

function polygonsOf(geometry: Obj): Ring[][] | undefined {
  const polygon = (coords: unknown): Ring[] | undefined => {
    if (!Array.isArray(coords) || coords.length === 0) return undefined;
    const rings = coords.map(ringOf);
    return rings.every((r) => r !== undefined) ? rings : undefined;
  };
  if (geometry.type === 'Polygon') {
    const p = polygon(geometry.coordinates);
    return p && [p];
  }
  if (geometry.type === 'MultiPolygon' && Array.isArray(geometry.coordinates)) {
    const ps = geometry.coordinates.map(polygon);
    return ps.length > 0 && ps.every((p) => p !== undefined) ? ps : undefined;
  }
  return undefined;
}

function boxOf(polygons: readonly (readonly Ring[])[]): Box {
  let [minLon, minLat, maxLon, maxLat] = [Infinity, Infinity, -Infinity, -Infinity];
  for (const p of polygons)
    for (const [lon, lat] of p[0]!) {
      minLon = Math.min(minLon, lon);
      maxLon = Math.max(maxLon, lon);
      minLat = Math.min(minLat, lat);
      maxLat = Math.max(maxLat, lat);
    }
  return [minLon, minLat, maxLon, maxLat];
}

/** The geofence of a location document (its storage key `key`), or undefined when it has none. */
export function geofenceOf(key: string, location: Obj, defaultRadiusM: number): Geofence | undefined {
  const geo = isObj(location.geoReference) ? location.geoReference : isObj(location.geoReferences) ? location.geoReferences : undefined;
  if (geo === undefined) return undefined;
  if (geo.type === 'latLonPointGeoReference') {
    if (!isLatLon(geo.lat, geo.lon)) return undefined;
    const own = isObj(location.externalAttributes) ? location.externalAttributes.geofenceRadius : undefined;
    const radiusM = finite(own) && own > 0 ? own : defaultRadiusM;
    return { location: key, shape: 'circle', lat: geo.lat as number, lon: geo.lon as number, radiusM };
  }
  let polygons: Ring[][] | undefined;
  if (geo.type === 'latLonArrayGeoReference' && Array.isArray(geo.points)) {
    const ring = ringOf(geo.points.map((p) => (isObj(p) ? [p.lon, p.lat] : undefined)));
    polygons = ring && [[ring]];
  } else if (geo.type === 'Feature' && isObj(geo.geometry)) {
    polygons = polygonsOf(geo.geometry);
  }
  return polygons === undefined ? undefined : { location: key, shape: 'polygon', polygons, box: boxOf(polygons) };
}

/** Metres per degree of latitude, for the margin around a polygon's box. */
const M_PER_DEG = 111_195;

/**
 * Whether (lat, lon) is inside the fence, or outside it by no more than `marginM` metres (a
 * hysteresis band: a vehicle counts as having left only beyond it).
 */
export function inFence(fence: Geofence, lat: number, lon: number, marginM = 0): boolean {
  if (fence.shape === 'circle') return nearM(fence.lat, fence.lon, lat, lon) <= fence.radiusM + marginM;
  const [minLon, minLat, maxLon, maxLat] = fence.box;
  const padLat = marginM / M_PER_DEG;
  const padLon = padLat / Math.max(0.01, Math.cos((lat * Math.PI) / 180));
  if (lat < minLat - padLat || lat > maxLat + padLat || lon < minLon - padLon || lon > maxLon + padLon) return false;
  for (const [outer, ...holes] of fence.polygons) {
    if (inRing(lat, lon, outer!) && !holes.some((h) => inRing(lat, lon, h))) return true;
  }
  if (marginM <= 0) return false;
  return fence.polygons.some((rings) => rings.some((r) => ringEdgeM(lat, lon, r) <= marginM));
}

/** A fence's size, to prefer the most specific of several that hold a point. */
function areaOf(f: Geofence): number {
  if (f.shape === 'circle') return Math.PI * f.radiusM * f.radiusM;
  const [minLon, minLat, maxLon, maxLat] = f.box;
  return (maxLon - minLon) * (maxLat - minLat) * M_PER_DEG * M_PER_DEG * Math.cos((((minLat + maxLat) / 2) * Math.PI) / 180);
}

/** A tenant's geofences, to find the one that holds a point. */
export class Geofences {
  private readonly fences: readonly Geofence[];
  private readonly byLocation: ReadonlyMap<string, Geofence>;

  constructor(fences: Iterable<Geofence>) {
    // Smallest first (then by location key): the most specific fence holding a point wins.
    this.fences = [...fences].sort((a, b) => areaOf(a) - areaOf(b) || (a.location < b.location ? -1 : a.location > b.location ? 1 : 0));
    this.byLocation = new Map(this.fences.map((f) => [f.location, f]));
  }

  /** The fence of a location, by its storage key. */
  get(location: string): Geofence | undefined {
    return this.byLocation.get(location);
  }

  /** Every fence that holds (lat, lon), smallest first. */
  containing(lat: number, lon: number): Geofence[] {
    return this.fences.filter((f) => inFence(f, lat, lon));
  }

  get size(): number {
    return this.fences.length;
  }

  /** The smallest fence that holds (lat, lon), or undefined. */
  find(lat: number, lon: number): Geofence | undefined {
    return this.fences.find((f) => inFence(f, lat, lon));
  }
}

/** Most locations read for one tenant's fences. */
export const GEOFENCES_MAX = 100_000;

/** The tenant's geofences, from every location it has (latest versions), read a page at a time. */
export async function loadGeofences(store: Lister & DocumentReader, tenant: string, defaultRadiusM: number): Promise<Geofences> {
  const fences: Geofence[] = [];
  let after: { at: number; key: string } | undefined;
  for (let read = 0; read < GEOFENCES_MAX;) {
    const page = await store.list({ tenant, kind: 'locations', facet: '', limit: 1_000, ...(after ? { after } : {}) });
    if (page.length === 0) break;
    read += page.length;
    const docs = await Promise.all(page.map((p) => store.get(tenant, 'locations', p.key)));
    docs.forEach((d, i) => {
      if (d === undefined) return;
      const fence = geofenceOf(page[i]!.key, JSON.parse(d.json) as Obj, defaultRadiusM);
      if (fence) fences.push(fence);
    });
    after = page.at(-1)!;
    if (page.length < 1_000) break;
  }
  return new Geofences(fences);
}
