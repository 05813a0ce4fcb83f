/**
 * Facets: what lists filter on, as `name=value` strings computed from a document. The stores keep,
 * for every (tenant, kind, facet), the entities that have it in keyset order (the time of their
 * last change, then their key), so that a filtered list page is one range read whatever the
 * number of entities; the query then checks every filter of the request against the document it
 * answers (facets only pick candidates).
 *
 * Facets of a kind (all kinds also have the empty facet `''`: every entity of the kind):
 * - `externalId=<id>` for each of `externalIdentifiers` (any scheme);
 * - trips and consignments: `status=`, `vehicle=` (trips), `actor=` for each actor;
 * - vehicles: `licensePlate=`;
 * - events: `eventType=`, `vehicle=` (linked as the ClickHouse columns are), `lifecycle=`;
 * - actions: `actionType=`, `lifecycle=`;
 * - every kind: `attr.<name>=<value>` for its external attributes with a string value (at most 32),
 *   which association events that name their target by an `attributeRestriction` look up.
 * Ids are storage keys (lower-case UUIDs, ids.ts). A value longer than FACET_VALUE_MAX characters is
 * kept as its SHA-256 (`name=#<hex>`), so a facet is bounded whatever the client sent.
 */
import { createHash } from 'node:crypto';
import { associationTarget, type KindSegment } from '@otm/model';
import { linkedKey } from './event-facts.js';
import { storageKey } from './ids.js';

type Doc = Readonly<Record<string, unknown>>;
const isObject = (v: unknown): v is Doc => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Longest facet value kept as it is. */
export const FACET_VALUE_MAX = 128;

/** The facet `name=value` (hashed when the value is long). */
export function facet(name: string, value: string): string {
  return value.length > FACET_VALUE_MAX ? `${name}=#${createHash('sha256').update(value).digest('hex')}` : `${name}=${value}`;
}

/** The filters a kind's list accepts besides `updatedSince`, `updatedBefore`, `limit`, `cursor`. */
export const LIST_FILTERS: Readonly<Record<KindSegment, readonly string[]>> = {
  trips: ['status', 'vehicle', 'actor', 'externalId'],
  consignments: ['status', 'actor', 'externalId'],
  events: ['eventType', 'vehicle', 'lifecycle', 'from', 'to', 'externalId'],
  actions: ['actionType', 'lifecycle', 'externalId'],
  vehicles: ['licensePlate', 'externalId'],
  routes: ['externalId'],
  sensors: ['externalId'],
  locations: ['externalId'],
  actors: ['externalId'],
  goods: ['externalId'],
  documents: ['externalId'],
  transportOrders: ['externalId'],
  constraints: ['externalId'],
};

/** Filters whose value names an entity (compared as storage keys). */
export const ID_FILTERS: ReadonlySet<string> = new Set(['vehicle', 'actor']);

const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

function idOf(assoc: unknown): string | undefined {
  const t = associationTarget(assoc);
  return t?.id === undefined || t.id === '' ? undefined : storageKey(t.id);
}

/** The values a document has for one filter (a document may have several, e.g. actors). */
export function filterValues(kind: KindSegment, doc: Doc, name: string): string[] {
  switch (name) {
    case 'externalId': {
      const ids = Array.isArray(doc.externalIdentifiers) ? doc.externalIdentifiers : [];
      return ids.flatMap((e) => (isObject(e) && str(e.id) !== undefined ? [e.id as string] : []));
    }
    case 'status':
    case 'licensePlate':
    case 'eventType':
    case 'actionType':
    case 'lifecycle': {
      const v = str(doc[name]);
      return v === undefined ? [] : [v];
    }
    case 'vehicle': {
      if (kind === 'events') {
        const key = linkedKey(doc, 'vehicle');
        return key === '' ? [] : [key];
      }
      const id = idOf(doc.vehicle);
      return id === undefined ? [] : [id];
    }
    case 'actor': {
      const actors = Array.isArray(doc.actors) ? doc.actors : [];
      return actors.flatMap((a) => {
        const id = idOf(a);
        return id === undefined ? [] : [id];
      });
    }
    default:
      return [];
  }
}

/** Filters that are facets (`from`/`to` are event-time ranges, checked on the document). */
const FACET_FILTERS: ReadonlySet<string> = new Set([
  'externalId',
  'status',
  'licensePlate',
  'eventType',
  'actionType',
  'lifecycle',
  'vehicle',
  'actor',
]);
export const isFacetFilter = (name: string): boolean => FACET_FILTERS.has(name);

/** Most external attributes of one document that are indexed for attribute restrictions. */
export const ATTRIBUTE_FACETS_MAX = 32;

/**
 * The facet of one external attribute (`attr.<name>=<value>`), by which an association's
 * `attributeRestriction` finds the entities it selects. A long name is kept as its SHA-256.
 */
export function attributeFacet(name: string, value: string): string {
  const n = name.length > 64 ? `#${createHash('sha256').update(name).digest('hex')}` : name;
  return facet(`attr.${n}`, value);
}

/** The attribute facets of a document: its first ATTRIBUTE_FACETS_MAX external attributes with a string value. */
export function attributeFacets(doc: Doc): string[] {
  const attrs = doc.externalAttributes;
  if (!isObject(attrs)) return [];
  const out: string[] = [];
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value !== 'string') continue;
    out.push(attributeFacet(name, value));
    if (out.length >= ATTRIBUTE_FACETS_MAX) break;
  }
  return out;
}

/** Every facet of one version of a document, `''` first. */
export function facetsOf(kind: KindSegment, doc: Doc): string[] {
  const out = new Set<string>(['']);
  for (const name of LIST_FILTERS[kind]) {
    if (!FACET_FILTERS.has(name)) continue;
    for (const v of filterValues(kind, doc, name)) out.add(facet(name, v));
  }
  for (const f of attributeFacets(doc)) out.add(f);
  return [...out];
}

/**
 * What a store keeps of a listed entity: when it last changed (ms since the epoch) and the facets of
 * each stored lifecycle version (rank 0 for entities without lifecycles). The entity is listed under
 * the union of its versions' facets, at `at`.
 */
export interface ListRecord {
  readonly at: number;
  readonly ranks: Readonly<Record<number, readonly string[]>>;
}

/** The facets an entity is listed under: the union over its versions. */
export function listedFacets(r: ListRecord): string[] {
  const out = new Set<string>();
  for (const fs of Object.values(r.ranks)) for (const f of fs) out.add(f);
  return [...out];
}

/** A list record as stored (JSON), and back. */
export const encodeListRecord = (r: ListRecord): string => JSON.stringify(r);
export const decodeListRecord = (s: string): ListRecord => JSON.parse(s) as ListRecord;

/** A change's document as an object; undefined when absent or not a JSON object. */
export function parseChangeDocument(doc: string | Buffer | undefined): Doc | undefined {
  if (doc === undefined) return undefined;
  try {
    const v: unknown = JSON.parse(typeof doc === 'string' ? doc : doc.toString('utf8'));
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** What the `vehicle`, `trip` and `eventType` filters of the stream and of webhooks look at (storage keys). */
export interface ChangeFacts {
  readonly vehicles: readonly string[];
  readonly trips: readonly string[];
  readonly eventType: string | undefined;
}

/**
 * The vehicles and trips a change names, one rule for the stream and the webhooks: a vehicle names
 * itself; a trip itself and its vehicle; an event the vehicle and the trip it is linked to
 * (event-facts.ts `linkedKey`, also through `references`); any other kind its `vehicle`
 * association (filterValues). A delete, or a put whose version is gone, has no document: only its
 * own id counts.
 */
export function changeFacts(kind: KindSegment, key: string, doc: Doc | undefined): ChangeFacts {
  const vehicles = kind === 'vehicles' ? [key] : doc === undefined ? [] : [...new Set(filterValues(kind, doc, 'vehicle'))];
  let trips: string[] = [];
  if (kind === 'trips') trips = [key];
  else if (kind === 'events' && doc !== undefined) {
    const trip = linkedKey(doc, 'trip');
    if (trip !== '') trips = [trip];
  }
  const eventType = kind === 'events' && doc !== undefined && typeof doc.eventType === 'string' ? doc.eventType : undefined;
  return { vehicles, trips, eventType };
}
