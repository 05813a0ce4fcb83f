/**
 * A vehicle's track (GET /api/v5/vehicles/{id}/track?format=geojson), with a time slider: a marker
 * at the position reported last at or before the chosen time, the line up to there drawn in full,
 * the rest dimmed, and the position's details (docs/web.md, "Track").
 */
import L from 'leaflet';
import type { FeatureCollection } from 'geojson';
import { $, api, errorText } from './api.js';
import { count, fmtSecond } from './format.js';
import { fitTo, map } from './map.js';
import { state } from './state.js';
import {
  ARROW_STEPS,
  activityQuery,
  indexAt,
  pointDetails,
  pointsOf,
  stepTarget,
  stopLabel,
  stopsOf,
  trackQuery,
  valueText,
  type TrackPoint,
} from './track-points.js';

const slider = () => $<HTMLInputElement>('track-slider');

/** The map's part of showing the track at a time: once a frame, however fast the slider moves (a day at 1 Hz is 86,400 positions). */
function drawTrackCursor(): void {
  const track = state.track;
  if (track.drawQueued) return;
  track.drawQueued = true;
  requestAnimationFrame(() => {
    track.drawQueued = false;
    const q = track.points[track.index];
    if (q === undefined) return;
    track.marker?.setLatLng([q.lat, q.lon]);
    track.marker?.setTooltipContent(fmtSecond(q.time).slice(11, 19));
    track.done?.setLatLngs(track.points.slice(0, track.index + 1).map((r) => [r.lat, r.lon] as [number, number]));
    if (track.drawFollows && !map.getBounds().contains([q.lat, q.lon])) map.panTo([q.lat, q.lon]);
  });
}

/**
 * Shows the track at `time`: the slider, the marker at the position then (`index`: the last one at
 * or before it, unless given), the line travelled so far, the details. The map follows the marker
 * when it leaves the view (`follow`).
 */
function showTrackAt(time: number, index = indexAt(state.track.points, time), follow = true): void {
  const track = state.track;
  const first = track.points[0];
  if (first === undefined) return;
  track.index = index;
  const p = track.points[index]!;
  const n = track.points.length;
  slider().value = String(time - first.time);
  slider().setAttribute('aria-valuetext', valueText(time, index, n));
  $('track-time-value').textContent = fmtSecond(time);
  drawTrackCursor();
  track.drawFollows = follow;
  $('track-point').replaceChildren(
    ...pointDetails(p, index, n).map(([term, value]) => {
      const div = document.createElement('div');
      div.append(Object.assign(document.createElement('dt'), { textContent: term }));
      div.append(Object.assign(document.createElement('dd'), { textContent: value }));
      return div;
    }),
  );
}

/** Draws a track: the whole line dimmed, the part up to the chosen time over it, a marker at the chosen position. */
function drawTrack(points: TrackPoint[]): void {
  const track = state.track;
  track.layer?.remove();
  track.points = points;
  track.done = undefined;
  track.marker = undefined;
  const block = $('track-time');
  const first = points[0];
  const last = points[points.length - 1];
  if (first === undefined || last === undefined) {
    block.hidden = true;
    track.layer = undefined;
    return;
  }
  const line = points.map((p) => [p.lat, p.lon] as [number, number]);
  track.layer = L.layerGroup().addTo(map);
  if (points.length > 1) {
    L.polyline(line, { color: '#b00020', weight: 3, opacity: 0.35, className: 'track-line', interactive: false }).addTo(track.layer);
    track.done = L.polyline(line, { color: '#b00020', weight: 4, className: 'track-done', interactive: false }).addTo(track.layer);
  }
  track.marker = L.circleMarker(line[line.length - 1]!, {
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
    .addTo(track.layer);
  slider().min = '0';
  slider().max = String(last.time - first.time);
  // One position: nothing to slide along; its details stay.
  slider().parentElement!.hidden = points.length < 2;
  $('track-slider-help').hidden = points.length < 2;
  block.hidden = false;
  fitTo(L.latLngBounds(line).pad(0.2), 14);
  // The newest position: the whole line travelled, nothing dimmed yet (and the map fits the track).
  showTrackAt(last.time, points.length - 1, false);
}

/**
 * The vehicle's stops over the track's period (its activity), as markers on the track's layer with
 * their times in a tooltip; resolves how many, or undefined when they could not be read.
 */
async function drawStops(id: string, points: TrackPoint[]): Promise<number | undefined> {
  const q = activityQuery(points);
  const layer = state.track.layer;
  if (q === undefined || layer === undefined) return undefined;
  const res = await api(`/api/v5/vehicles/${id}/activity?${q.toString()}`);
  if (!res.ok || state.track.layer !== layer) return undefined;
  const stops = stopsOf(await res.json());
  for (const s of stops) {
    L.circleMarker([s.lat, s.lon], {
      radius: 7,
      color: '#1b5e20',
      weight: 2,
      fillColor: '#a5d6a7',
      fillOpacity: 0.9,
      className: 'track-stop',
    })
      .bindTooltip(stopLabel(s))
      .addTo(layer);
  }
  return stops.length;
}

/** The track form and the slider's pointer and keys. */
export function initTrack(): void {
  const points = () => state.track.points;
  slider().addEventListener('input', () => {
    const first = points()[0];
    if (first !== undefined) showTrackAt(first.time + Number(slider().value));
  });
  // The arrows step from position to position; Page Up and Down, Home and End keep the range's own
  // behaviour (a tenth of the period, the ends).
  slider().addEventListener('keydown', (e) => {
    const step = ARROW_STEPS.get(e.key);
    if (step === undefined || points().length === 0) return;
    e.preventDefault();
    const next = stepTarget(points(), state.track.index, points()[0]!.time + Number(slider().value), step);
    showTrackAt(points()[next]!.time, next);
  });

  $<HTMLFormElement>('track-form').addEventListener('submit', (e) => {
    e.preventDefault();
    void (async () => {
      const id = $<HTMLSelectElement>('track-vehicle').value;
      if (id === '') return;
      const q = trackQuery($<HTMLInputElement>('track-from').value, $<HTMLInputElement>('track-to').value);
      const res = await api(`/api/v5/vehicles/${id}/track?${q.toString()}`);
      if (!res.ok) {
        $('track-status').textContent = `Track: ${await errorText(res)}`;
        return;
      }
      const track = pointsOf((await res.json()) as FeatureCollection);
      drawTrack(track);
      $('track-status').textContent = `Track of ${count(track.length, 'position')}.`;
      const stops = await drawStops(id, track);
      if (stops) $('track-status').textContent = `Track of ${count(track.length, 'position')}. ${count(stops, 'stop')}.`;
    })();
  });
}
