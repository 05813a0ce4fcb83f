/**
 * The fleet page: the tenant's vehicles on a map (latest positions, moved live by the stream),
 * a vehicle's track, the trips with a status filter and paging, and a document checker. Talks to
 * this service's /api/v5 with the token typed once (kept in sessionStorage: gone with the tab).
 */
import 'leaflet/dist/leaflet.css';
import './style.css';
import L from 'leaflet';
import { feature } from 'topojson-client';
import type { GeometryCollection, Topology } from 'topojson-specification';
import land110m from 'world-atlas/land-110m.json';
// The kinds' names alone (no schema, no validator: a few hundred bytes of the bundle).
import { KIND_SEGMENTS } from '@otm/model/kind-names';
// Types only: nothing of the model's code comes into the bundle.
import type { Lifecycle } from '@otm/model';

/** The model's lifecycles by rank (the service's order of versions): a Record, so the compiler checks it names them all. */
const LIFECYCLE_RANK: Record<Lifecycle, number> = { requested: 1, planned: 2, projected: 3, actual: 4, realized: 5 };
/** The lifecycles, earliest first. */
const LIFECYCLES = (Object.keys(LIFECYCLE_RANK) as Lifecycle[]).sort((a, b) => LIFECYCLE_RANK[a] - LIFECYCLE_RANK[b]);
const TOKEN_KEY = 'otm-token';

interface Position {
  vehicle: string;
  time: string;
  lat: number;
  lon: number;
}
interface ErrorItem {
  type: string;
  field?: string;
  message: string;
}

const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`#${id} is missing`);
  return el as T;
};

let token = sessionStorage.getItem(TOKEN_KEY) ?? '';

async function api(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${token}`);
  if (init.body !== undefined) headers.set('content-type', 'application/json');
  return fetch(path, { ...init, headers });
}

async function errorText(res: Response): Promise<string> {
  try {
    const items = (await res.json()) as ErrorItem[];
    return items.map((i) => (i.field ? `${i.field}: ${i.message}` : i.message)).join('; ');
  } catch {
    return `HTTP ${res.status}`;
  }
}

// --- The map -------------------------------------------------------------------------------

const map = L.map('map', { worldCopyJump: true, keyboard: true }).setView([50, 10], 4);
const config = (await fetch('/config.json')
  .then((r) => r.json())
  .catch(() => ({}))) as { mapStyle?: string | null };
if (typeof config.mapStyle === 'string' && config.mapStyle !== '') {
  L.tileLayer(config.mapStyle, { maxZoom: 19, attribution: 'Map tiles: see OTM_MAP_STYLE' }).addTo(map);
} else {
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
function fitTo(bounds: L.LatLngBounds, maxZoom: number): void {
  const fit = () => map.fitBounds(bounds, { maxZoom });
  if (map.getPane('mapPane')?.classList.contains('leaflet-zoom-anim')) map.once('zoomend', fit);
  else fit();
}

/**
 * The vehicles: circle markers on one canvas (Leaflet's canvas renderer), not a DOM element each,
 * so that 10,000 of them draw in well under a second and 1,000 moves a second keep the frame rate
 * (docs/web.md). Keyboard users choose a vehicle with the select under the map.
 * `document.body.dataset.markers` (markers drawn) and `.moves` (live moves applied) let a test or
 * bench see the canvas's state.
 */
// A pane of their own above the land (the overlay pane, 400) and the track, under the trip's stops (600).
map.createPane('vehicles').style.zIndex = '450';
const vehicleCanvas = L.canvas({ padding: 0.2, pane: 'vehicles' });
const markers = new Map<string, { marker: L.CircleMarker; time: number }>();
const markerStyle: L.CircleMarkerOptions = {
  renderer: vehicleCanvas,
  radius: 6,
  color: '#fff',
  weight: 2,
  fillColor: '#1d3557',
  fillOpacity: 1,
};
let moves = 0;

/** Places or moves a vehicle; true when it was new. `options`: the vehicle select's new options go there. */
function placeVehicle(p: Position, options?: HTMLOptionElement[]): boolean {
  const time = Date.parse(p.time);
  const known = markers.get(p.vehicle);
  if (known !== undefined) {
    if (time < known.time) return false; // an older event never moves a vehicle back
    known.marker.setLatLng([p.lat, p.lon]);
    known.time = time;
    document.body.dataset.moves = String(++moves);
    return false;
  }
  const marker = L.circleMarker([p.lat, p.lon], markerStyle).addTo(map);
  marker.on('click', () => chooseVehicle(p.vehicle));
  markers.set(p.vehicle, { marker, time });
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

function setMapStatus(): void {
  $('map-status').textContent = `${markers.size} vehicle${markers.size === 1 ? '' : 's'} on the map${stream ? ', following changes' : ''}.`;
}

async function loadPositions(): Promise<void> {
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
  requestAnimationFrame(() => requestAnimationFrame(() => (document.body.dataset.markers = String(markers.size))));
}

/** The vehicle and position of a stored location event, from a stream item's document. */
function positionOf(doc: Record<string, unknown>): Position | undefined {
  if (doc.eventType !== 'locationUpdateEvent') return undefined;
  const v = doc.vehicle as { uuid?: string; id?: string; entity?: { id?: string } } | undefined;
  const vehicle = v?.uuid ?? v?.id ?? v?.entity?.id;
  const geo = doc.geoReference as { type?: string; lat?: number; lon?: number } | undefined;
  if (vehicle === undefined || geo?.type !== 'latLonPointGeoReference' || typeof geo.lat !== 'number' || typeof geo.lon !== 'number') {
    return undefined;
  }
  const time = typeof doc.creationDate === 'string' ? doc.creationDate : new Date().toISOString();
  return { vehicle: vehicle.toLowerCase(), time, lat: geo.lat, lon: geo.lon };
}

let stream: EventSource | undefined;
async function follow(): Promise<void> {
  stream?.close();
  stream = undefined;
  const res = await api('/api/v5/stream/tickets', { method: 'POST' });
  if (!res.ok) return;
  const { ticket } = (await res.json()) as { ticket: string };
  const source = new EventSource(`/api/v5/stream?kinds=events&ticket=${encodeURIComponent(ticket)}`);
  stream = source;
  source.addEventListener('put', (e: MessageEvent<string>) => {
    const item = JSON.parse(e.data) as { document?: Record<string, unknown> };
    const p = item.document ? positionOf(item.document) : undefined;
    if (p !== undefined && placeVehicle(p)) {
      setMapStatus();
      document.body.dataset.markers = String(markers.size);
    }
  });
  // A ticket is good for a minute: on an error, take a new one rather than let EventSource retry with the old.
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED && stream === source) setTimeout(() => void follow(), 2000);
  });
  setMapStatus();
}

// --- A vehicle's track, with a time slider ------------------------------------------------

/** One position of a track (a Point feature of the GeoJSON answer). */
interface TrackPoint {
  time: number;
  lat: number;
  lon: number;
  speedKmh?: number;
  heading?: number;
}

// The slider's marker: a pane of its own above the vehicles (450), under the trip's stops (600).
map.createPane('track-cursor').style.zIndex = '560';
let trackLayer: L.LayerGroup | undefined;
let trackPoints: TrackPoint[] = [];
/** The part of the line up to the chosen time, drawn over the whole line (which is dimmed). */
let trackDone: L.Polyline | undefined;
let trackMarker: L.CircleMarker | undefined;
/** The index in trackPoints of the position shown. */
let trackIndex = 0;
/** The map's part of showTrackAt waits for the next frame; `drawFollows`: whether it pans to the marker. */
let drawQueued = false;
let drawFollows = false;

const slider = $<HTMLInputElement>('track-slider');

/** A time as `2024-03-11 07:00:05 UTC`. */
function fmtSecond(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** The positions of a track answer, in time order (the service answers them so). */
function pointsOf(fc: GeoJSON.FeatureCollection): TrackPoint[] {
  const out: TrackPoint[] = [];
  for (const f of fc.features) {
    if (f.geometry.type !== 'Point') continue;
    const [lon, lat] = f.geometry.coordinates;
    const props = f.properties ?? {};
    const time = typeof props.time === 'string' ? Date.parse(props.time) : NaN;
    if (typeof lat !== 'number' || typeof lon !== 'number' || Number.isNaN(time)) continue;
    out.push({
      time,
      lat,
      lon,
      ...(typeof props.speedKmh === 'number' ? { speedKmh: props.speedKmh } : {}),
      ...(typeof props.heading === 'number' ? { heading: props.heading } : {}),
    });
  }
  return out;
}

/** The last position at or before `time` (the first one when `time` is before all). */
function indexAt(time: number): number {
  let lo = 0;
  let hi = trackPoints.length; // the first index whose time is after `time`, by binary search
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (trackPoints[mid]!.time <= time) lo = mid + 1;
    else hi = mid;
  }
  return Math.max(0, lo - 1);
}

/**
 * Shows the track at `time`: the slider, the marker at the position then (`index`: the last one at
 * or before it, unless given), the line travelled so far, the details. The map follows the marker
 * when it leaves the view (`follow`).
 */
function showTrackAt(time: number, index = indexAt(time), follow = true): void {
  const first = trackPoints[0];
  if (first === undefined) return;
  trackIndex = index;
  const p = trackPoints[trackIndex]!;
  const n = trackPoints.length;
  slider.value = String(time - first.time);
  const when = fmtSecond(time);
  slider.setAttribute('aria-valuetext', `${when}, position ${trackIndex + 1} of ${n}`);
  $('track-time-value').textContent = when;
  // The map once a frame, however fast the slider moves (a day at 1 Hz is 86,400 positions to redraw).
  if (!drawQueued) {
    drawQueued = true;
    requestAnimationFrame(() => {
      drawQueued = false;
      const q = trackPoints[trackIndex];
      if (q === undefined) return;
      trackMarker?.setLatLng([q.lat, q.lon]);
      trackMarker?.setTooltipContent(fmtSecond(q.time).slice(11, 19));
      trackDone?.setLatLngs(trackPoints.slice(0, trackIndex + 1).map((r) => [r.lat, r.lon] as [number, number]));
      if (drawFollows && !map.getBounds().contains([q.lat, q.lon])) map.panTo([q.lat, q.lon]);
    });
  }
  drawFollows = follow;

  const details: [string, string][] = [
    ['Position', `${trackIndex + 1} of ${n}`],
    ['Reported at', fmtSecond(p.time)],
    ['Latitude, longitude', `${p.lat.toFixed(5)}, ${p.lon.toFixed(5)}`],
  ];
  if (p.speedKmh !== undefined) details.push(['Speed', `${Math.round(p.speedKmh * 10) / 10} km/h`]);
  if (p.heading !== undefined) details.push(['Heading', `${Math.round(p.heading)}°`]);
  $('track-point').replaceChildren(
    ...details.map(([term, value]) => {
      const div = document.createElement('div');
      div.append(Object.assign(document.createElement('dt'), { textContent: term }));
      div.append(Object.assign(document.createElement('dd'), { textContent: value }));
      return div;
    }),
  );
}

/** Draws a track: the whole line dimmed, the part up to the chosen time over it, a marker at the chosen position. */
function drawTrack(points: TrackPoint[]): void {
  trackLayer?.remove();
  trackPoints = points;
  trackDone = undefined;
  trackMarker = undefined;
  const block = $('track-time');
  const first = points[0];
  const last = points[points.length - 1];
  if (first === undefined || last === undefined) {
    block.hidden = true;
    trackLayer = undefined;
    return;
  }
  const line = points.map((p) => [p.lat, p.lon] as [number, number]);
  trackLayer = L.layerGroup().addTo(map);
  if (points.length > 1) {
    L.polyline(line, { color: '#b00020', weight: 3, opacity: 0.35, className: 'track-line', interactive: false }).addTo(trackLayer);
    trackDone = L.polyline(line, { color: '#b00020', weight: 4, className: 'track-done', interactive: false }).addTo(trackLayer);
  }
  trackMarker = L.circleMarker(line[line.length - 1]!, {
    pane: 'track-cursor',
    radius: 8,
    color: '#b00020',
    weight: 3,
    fillColor: '#fff',
    fillOpacity: 1,
    className: 'track-marker',
    interactive: false,
  })
    .bindTooltip('', { permanent: true, direction: 'top', offset: [0, -8], className: 'track-tooltip' })
    .addTo(trackLayer);
  slider.min = '0';
  slider.max = String(last.time - first.time);
  // One position: nothing to slide along; its details stay.
  slider.parentElement!.hidden = points.length < 2;
  $('track-slider-help').hidden = points.length < 2;
  block.hidden = false;
  fitTo(L.latLngBounds(line).pad(0.2), 14);
  // The newest position: the whole line travelled, nothing dimmed yet (and the map fits the track).
  showTrackAt(last.time, points.length - 1, false);
}

slider.addEventListener('input', () => {
  const first = trackPoints[0];
  if (first !== undefined) showTrackAt(first.time + Number(slider.value));
});
// The arrows step from position to position (a step of the range would be a millisecond); Page Up
// and Down, Home and End keep the range's own behaviour (a tenth of the period, the ends).
slider.addEventListener('keydown', (e) => {
  const step = { ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1 }[e.key];
  if (step === undefined || trackPoints.length === 0) return;
  e.preventDefault();
  const first = trackPoints[0]!;
  const chosen = first.time + Number(slider.value);
  const at = trackPoints[trackIndex]!;
  // Between two positions (after a drag or Page Up), Left goes back to the position shown.
  const next = step < 0 && chosen > at.time ? trackIndex : Math.min(trackPoints.length - 1, Math.max(0, trackIndex + step));
  showTrackAt(trackPoints[next]!.time, next);
});

$<HTMLFormElement>('track-form').addEventListener('submit', (e) => {
  e.preventDefault();
  void (async () => {
    const id = $<HTMLSelectElement>('track-vehicle').value;
    if (id === '') return;
    const q = new URLSearchParams({ format: 'geojson' });
    const from = $<HTMLInputElement>('track-from').value;
    const to = $<HTMLInputElement>('track-to').value;
    if (from !== '') q.set('from', new Date(from).toISOString());
    if (to !== '') q.set('to', new Date(to).toISOString());
    const res = await api(`/api/v5/vehicles/${id}/track?${q.toString()}`);
    if (!res.ok) {
      $('track-status').textContent = `Track: ${await errorText(res)}`;
      return;
    }
    const points = pointsOf((await res.json()) as GeoJSON.FeatureCollection);
    drawTrack(points);
    $('track-status').textContent = `Track of ${points.length} position${points.length === 1 ? '' : 's'}.`;
  })();
});

// --- Trips ---------------------------------------------------------------------------------

let nextTrips: string | null = null;
async function loadTrips(path: string): Promise<void> {
  const res = await api(path);
  const status = $('trips-status');
  if (!res.ok) {
    status.textContent = `Trips: ${await errorText(res)}`;
    return;
  }
  const page = (await res.json()) as { items: { id: string; name?: string; status?: string }[]; next: string | null };
  const body = $('trips');
  body.replaceChildren(
    ...page.items.map((t) => {
      const tr = document.createElement('tr');
      // A row is focusable (Tab) and selects its trip with a click, Enter or Space.
      tr.tabIndex = 0;
      tr.dataset.trip = t.id;
      tr.setAttribute('aria-selected', String(t.id === selectedTrip));
      tr.setAttribute('aria-label', `Trip ${t.name ?? t.id}${t.status ? `, ${t.status}` : ''}: Enter to show its stops and actions`);
      for (const text of [t.name ?? '', t.status ?? '', t.id]) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.append(td);
      }
      tr.addEventListener('click', () => void selectTrip(t.id));
      tr.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          void selectTrip(t.id);
        }
      });
      return tr;
    }),
  );
  nextTrips = page.next;
  $<HTMLButtonElement>('trips-next').disabled = nextTrips === null;
  status.textContent = `${page.items.length} trip${page.items.length === 1 ? '' : 's'} on this page${nextTrips === null ? '' : '; more on the next'}.`;
}
const firstTrips = () => {
  const q = new URLSearchParams({ limit: '20' });
  const s = $<HTMLSelectElement>('trip-status').value;
  if (s !== '') q.set('status', s);
  return loadTrips(`/api/v5/trips?${q.toString()}`);
};
$<HTMLFormElement>('trips-form').addEventListener('submit', (e) => {
  e.preventDefault();
  void firstTrips();
});
$('trips-first').addEventListener('click', () => void firstTrips());
$('trips-next').addEventListener('click', () => {
  if (nextTrips !== null) void loadTrips(nextTrips);
});

// --- One trip: its stops on the map, its actions with their lifecycles ---------------------

interface Association {
  associationType?: string;
  uuid?: string;
  entity?: Record<string, unknown>;
}
interface Located {
  name?: string;
  id?: string;
  lat?: number;
  lon?: number;
}
interface ActionRow {
  depth: number;
  action: Record<string, unknown>;
  location?: Located;
  stop?: number;
}

let selectedTrip: string | undefined;
let tripLayer: L.LayerGroup | undefined;
const LOCATED = new Set(['stop', 'load', 'unload']);

/** An association's entity: inline as is, a reference fetched from `/api/v5/{kind}/{uuid}` (undefined when it cannot be). */
async function resolve(a: unknown, kind: string): Promise<Record<string, unknown> | undefined> {
  if (typeof a !== 'object' || a === null) return undefined;
  const assoc = a as Association;
  if (assoc.entity !== undefined) return assoc.entity;
  if (assoc.associationType === 'reference' && typeof assoc.uuid === 'string') {
    const res = await api(`/api/v5/${kind}/${encodeURIComponent(assoc.uuid)}`);
    if (res.ok) return (await res.json()) as Record<string, unknown>;
  }
  return undefined;
}

/** The referenced locations of the selected trip, each fetched once (its actions' versions often share one). */
let locationCache = new Map<string, Promise<Record<string, unknown> | undefined>>();

async function locationOf(action: Record<string, unknown>): Promise<Located | undefined> {
  if (action.location === undefined) return undefined;
  const ref = action.location as Association;
  let loc: Record<string, unknown> | undefined;
  if (ref.entity === undefined && typeof ref.uuid === 'string') {
    const key = ref.uuid.toLowerCase();
    const cached = locationCache.get(key) ?? resolve(ref, 'locations');
    locationCache.set(key, cached);
    loc = await cached;
  } else {
    loc = await resolve(ref, 'locations');
  }
  if (loc === undefined) return { id: ref.uuid };
  const geo = loc.geoReference as { type?: string; lat?: number; lon?: number } | undefined;
  const point = geo?.type === 'latLonPointGeoReference' && typeof geo.lat === 'number' && typeof geo.lon === 'number';
  return {
    id: typeof loc.id === 'string' ? loc.id : ref.uuid,
    name: typeof loc.name === 'string' ? loc.name : undefined,
    ...(point ? { lat: geo.lat, lon: geo.lon } : {}),
  };
}

/** The actions of a trip in order (by sequenceNr, else as listed), each followed by its own actions. */
async function flatten(list: unknown, depth: number, out: ActionRow[]): Promise<void> {
  if (!Array.isArray(list)) return;
  const actions = (await Promise.all(list.map((a) => resolve(a, 'actions')))).filter((a): a is Record<string, unknown> => a !== undefined);
  const seq = (a: Record<string, unknown>) => (typeof a.sequenceNr === 'number' ? a.sequenceNr : Number.MAX_SAFE_INTEGER);
  actions.sort((a, b) => seq(a) - seq(b)); // a stable sort: unnumbered actions keep their order
  for (const action of actions) {
    out.push({ depth, action, location: await locationOf(action) });
    await flatten(action.actions, depth + 1, out);
  }
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');

function fmtTime(v: unknown): string {
  if (typeof v !== 'string') return '';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? v : d.toISOString().slice(0, 16).replace('T', ' ');
}

function timeWindow(action: Record<string, unknown>): string {
  const parts: string[] = [];
  if (action.startTime !== undefined || action.endTime !== undefined)
    parts.push(`${fmtTime(action.startTime)} – ${fmtTime(action.endTime)}`);
  const c = (action.constraint as Association | undefined)?.entity?.value as
    { type?: string; startTime?: unknown; endTime?: unknown } | undefined;
  if (c?.type === 'timeWindowConstraint') parts.push(`window ${fmtTime(c.startTime)} – ${fmtTime(c.endTime)}`);
  return parts.join('; ');
}

async function selectTrip(id: string): Promise<void> {
  selectedTrip = id;
  locationCache = new Map();
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
  if (selectedTrip !== id) return; // another trip was chosen meanwhile

  tripLayer?.remove();
  tripLayer = L.layerGroup().addTo(map);
  const points: [number, number][] = [];
  for (const row of rows) {
    const loc = row.location;
    if (!LOCATED.has(str(row.action.actionType)) || loc?.lat === undefined || loc.lon === undefined) continue;
    row.stop = points.length + 1;
    points.push([loc.lat, loc.lon]);
    const label = `Stop ${row.stop}: ${loc.name ?? loc.id ?? ''}`;
    const icon = L.divIcon({ className: 'stop-marker', html: String(row.stop), iconSize: [22, 22] });
    L.marker([loc.lat, loc.lon], { icon, title: label, alt: label, keyboard: true, zIndexOffset: 1000 }).addTo(tripLayer);
  }
  const body = $('trip-actions');
  body.replaceChildren(
    ...rows.map((row) => {
      const tr = document.createElement('tr');
      if (row.depth > 0) tr.className = 'nested';
      const a = row.action;
      const loc = row.location === undefined ? '' : (row.location.name ?? row.location.id ?? '');
      for (const text of [row.stop === undefined ? '' : String(row.stop), str(a.actionType), str(a.lifecycle), loc, timeWindow(a)]) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }),
  );
  $('trip-actions-table').hidden = rows.length === 0;
  const name = typeof trip.name === 'string' ? trip.name : id;
  status.textContent = `${name}: ${rows.length} action${rows.length === 1 ? '' : 's'}, ${points.length} stop${points.length === 1 ? '' : 's'} on the map.`;
  if (points.length > 0) fitTo(L.latLngBounds(points).pad(0.3), 12);
  await showLifecycles(id, rows);
}

// --- One trip's actions, their lifecycle versions side by side -------------------------------

/** The column of a version without a lifecycle (it ranks below all of them). */
const NO_LIFECYCLE = '';
const UUID_AT_END = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The stored versions of an action, by lifecycle: `GET /api/v5/actions/{id}?lifecycle=` for each
 * lifecycle (a 404 is a lifecycle it has no version of). An action without an id (or whose id is a
 * URI not ending in a UUID) has only the copy the trip holds; so has a version without a lifecycle,
 * which no `?lifecycle=` asks for.
 */
async function versionsOf(action: Record<string, unknown>): Promise<Map<string, Record<string, unknown>>> {
  const out = new Map<string, Record<string, unknown>>();
  const uuid = typeof action.id === 'string' ? UUID_AT_END.exec(action.id)?.[0] : undefined;
  if (uuid !== undefined) {
    const found = await Promise.all(
      LIFECYCLES.map(async (lc) => {
        const res = await api(`/api/v5/actions/${uuid}?lifecycle=${lc}`);
        return res.ok ? ([lc, (await res.json()) as Record<string, unknown>] as const) : undefined;
      }),
    );
    for (const f of found) if (f !== undefined) out.set(f[0], f[1]);
  }
  const held = str(action.lifecycle);
  if (!out.has(held)) out.set(held, action);
  return out;
}

/** What a cell of the side-by-side table says of one version: its time window, then its location. */
async function versionText(version: Record<string, unknown>): Promise<[string, string]> {
  const loc = await locationOf(version);
  return [timeWindow(version), loc === undefined ? '' : (loc.name ?? loc.id ?? '')];
}

/**
 * The trip's actions (rows, as in the actions table) against the lifecycles any of them has a
 * version of (columns, earliest first): each cell the times and location of that version. A cell
 * that differs from the one before it in its row (an earlier lifecycle) is marked as changed.
 */
async function showLifecycles(id: string, rows: ActionRow[]): Promise<void> {
  const status = $('lifecycles-status');
  const table = $('lifecycles-table');
  if (rows.length === 0) {
    table.hidden = true;
    status.textContent = 'The trip has no actions.';
    return;
  }
  status.textContent = "Fetching each action's versions…";
  const versions = await Promise.all(rows.map((r) => versionsOf(r.action)));
  const texts = await Promise.all(
    versions.map(async (v) => new Map(await Promise.all([...v].map(async ([lc, doc]) => [lc, await versionText(doc)] as const)))),
  );
  if (selectedTrip !== id) return;
  const columns = [NO_LIFECYCLE, ...LIFECYCLES].filter((lc) => versions.some((v) => v.has(lc)));
  const label = (lc: string) => (lc === NO_LIFECYCLE ? 'no lifecycle' : lc);

  const head = $('lifecycles-head');
  head.replaceChildren(
    ...['Stop', 'Action', ...columns.map(label)].map((text) =>
      Object.assign(document.createElement('th'), { scope: 'col', textContent: text }),
    ),
  );
  $('lifecycles').replaceChildren(
    ...rows.map((row, i) => {
      const tr = document.createElement('tr');
      if (row.depth > 0) tr.className = 'nested';
      tr.append(Object.assign(document.createElement('td'), { textContent: row.stop === undefined ? '' : String(row.stop) }));
      tr.append(Object.assign(document.createElement('th'), { scope: 'row', textContent: str(row.action.actionType) }));
      let before: string | undefined;
      for (const lc of columns) {
        const td = document.createElement('td');
        const text = texts[i]!.get(lc);
        if (text === undefined) {
          td.className = 'absent';
          td.append('—', Object.assign(document.createElement('span'), { className: 'visually-hidden', textContent: 'no version' }));
        } else {
          const [time, place] = text;
          const key = `${time}\n${place}`;
          if (before !== undefined && key !== before) {
            td.className = 'changed';
            td.append(Object.assign(document.createElement('span'), { className: 'visually-hidden', textContent: 'changed: ' }));
          }
          before = key;
          td.append(Object.assign(document.createElement('span'), { className: 'when', textContent: time === '' ? 'no time' : time }));
          if (place !== '') td.append(Object.assign(document.createElement('span'), { className: 'where', textContent: place }));
        }
        tr.append(td);
      }
      return tr;
    }),
  );
  const count = versions.reduce((n, v) => n + v.size, 0);
  $('lifecycles-caption').textContent =
    columns.length === 1
      ? `Only one lifecycle is stored for these actions (${label(columns[0]!)}): nothing to set beside it yet.`
      : `Each action's versions, ${columns.map(label).join(' | ')}: a cell that differs from the one on its left is marked as changed.`;
  table.hidden = false;
  status.textContent = `${count} version${count === 1 ? '' : 's'} of ${rows.length} action${rows.length === 1 ? '' : 's'} in ${columns.length} lifecycle${columns.length === 1 ? '' : 's'}.`;
}

// --- The validator -------------------------------------------------------------------------

const kindSelect = $<HTMLSelectElement>('validate-kind');
for (const k of KIND_SEGMENTS) {
  const option = document.createElement('option');
  option.value = k;
  option.textContent = k;
  kindSelect.append(option);
}
kindSelect.value = 'vehicles';
$<HTMLFormElement>('validate-form').addEventListener('submit', (e) => {
  e.preventDefault();
  void (async () => {
    const out = $('validate-result');
    const res = await api(`/api/v5/validate/${kindSelect.value}`, { method: 'POST', body: $<HTMLTextAreaElement>('validate-doc').value });
    if (res.ok) {
      out.replaceChildren(Object.assign(document.createElement('p'), { className: 'ok', textContent: 'The document follows the model.' }));
      return;
    }
    let items: ErrorItem[];
    try {
      items = (await res.json()) as ErrorItem[];
    } catch {
      items = [{ type: 'error', message: `HTTP ${res.status}` }];
    }
    const list = document.createElement('ul');
    list.className = 'errors';
    for (const i of items) {
      const li = document.createElement('li');
      if (i.field !== undefined) li.append(Object.assign(document.createElement('code'), { textContent: i.field }), ': ');
      li.append(i.message);
      list.append(li);
    }
    const head = Object.assign(document.createElement('p'), {
      textContent: `${items.length} problem${items.length === 1 ? '' : 's'}:`,
    });
    out.replaceChildren(head, list);
  })();
});

// --- The token -----------------------------------------------------------------------------

async function start(): Promise<void> {
  if (token === '') return;
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
  token = $<HTMLInputElement>('token').value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  $<HTMLInputElement>('token').value = '';
  void start();
});
void start();
