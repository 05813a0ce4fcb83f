/** What a trip's associations name, fetched: an action or a location given as a reference. */
import { api } from './api.js';
import { state } from './state.js';
import { located, type Association, type Located } from './trip-actions.js';

/** An association's entity: inline as is, a reference fetched from `/api/v5/{kind}/{uuid}` (undefined when it cannot be). */
export async function resolve(a: unknown, kind: string): Promise<Record<string, unknown> | undefined> {
  if (typeof a !== 'object' || a === null) return undefined;
  const assoc = a as Association;
  if (assoc.entity !== undefined) return assoc.entity;
  if (assoc.associationType === 'reference' && typeof assoc.uuid === 'string') {
    const res = await api(`/api/v5/${kind}/${encodeURIComponent(assoc.uuid)}`);
    if (res.ok) return (await res.json()) as Record<string, unknown>;
  }
  return undefined;
}

/** An action's location (a referenced one fetched once for the trip shown: state.locations), or undefined when it has none. */
export async function locationOf(action: Record<string, unknown>): Promise<Located | undefined> {
  if (action.location === undefined) return undefined;
  const ref = action.location as Association;
  let loc: Record<string, unknown> | undefined;
  if (ref.entity === undefined && typeof ref.uuid === 'string') {
    const key = ref.uuid.toLowerCase();
    const cached = state.locations.get(key) ?? resolve(ref, 'locations');
    state.locations.set(key, cached);
    loc = await cached;
  } else {
    loc = await resolve(ref, 'locations');
  }
  return located(loc, ref);
}
