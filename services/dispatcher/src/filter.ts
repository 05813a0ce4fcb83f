/**
 * Which changes a subscription takes: its kinds (given to the feed read, which skips the others),
 * then its filter, checked on the change's document:
 *
 * - `vehicle`: the vehicle itself (a put or a delete of it), and documents that name it as their
 *   vehicle: a trip's `vehicle` (facets.ts `filterValues`), an event linked to it (event-facts.ts
 *   `linkedKey`, also through `references`), any other kind's `vehicle` association;
 * - `trip`: the trip itself, and events linked to it;
 * - `eventType`: events of that type (a delete of an event has no document: it is not taken).
 *
 * A delete, or a put whose version is gone by the time it is read, has no document: only its own
 * id counts. Ids compare as storage keys (ids.ts). The rule is core facets.ts `changeFacts`, the
 * stream's too.
 */
import { changeFacts, parseChangeDocument, storageKey, type ChangeFacts, type FeedEntry, type WebhookFilter } from '@otm/core';

/** The filter with its ids as storage keys, ready to be checked. */
export interface Matcher {
  /** Whether the filter needs the document (else every change of the kinds is taken). */
  readonly needsDocument: boolean;
  matches(e: FeedEntry, doc: string | Buffer | undefined): boolean;
  /** The same, the change's facts made by `facts` (called only when the filter needs them; core shared-feed.ts makes them once a change). */
  matchesFacts(e: FeedEntry, facts: () => ChangeFacts): boolean;
}

export function matcher(filter: WebhookFilter): Matcher {
  const vehicle = filter.vehicle === undefined ? undefined : storageKey(filter.vehicle);
  const trip = filter.trip === undefined ? undefined : storageKey(filter.trip);
  const eventType = filter.eventType;
  const needsDocument = vehicle !== undefined || trip !== undefined || eventType !== undefined;
  const matchesFacts = (e: FeedEntry, factsOf: () => ChangeFacts): boolean => {
    if (!needsDocument) return true;
    if (eventType !== undefined && e.kind !== 'events') return false;
    const facts = factsOf();
    if (eventType !== undefined && facts.eventType !== eventType) return false;
    if (vehicle !== undefined && !facts.vehicles.includes(vehicle)) return false;
    if (trip !== undefined && !facts.trips.includes(trip)) return false;
    return true;
  };
  return {
    needsDocument,
    // The same rule as the stream's (core facets.ts `changeFacts`).
    matches: (e, raw) => matchesFacts(e, () => changeFacts(e.kind, e.key, e.kind === 'vehicles' ? undefined : parseChangeDocument(raw))),
    matchesFacts,
  };
}
