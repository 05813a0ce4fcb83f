/** Following changes: the stream (EventSource, with a ticket) moves the vehicles as their location events arrive. */
import { api } from './api.js';
import { positionOf } from './positions.js';
import { state } from './state.js';
import { markersDrawn, placeVehicle, setMapStatus } from './vehicles.js';

/** Opens the stream (closing the one open): a ticket from POST /api/v5/stream/tickets, then GET /api/v5/stream. */
export async function follow(): Promise<void> {
  state.stream?.close();
  state.stream = undefined;
  const res = await api('/api/v5/stream/tickets', { method: 'POST' });
  if (!res.ok) return;
  const { ticket } = (await res.json()) as { ticket: string };
  const source = new EventSource(`/api/v5/stream?kinds=events&ticket=${encodeURIComponent(ticket)}`);
  state.stream = source;
  source.addEventListener('put', (e: MessageEvent<string>) => {
    const item = JSON.parse(e.data) as { document?: Record<string, unknown> };
    const p = item.document ? positionOf(item.document) : undefined;
    if (p !== undefined && placeVehicle(p)) {
      setMapStatus();
      markersDrawn();
    }
  });
  // A ticket is good for a minute: on an error, take a new one rather than let EventSource retry with the old.
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED && state.stream === source) setTimeout(() => void follow(), 2000);
  });
  setMapStatus();
}
