/**
 * The fleet page: the tenant's vehicles on a map (latest positions, moved live by the stream),
 * a vehicle's track with a time slider, the trips with a status filter and paging, a trip's
 * actions and their lifecycles side by side, and a document checker. Talks to this service's
 * /api/v5 with the token typed once (kept in sessionStorage: gone with the tab). One module a
 * section; the page's state is one object (state.ts).
 */
import 'leaflet/dist/leaflet.css';
import './style.css';
import { $, api, errorText } from './api.js';
import { drawBaseLayer } from './map.js';
import { state, TOKEN_KEY } from './state.js';
import { follow } from './stream.js';
import { initTrack } from './track.js';
import { firstTrips, initTrips } from './trips.js';
import { initValidator } from './validator.js';
import { loadPositions } from './vehicles.js';

await drawBaseLayer();
initTrack();
initTrips();
initValidator();

/** With a token: checks it, then loads the positions and the trips, then follows changes. */
async function start(): Promise<void> {
  if (state.token === '') return;
  const check = await api('/api/v5/vehicles/positions?staleAfter=1s');
  if (check.status === 401 || check.status === 403) {
    $('token-status').textContent = await errorText(check);
    return;
  }
  $('token-status').textContent = 'Token in use for this tab.';
  await Promise.all([loadPositions(), firstTrips()]);
  await follow();
}
$<HTMLFormElement>('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  state.token = $<HTMLInputElement>('token').value.trim();
  sessionStorage.setItem(TOKEN_KEY, state.token);
  $<HTMLInputElement>('token').value = '';
  void start();
});
void start();
