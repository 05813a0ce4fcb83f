/**
 * The rows of otm_entities (schema.ts) for a change the entity export hands on (`EntityChange`):
 * a put is one row with typed columns taken from its document; a delete is a tombstone for every
 * lifecycle rank. Pure functions, no I/O.
 *
 * Columns of a put (docs/analytics.md, "Entity tables"):
 * - `subtype`: the value of the kind's discriminator (`actionType` of an action, `eventType` of an
 *   event, `type` of an actor or goods); `name`, `status`: the document's own, `''` when absent;
 * - `external_ids`, `vehicle_ids`, `actor_ids`: as the lists filter on them (facets.ts
 *   `filterValues`), vehicles and actors as storage keys;
 * - `linked_kinds`, `linked_ids`: every entity the document names, at any depth: the target of each
 *   inline or reference association (an inline entity's `id`, a reference's `uuid`, also inside
 *   inline entities: a trip's actions and the locations and consignments those actions name), as
 *   storage keys (ids.ts: lower-case UUIDs, as `entity_id` and otm_events' ids are), each
 *   (kind, id) once, in the order found; the entity itself is left out. The two arrays are
 *   parallel: `linked_kinds[i]` is the kind of `linked_ids[i]` (`''` when the association does not
 *   say).
 */
import { associationTarget, KINDS, type KindSegment } from '@otm/model';
import { filterValues, LIFECYCLES, storageKey, type EntityChange } from '@otm/core';
import type { EntityRow } from './schema.js';

type Obj = Readonly<Record<string, unknown>>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

/**
 * Lifecycle ranks a delete writes tombstones for. The feed's delete names no rank (a delete
 * removes every version) and the versions are gone from Redis when the export reads it; rather
 * than asking ClickHouse which ranks it holds (a query per page, and racing the rows still in
 * flight), a delete writes a tombstone for each of the six ranks: always right, and cheap (deletes
 * are rare, a tombstone has no document, merges drop the ones that hide nothing).
 */
const ALL_RANKS = [0, 1, 2, 3, 4, 5] as const;

/** The member that names a kind's sub-kind (`actionType`, `eventType`, `type`), by kind. */
const DISCRIMINATOR = new Map(KINDS.map((k) => [k.segment, k.discriminator]));

/** The entities a document names, at any depth, as parallel arrays of kinds and storage keys. */
export function linkedEntities(kind: KindSegment, key: string, doc: Obj): { kinds: string[]; ids: string[] } {
  const kinds: string[] = [];
  const ids: string[] = [];
  const seen = new Set<string>([`${kind}\0${key}`]);
  const visit = (v: unknown): void => {
    if (Array.isArray(v)) {
      for (const item of v) visit(item);
      return;
    }
    if (!isObj(v)) return;
    const target = associationTarget(v);
    if (target?.id !== undefined && target.id !== '') {
      const k = target.kind ?? '';
      const id = storageKey(target.id);
      const seenKey = `${k}\0${id}`;
      if (!seen.has(seenKey)) {
        seen.add(seenKey);
        kinds.push(k);
        ids.push(id);
      }
    }
    for (const member of Object.values(v)) visit(member);
  };
  // Members of the document, not the document itself (it is no association).
  for (const member of Object.values(doc)) visit(member);
  return { kinds, ids };
}

const unique = (values: readonly string[]): string[] => [...new Set(values)];

/** The rows of one change (a put: one; a delete: a tombstone for every rank). */
export function entityRows(c: EntityChange): EntityRow[] {
  const common = {
    tenant: c.tenant,
    kind: c.kind,
    entity_id: c.key,
    changed_at: Math.trunc(c.at),
    version: c.version.toString(),
  };
  const empty = {
    lifecycle: '',
    subtype: '',
    name: '',
    status: '',
    external_ids: [],
    vehicle_ids: [],
    actor_ids: [],
    linked_kinds: [],
    linked_ids: [],
  };
  // Object.assign, not a spread followed by members: in V8 (Node 20) that costs about a µs a member.
  if (c.op === 'delete')
    return ALL_RANKS.map((rank) => Object.assign({}, common, empty, { lifecycle_rank: rank, deleted: 1 as const, doc: '' }));
  const json = c.json ?? '';
  const rank = c.lifecycleRank;
  const lifecycle = rank > 0 ? (LIFECYCLES[rank - 1] ?? '') : '';
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch {
    doc = undefined;
  }
  // A stored document is always a JSON object; were it not, the row keeps it without columns
  // rather than stopping the export.
  if (!isObj(doc)) return [Object.assign({}, common, empty, { lifecycle, lifecycle_rank: rank, deleted: 0 as const, doc: json })];
  const discriminator = DISCRIMINATOR.get(c.kind) ?? null;
  const linked = linkedEntities(c.kind, c.key, doc);
  return [
    Object.assign(common, {
      lifecycle_rank: rank,
      lifecycle,
      subtype: discriminator === null ? '' : str(doc[discriminator]),
      name: str(doc.name),
      status: str(doc.status),
      external_ids: unique(filterValues(c.kind, doc, 'externalId')),
      vehicle_ids: unique(filterValues(c.kind, doc, 'vehicle')),
      actor_ids: unique(filterValues(c.kind, doc, 'actor')),
      linked_kinds: linked.kinds,
      linked_ids: linked.ids,
      deleted: 0 as const,
      doc: json,
    }),
  ];
}
