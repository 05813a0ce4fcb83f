/**
 * The map: Leaflet over the land of Natural Earth (world-atlas, from the bundle) or the tiles of
 * OTM_MAP_STYLE, with the panes of what the page draws on it.
 */
import L from 'leaflet';
import { feature } from 'topojson-client';
import type { GeometryCollection, Topology } from 'topojson-specification';
import land110m from 'world-atlas/land-110m.json';

export const map = L.map('map', { worldCopyJump: true, keyboard: true }).setView([50, 10], 4);

// The vehicles: a pane of their own above the land (the overlay pane, 400) and the track, under the trip's stops (600).
map.createPane('vehicles').style.zIndex = '450';
/**
 * The vehicles' markers are circles on one canvas (Leaflet's canvas renderer), not a DOM element
 * each, so that 10,000 of them draw in well under a second and 1,000 moves a second keep the frame
 * rate (docs/web.md).
 */
export const vehicleCanvas = L.canvas({ padding: 0.2, pane: 'vehicles' });
// The track slider's marker: a pane of its own above the vehicles (450), under the trip's stops (600).
map.createPane('track-cursor').style.zIndex = '560';

/** Draws under the markers the tiles of OTM_MAP_STYLE (/config.json), else the land from the bundle. */
export async function drawBaseLayer(): Promise<void> {
  const config = (await fetch('/config.json')
    .then((r) => r.json())
    .catch(() => ({}))) as { mapStyle?: string | null };
  if (typeof config.mapStyle === 'string' && config.mapStyle !== '') {
    L.tileLayer(config.mapStyle, { maxZoom: 19, attribution: 'Map tiles: see OTM_MAP_STYLE' }).addTo(map);
    return;
  }
  // No tile server: the land from Natural Earth (world-atlas), drawn from the bundle.
  const topology = land110m as unknown as Topology<{ land: GeometryCollection }>;
  L.geoJSON(feature(topology, topology.objects.land), {
    style: { color: '#7a8f7a', weight: 1, fillColor: '#dfe8d8', fillOpacity: 1 },
    interactive: false,
  }).addTo(map);
  map.getContainer().style.background = '#b9d3e6';
}

/**
 * Fits the map to `bounds`. Leaflet drops a new view asked for while a zoom animates (the fit to
 * the vehicles, just before a track or a trip is shown): then it fits once that zoom has ended.
 */
export function fitTo(bounds: L.LatLngBounds, maxZoom: number): void {
  const fit = () => map.fitBounds(bounds, { maxZoom });
  if (map.getPane('mapPane')?.classList.contains('leaflet-zoom-anim')) map.once('zoomend', fit);
  else fit();
}
