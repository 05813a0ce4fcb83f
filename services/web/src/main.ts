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

const KINDS = [
  'vehicles',
  'routes',
  'sensors',
  'locations',
  'actors',
  'consignments',
  'trips',
  'events',
  'actions',
  'goods',
  'documents',
  'transportOrders',
  'constraints',
];
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

const markers = new Map<string, { marker: L.Marker; time: number }>();
const icon = L.divIcon({ className: 'vehicle-marker', iconSize: [14, 14] });
let trackLayer: L.GeoJSON | undefined;

function placeVehicle(p: Position): void {
  const time = Date.parse(p.time);
  const known = markers.get(p.vehicle);
  if (known !== undefined) {
    if (time < known.time) return; // an older event never moves a vehicle back
    known.marker.setLatLng([p.lat, p.lon]);
    known.time = time;
    return;
  }
  const marker = L.marker([p.lat, p.lon], { icon, title: `Vehicle ${p.vehicle}`, keyboard: true, alt: `Vehicle ${p.vehicle}` }).addTo(map);
  marker.getElement()?.setAttribute('data-vehicle', p.vehicle);
  marker.on('click keypress', () => chooseVehicle(p.vehicle));
  markers.set(p.vehicle, { marker, time });
  const option = document.createElement('option');
  option.value = p.vehicle;
  option.textContent = p.vehicle;
  $<HTMLSelectElement>('track-vehicle').append(option);
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
  for (const p of body.items) placeVehicle(p);
  if (body.items.length > 0) {
    map.fitBounds(L.latLngBounds(body.items.map((p) => [p.lat, p.lon] as [number, number])).pad(0.2), { maxZoom: 10 });
  }
  setMapStatus();
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
    if (p !== undefined) {
      const isNew = !markers.has(p.vehicle);
      placeVehicle(p);
      if (isNew) setMapStatus();
    }
  });
  // A ticket is good for a minute: on an error, take a new one rather than let EventSource retry with the old.
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED && stream === source) setTimeout(() => void follow(), 2000);
  });
  setMapStatus();
}

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
    const fc = (await res.json()) as GeoJSON.FeatureCollection;
    trackLayer?.remove();
    const line = fc.features.filter((f) => f.geometry.type === 'LineString');
    trackLayer = L.geoJSON(line, { style: { color: '#b00020', weight: 3, className: 'track-line' } }).addTo(map);
    const points = fc.features.length - line.length;
    $('track-status').textContent = `Track of ${points} position${points === 1 ? '' : 's'}.`;
    if (points > 0) map.fitBounds(trackLayer.getBounds().pad(0.2), { maxZoom: 14 });
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
      for (const text of [t.name ?? '', t.status ?? '', t.id]) {
        const td = document.createElement('td');
        td.textContent = text;
        tr.append(td);
      }
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

// --- The validator -------------------------------------------------------------------------

const kindSelect = $<HTMLSelectElement>('validate-kind');
for (const k of KINDS) {
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
