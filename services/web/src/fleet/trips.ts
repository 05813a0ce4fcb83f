/** The trips: a table of GET /api/v5/trips, filtered by status, a page at a time (`next`); a row selects its trip. */
import { $, api, errorText } from './api.js';
import { count } from './format.js';
import { state } from './state.js';
import { selectTrip } from './trip.js';

interface TripItem {
  id: string;
  name?: string;
  status?: string;
}

async function loadTrips(path: string): Promise<void> {
  const res = await api(path);
  const status = $('trips-status');
  if (!res.ok) {
    status.textContent = `Trips: ${await errorText(res)}`;
    return;
  }
  const page = (await res.json()) as { items: TripItem[]; next: string | null };
  $('trips').replaceChildren(...page.items.map(tripRow));
  state.nextTrips = page.next;
  $<HTMLButtonElement>('trips-next').disabled = state.nextTrips === null;
  status.textContent = `${count(page.items.length, 'trip')} on this page${state.nextTrips === null ? '' : '; more on the next'}.`;
}

/** A trip's row: focusable (Tab), selecting its trip with a click, Enter or Space. */
function tripRow(t: TripItem): HTMLTableRowElement {
  const tr = document.createElement('tr');
  tr.tabIndex = 0;
  tr.dataset.trip = t.id;
  tr.setAttribute('aria-selected', String(t.id === state.selectedTrip));
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
}

/** The first page of the trips, with the status chosen. */
export function firstTrips(): Promise<void> {
  const q = new URLSearchParams({ limit: '20' });
  const s = $<HTMLSelectElement>('trip-status').value;
  if (s !== '') q.set('status', s);
  return loadTrips(`/api/v5/trips?${q.toString()}`);
}

export function initTrips(): void {
  $<HTMLFormElement>('trips-form').addEventListener('submit', (e) => {
    e.preventDefault();
    void firstTrips();
  });
  $('trips-first').addEventListener('click', () => void firstTrips());
  $('trips-next').addEventListener('click', () => {
    if (state.nextTrips !== null) void loadTrips(state.nextTrips);
  });
}
