/**
 * One trip (GET /api/v5/trips/{id}): its actions in order, each followed by its own, with their
 * locations and time windows; its stops as numbered markers on the map; then its actions'
 * lifecycles side by side (lifecycles.ts).
 */
import L from 'leaflet';
import { $, api, errorText } from './api.js';
import { locationOf, resolve } from './entities.js';
import { count } from './format.js';
import { showLifecycles } from './lifecycles.js';
import { fitTo, map } from './map.js';
import { state } from './state.js';
import { actionCells, inSequence, numberStops, placeName, type ActionRow } from './trip-actions.js';

/** The actions of a trip in order (by sequenceNr, else as listed), each followed by its own actions. */
async function flatten(list: unknown, depth: number, out: ActionRow[]): Promise<void> {
  if (!Array.isArray(list)) return;
  const actions = (await Promise.all(list.map((a) => resolve(a, 'actions')))).filter((a): a is Record<string, unknown> => a !== undefined);
  for (const action of inSequence(actions)) {
    out.push({ depth, action, location: await locationOf(action) });
    await flatten(action.actions, depth + 1, out);
  }
}

export async function selectTrip(id: string): Promise<void> {
  state.selectedTrip = id;
  state.locations = new Map();
  for (const tr of $('trips').querySelectorAll<HTMLTableRowElement>('tr')) tr.setAttribute('aria-selected', String(tr.dataset.trip === id));
  const status = $('trip-detail-status');
  status.textContent = 'Loading the trip…';
  const res = await api(`/api/v5/trips/${encodeURIComponent(id)}`);
  if (!res.ok) {
    status.textContent = `Trip: ${await errorText(res)}`;
    return;
  }
  const trip = (await res.json()) as Record<string, unknown>;
  const rows: ActionRow[] = [];
  await flatten(trip.actions, 0, rows);
  if (state.selectedTrip !== id) return; // another trip was chosen meanwhile

  state.tripLayer?.remove();
  const layer = L.layerGroup().addTo(map);
  state.tripLayer = layer;
  const points = numberStops(rows);
  for (const row of rows) {
    if (row.stop === undefined) continue;
    const loc = row.location!;
    const label = `Stop ${row.stop}: ${placeName(loc)}`;
    const icon = L.divIcon({ className: 'stop-marker', html: String(row.stop), iconSize: [22, 22] });
    L.marker([loc.lat!, loc.lon!], { icon, title: label, alt: label, keyboard: true, zIndexOffset: 1000 }).addTo(layer);
  }
  $('trip-actions').replaceChildren(
    ...rows.map((row) => {
      const tr = document.createElement('tr');
      if (row.depth > 0) tr.className = 'nested';
      for (const text of actionCells(row)) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }),
  );
  $('trip-actions-table').hidden = rows.length === 0;
  const name = typeof trip.name === 'string' ? trip.name : id;
  status.textContent = `${name}: ${count(rows.length, 'action')}, ${count(points.length, 'stop')} on the map.`;
  if (points.length > 0) fitTo(L.latLngBounds(points).pad(0.3), 12);
  await showLifecycles(id, rows);
}
