/**
 * One trip's actions, their lifecycle versions side by side: rows as in the actions table, a
 * column for each lifecycle any of them has a version of, each cell that version's times and
 * place, a cell that differs from the one on its left marked (lifecycle-grid.ts).
 */
import { $, api } from './api.js';
import { locationOf } from './entities.js';
import { str } from './format.js';
import {
  actionUuid,
  columnLabel,
  LIFECYCLES,
  lifecycleCaption,
  lifecycleCells,
  lifecycleColumns,
  lifecycleStatus,
  type Cell,
} from './lifecycle-grid.js';
import { state } from './state.js';
import { placeName, timeWindow, type ActionRow } from './trip-actions.js';

/**
 * The stored versions of an action, by lifecycle: `GET /api/v5/actions/{id}?lifecycle=` for each
 * lifecycle (a 404 is a lifecycle it has no version of). An action without an id (or whose id is a
 * URI not ending in a UUID) has only the copy the trip holds; so has a version without a lifecycle,
 * which no `?lifecycle=` asks for.
 */
async function versionsOf(action: Record<string, unknown>): Promise<Map<string, Record<string, unknown>>> {
  const out = new Map<string, Record<string, unknown>>();
  const uuid = actionUuid(action.id);
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
  return [timeWindow(version), placeName(await locationOf(version))];
}

const el = <K extends keyof HTMLElementTagNameMap>(tag: K, props: Partial<HTMLElementTagNameMap[K]>): HTMLElementTagNameMap[K] =>
  Object.assign(document.createElement(tag), props);

function cellElement(cell: Cell): HTMLTableCellElement {
  const td = document.createElement('td');
  if (cell.absent) {
    td.className = 'absent';
    td.append('—', el('span', { className: 'visually-hidden', textContent: 'no version' }));
    return td;
  }
  if (cell.changed) {
    td.className = 'changed';
    td.append(el('span', { className: 'visually-hidden', textContent: 'changed: ' }));
  }
  td.append(el('span', { className: 'when', textContent: cell.time === '' ? 'no time' : cell.time }));
  if (cell.place !== '') td.append(el('span', { className: 'where', textContent: cell.place }));
  return td;
}

/** Fills the lifecycles table of trip `id` (unless another trip was chosen meanwhile). */
export async function showLifecycles(id: string, rows: ActionRow[]): Promise<void> {
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
  if (state.selectedTrip !== id) return;
  const columns = lifecycleColumns(versions);
  $('lifecycles-head').replaceChildren(
    ...['Stop', 'Action', ...columns.map(columnLabel)].map((text) => el('th', { scope: 'col', textContent: text })),
  );
  $('lifecycles').replaceChildren(
    ...rows.map((row, i) => {
      const tr = document.createElement('tr');
      if (row.depth > 0) tr.className = 'nested';
      tr.append(el('td', { textContent: row.stop === undefined ? '' : String(row.stop) }));
      tr.append(el('th', { scope: 'row', textContent: str(row.action.actionType) }));
      tr.append(...lifecycleCells(texts[i]!, columns).map(cellElement));
      return tr;
    }),
  );
  $('lifecycles-caption').textContent = lifecycleCaption(columns);
  table.hidden = false;
  status.textContent = lifecycleStatus(
    versions.reduce((n, v) => n + v.size, 0),
    rows.length,
    columns.length,
  );
}
