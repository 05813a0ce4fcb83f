/**
 * The lifecycles side by side: which columns, what each cell says, what changed from the cell on
 * its left. Pure (the versions fetched are given): unit-tested in test/lifecycle-grid.test.ts.
 */
// Types only: nothing of the model's code comes into the bundle.
import type { Lifecycle } from '@otm/model';
import { count } from './format.js';

/** The model's lifecycles by rank (the service's order of versions): a Record, so the compiler checks it names them all. */
const LIFECYCLE_RANK: Record<Lifecycle, number> = { requested: 1, planned: 2, projected: 3, actual: 4, realized: 5 };
/** The lifecycles, earliest first. */
export const LIFECYCLES = (Object.keys(LIFECYCLE_RANK) as Lifecycle[]).sort((a, b) => LIFECYCLE_RANK[a] - LIFECYCLE_RANK[b]);
/** The column of a version without a lifecycle (it ranks below all of them). */
export const NO_LIFECYCLE = '';

const UUID_AT_END = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The UUID an action's id ends in (its id may be a URI), or undefined: then only the copy the trip holds can be shown. */
export function actionUuid(id: unknown): string | undefined {
  return typeof id === 'string' ? UUID_AT_END.exec(id)?.[0] : undefined;
}

/** The columns: the lifecycles any action has a version of, earliest first (no lifecycle before all). */
export function lifecycleColumns(versions: readonly ReadonlyMap<string, unknown>[]): string[] {
  return [NO_LIFECYCLE, ...LIFECYCLES].filter((lc) => versions.some((v) => v.has(lc)));
}

/** A column's heading. */
export const columnLabel = (lc: string): string => (lc === NO_LIFECYCLE ? 'no lifecycle' : lc);

/** A cell: no version of that lifecycle, or one's time window and place, marked when it differs from the last version on its left. */
export type Cell = { absent: true } | { absent: false; time: string; place: string; changed: boolean };

/** The cells of one action's row, from the texts ([time window, place]) of its versions by lifecycle. */
export function lifecycleCells(texts: ReadonlyMap<string, readonly [string, string]>, columns: readonly string[]): Cell[] {
  let before: string | undefined;
  return columns.map((lc): Cell => {
    const text = texts.get(lc);
    if (text === undefined) return { absent: true };
    const [time, place] = text;
    const key = `${time}\n${place}`;
    const changed = before !== undefined && key !== before;
    before = key;
    return { absent: false, time, place, changed };
  });
}

/** The table's caption. */
export function lifecycleCaption(columns: readonly string[]): string {
  return columns.length === 1
    ? `Only one lifecycle is stored for these actions (${columnLabel(columns[0]!)}): nothing to set beside it yet.`
    : `Each action's versions, ${columns.map(columnLabel).join(' | ')}: a cell that differs from the one on its left is marked as changed.`;
}

/** The status line under the heading once the table is drawn. */
export function lifecycleStatus(versions: number, actions: number, columns: number): string {
  return `${count(versions, 'version')} of ${count(actions, 'action')} in ${count(columns, 'lifecycle')}.`;
}
