/**
 * Which of a trip's actions a vehicle's geofence crossings realize (fence-tracker.ts gives the
 * crossings), as pure rules; the worker that stores the results is built on them.
 *
 * - A trip's actions that have a location (stops, loads, unloads, ...) are taken in `sequenceNr`
 *   order (then as listed); the first not yet entered is the one whose turn it is.
 * - Entering a location realizes, in lifecycle `actual` (with `startTime`), the first action from
 *   the one whose turn it is on that has that location: actions skipped over stay as planned. An
 *   entry into the location of the action realized last, when it is not the one whose turn it is,
 *   is the vehicle coming back, and realizes nothing (A, A again, then B does not realize a later
 *   visit to A early). A location the trip does not name realizes nothing.
 * - Leaving the location of the action entered last realizes it, in lifecycle `realized` (with
 *   `startTime` and `endTime`).
 * - The trip becomes `inTransit` when the vehicle leaves the location of an action that is not its
 *   last (the first one, unless it was skipped), and `completed` when its last action is realized;
 *   whoever applies it never moves a trip's status backwards.
 */
import type { Crossing } from './fence-tracker.js';

/** One of the trip's actions that has a location. */
export interface PlannedAction {
  /** The action's storage key. */
  readonly key: string;
  /** The location's storage key. */
  readonly location: string;
  readonly sequenceNr: number | undefined;
}

/** How far a trip's realization has come: kept by the worker between crossings. */
export interface RealizerState {
  /** The index (in `ordered`) of the first action not yet entered. */
  readonly next: number;
  /** The action entered and not yet left: its index and the crossing that entered it. */
  readonly open?: { readonly index: number; readonly entered: Crossing };
  /** The location of the action realized (or entered) last. */
  readonly lastLocation?: string;
}

/** What one crossing does to the trip. */
export interface Realization {
  readonly state: RealizerState;
  /** An action realized: in lifecycle `actual` on entry, `realized` on exit. */
  readonly action?: {
    readonly key: string;
    readonly lifecycle: 'actual' | 'realized';
    readonly startTime: number;
    readonly endTime?: number;
    /** The ids of the location events that decided it. */
    readonly contextEvents: readonly string[];
  };
  readonly tripStatus?: 'inTransit' | 'completed';
}

export const INITIAL_STATE: RealizerState = { next: 0 };

/** The actions in the order they are realized: by `sequenceNr` (none last), then as listed. */
export function ordered(actions: readonly PlannedAction[]): PlannedAction[] {
  return actions
    .map((a, i) => ({ a, i }))
    .sort((x, y) => (x.a.sequenceNr ?? Infinity) - (y.a.sequenceNr ?? Infinity) || x.i - y.i)
    .map(({ a }) => a);
}

/** The effect of one crossing of the trip's vehicle on the trip, given its ordered actions. */
export function realize(actions: readonly PlannedAction[], state: RealizerState, crossing: Crossing): Realization {
  if (crossing.kind === 'enter') {
    if (state.open !== undefined) return { state };
    let index = -1;
    for (let i = state.next; i < actions.length; i++) {
      if (actions[i]!.location === crossing.location) {
        index = i;
        break;
      }
    }
    if (index < 0) return { state };
    if (index !== state.next && crossing.location === state.lastLocation) return { state };
    return {
      state: { next: index + 1, open: { index, entered: crossing }, lastLocation: crossing.location },
      action: { key: actions[index]!.key, lifecycle: 'actual', startTime: crossing.time, contextEvents: crossing.fixes },
    };
  }
  const open = state.open;
  if (open === undefined || actions[open.index]!.location !== crossing.location) return { state };
  const last = open.index === actions.length - 1;
  return {
    state: { next: state.next, lastLocation: state.lastLocation! },
    action: {
      key: actions[open.index]!.key,
      lifecycle: 'realized',
      startTime: open.entered.time,
      endTime: crossing.time,
      contextEvents: [...new Set([...open.entered.fixes, ...crossing.fixes])],
    },
    tripStatus: last ? 'completed' : 'inTransit',
  };
}
