/**
 * The vehicles on the map: the latest position of each (GET /api/v5/vehicles/positions), moved by
 * the stream (stream.ts). Keyboard users choose a vehicle with the select under the map.
 * `document.body.dataset.markers` (markers drawn) and `.moves` (live moves applied) let a test or
 * bench see the canvas's state.
 */
import L from 'leaflet';
import { $, api, errorText } from './api.js';
import { count } from './format.js';
import { fitTo, map, vehicleCanvas } from './map.js';
import type { Position } from './positions.js';
import { state } from './state.js';

const markerStyle: L.CircleMarkerOptions = {
  renderer: vehicleCanvas,
  radius: 6,
  color: '#fff',
  weight: 2,
  fillColor: '#1d3557',
  fillOpacity: 1,
};

/** Places or moves a vehicle; true when it was new. `options`: the vehicle select's new options go there. */
export function placeVehicle(p: Position, options?: HTMLOptionElement[]): boolean {
  const time = Date.parse(p.time);
  const known = state.vehicles.get(p.vehicle);
  if (known !== undefined) {
    if (time < known.time) return false; // an older event never moves a vehicle back
    known.marker.setLatLng([p.lat, p.lon]);
    known.time = time;
    document.body.dataset.moves = String(++state.moves);
    return false;
  }
  const marker = L.circleMarker([p.lat, p.lon], markerStyle).addTo(map);
  marker.on('click', () => chooseVehicle(p.vehicle));
  state.vehicles.set(p.vehicle, { marker, time });
  const option = document.createElement('option');
  option.value = p.vehicle;
  option.textContent = p.vehicle;
  if (options !== undefined) options.push(option);
  else $<HTMLSelectElement>('track-vehicle').append(option);
  return true;
}

function chooseVehicle(id: string): void {
  $<HTMLSelectElement>('track-vehicle').value = id;
  $<HTMLSelectElement>('track-vehicle').focus();
}

export function setMapStatus(): void {
  $('map-status').textContent = `${count(state.vehicles.size, 'vehicle')} on the map${state.stream ? ', following changes' : ''}.`;
}

/** Sets `document.body.dataset.markers` to the vehicles drawn. */
export function markersDrawn(): void {
  document.body.dataset.markers = String(state.vehicles.size);
}

export async function loadPositions(): Promise<void> {
  const res = await api('/api/v5/vehicles/positions');
  if (!res.ok) {
    $('map-status').textContent = `Positions: ${await errorText(res)}`;
    return;
  }
  const body = (await res.json()) as { items: Position[] };
  const options: HTMLOptionElement[] = [];
  for (const p of body.items) placeVehicle(p, options);
  $<HTMLSelectElement>('track-vehicle').append(...options);
  if (body.items.length > 0) {
    fitTo(L.latLngBounds(body.items.map((p) => [p.lat, p.lon] as [number, number])).pad(0.2), 10);
  }
  setMapStatus();
  // Set once the canvas has drawn them (the frame after this one).
  requestAnimationFrame(() => requestAnimationFrame(markersDrawn));
}
