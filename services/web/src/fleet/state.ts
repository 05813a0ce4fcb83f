/**
 * The fleet page's state, in one object: what the sections read and change (the token, the
 * vehicles on the map, the stream, the track and its slider, the trips' paging, the trip shown).
 * Nothing else of the page is kept between events, but the map and its layers' options (map.ts).
 */
import type L from 'leaflet';
import type { TrackPoint } from './track-points.js';

/** A vehicle on the map: its marker and the time of the position it shows. */
export interface VehicleMarker {
  marker: L.CircleMarker;
  time: number;
}

export interface FleetState {
  /** The API token of this tab (sessionStorage: gone with it), '' until typed. */
  token: string;
  /** The vehicles on the map, by id. */
  readonly vehicles: Map<string, VehicleMarker>;
  /** Live moves applied (document.body.dataset.moves). */
  moves: number;
  /** The stream that moves them, while it is open. */
  stream: EventSource | undefined;
  readonly track: {
    /** The track's line, the part travelled and the slider's marker. */
    layer: L.LayerGroup | undefined;
    /** The part of the line up to the chosen time, drawn over the whole line (which is dimmed). */
    done: L.Polyline | undefined;
    marker: L.CircleMarker | undefined;
    points: TrackPoint[];
    /** The index in points of the position shown. */
    index: number;
    /** The map's part of showing a time waits for the next frame; `drawFollows`: whether it pans to the marker. */
    drawQueued: boolean;
    drawFollows: boolean;
  };
  /** The next page of the trips list, or null. */
  nextTrips: string | null;
  /** The trip shown, its stops' layer, and its referenced locations, each fetched once (its actions' versions often share one). */
  selectedTrip: string | undefined;
  tripLayer: L.LayerGroup | undefined;
  locations: Map<string, Promise<Record<string, unknown> | undefined>>;
}

export const TOKEN_KEY = 'otm-token';

export const state: FleetState = {
  token: sessionStorage.getItem(TOKEN_KEY) ?? '',
  vehicles: new Map(),
  moves: 0,
  stream: undefined,
  track: { layer: undefined, done: undefined, marker: undefined, points: [], index: 0, drawQueued: false, drawFollows: false },
  nextTrips: null,
  selectedTrip: undefined,
  tripLayer: undefined,
  locations: new Map(),
};
