/**
 * Entering and leaving geofences, without the flapping of GPS jitter: a vehicle *enters* a fence
 * once it has been inside it for `dwellSeconds` (every fix of that time inside), and *leaves* it
 * once it has been outside the fence by more than `hysteresisM` for `dwellSeconds`. A vehicle
 * parked at the edge with jitter of up to `hysteresisM` stays in; a drive through a fence that
 * lasts less than `dwellSeconds` enters nothing.
 *
 * The times are those of the fixes: an entry happened at the first fix inside of the run that
 * decided it, an exit at the last fix inside before the run outside that decided it. Each crossing
 * names the location events that decided it (`fixes`): the first and last inside, and the one that
 * completed the dwell. One tracker follows one vehicle, fed its fixes in time order.
 */
import { inFence, type Geofences } from './geofences.js';

export interface FenceSettings {
  /** OTM_GEOFENCE_DWELL_SECONDS */
  readonly dwellSeconds: number;
  /** OTM_GEOFENCE_HYSTERESIS_M */
  readonly hysteresisM: number;
}

/** A position of the vehicle: a location event's time, position and id. */
export interface KeyedFix {
  readonly time: number;
  readonly lat: number;
  readonly lon: number;
  /** The location event's id. */
  readonly key: string;
}

export interface Crossing {
  readonly kind: 'enter' | 'exit';
  /** The location's storage key. */
  readonly location: string;
  /** enter: the first fix inside; exit: the last fix inside (ms). */
  readonly time: number;
  /** The ids of the location events that decided it, in time order, without repeats. */
  readonly fixes: readonly string[];
}

/** Where the vehicle is with one fence. */
type State =
  | { readonly at: 'entering'; readonly first: KeyedFix }
  | { readonly at: 'inside'; readonly first: KeyedFix; last: KeyedFix }
  | { readonly at: 'leaving'; readonly first: KeyedFix; readonly last: KeyedFix; readonly out: KeyedFix };

const ids = (...fixes: KeyedFix[]): string[] => [...new Set(fixes.map((f) => f.key))];

export class FenceTracker {
  /** State by location key; a fence the vehicle is outside of (and not entering) has none. */
  private readonly states = new Map<string, State>();
  private lastTime = -Infinity;

  constructor(private readonly settings: FenceSettings) {}

  /** The locations the vehicle is inside of now (entered, not left). */
  inside(): string[] {
    return [...this.states].filter(([, s]) => s.at !== 'entering').map(([k]) => k);
  }

  /**
   * Takes the next fix (in time order: an older one than the last is ignored) against the tenant's
   * fences; answers the crossings it completes, exits before entries.
   */
  next(fix: KeyedFix, fences: Geofences): Crossing[] {
    if (fix.time < this.lastTime) return [];
    this.lastTime = fix.time;
    const dwellMs = this.settings.dwellSeconds * 1000;
    const out: Crossing[] = [];
    const entered: Crossing[] = [];
    // Fences the vehicle has a state with: inside, entering or leaving.
    const seen = new Set<string>();
    for (const [location, state] of this.states) {
      seen.add(location);
      const fence = fences.get(location);
      if (fence === undefined) {
        // The location was deleted or lost its fence: no crossing is made up for it.
        this.states.delete(location);
        continue;
      }
      if (state.at === 'entering') {
        if (!inFence(fence, fix.lat, fix.lon)) this.states.delete(location);
        else if (fix.time - state.first.time >= dwellMs) {
          this.states.set(location, { at: 'inside', first: state.first, last: fix });
          entered.push({ kind: 'enter', location, time: state.first.time, fixes: ids(state.first, fix) });
        }
        continue;
      }
      const holds = inFence(fence, fix.lat, fix.lon, this.settings.hysteresisM);
      if (state.at === 'inside') {
        if (holds) {
          if (inFence(fence, fix.lat, fix.lon)) state.last = fix;
        } else this.states.set(location, { at: 'leaving', first: state.first, last: state.last, out: fix });
        continue;
      }
      // Leaving: back within the band cancels it; outside for the dwell completes it.
      if (holds) {
        this.states.set(location, { at: 'inside', first: state.first, last: inFence(fence, fix.lat, fix.lon) ? fix : state.last });
      } else if (fix.time - state.out.time >= dwellMs) {
        this.states.delete(location);
        out.push({ kind: 'exit', location, time: state.last.time, fixes: ids(state.last, state.out, fix) });
      }
    }
    // Fences the fix is inside of, with no state yet: entering (at once inside with no dwell).
    for (const fence of fences.containing(fix.lat, fix.lon)) {
      if (seen.has(fence.location)) continue;
      if (dwellMs === 0) {
        this.states.set(fence.location, { at: 'inside', first: fix, last: fix });
        entered.push({ kind: 'enter', location: fence.location, time: fix.time, fixes: [fix.key] });
      } else this.states.set(fence.location, { at: 'entering', first: fix });
    }
    return [...out, ...entered];
  }
}
