/**
 * What an update or association event does to the entity it names, as pure functions of documents
 * (no store): the target and patch of an `updateEvent` and its result, the plan of an association
 * event and entity1 with entity2 coupled or uncoupled, the entities an `attributeRestriction`
 * selects and the key such an event waits under; and which of two versions is newer. The entity
 * worker's unit of work (apply-changes.ts) applies them.
 */
import { associationTarget, holdingMember, kindOfEntityType, validateEntity, type KindSegment, type OtmError } from '@otm/model';
import { attributeFacet } from './facets.js';
import { storageKey, uuidV5 } from './ids.js';
import { mergePatch } from './merge-patch.js';
import type { VersionStamp } from './ports.js';

type Doc = Record<string, unknown>;
const isObject = (v: unknown): v is Doc => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `lastModified`, else `creationDate`, in ms since the epoch; 0 when neither is usable. */
export function modifiedOf(doc: Readonly<Doc>): number {
  // Whatever is there: a value that is no date (an object, say: '[object Object]') parses to NaN, hence 0.
  // eslint-disable-next-line @typescript-eslint/no-base-to-string
  const t = Date.parse(String(doc.lastModified ?? doc.creationDate ?? ''));
  return Number.isFinite(t) ? t : 0;
}

/** Whether version `a` is strictly newer than `b`. */
export const isNewer = (a: VersionStamp, b: VersionStamp): boolean =>
  a.modified > b.modified || (a.modified === b.modified && a.acceptedAt > b.acceptedAt);

export interface UpdateTarget {
  readonly kind: KindSegment;
  readonly key: string;
  /** The merge patch: the target's members that change (`null` removes one). */
  readonly patch: Doc;
  /** Where the patch sits in the event, for error paths. */
  readonly path: string;
}

/**
 * The entity an updateEvent changes and the patch. Its `entity` member is the (partial) entity
 * itself, or an inline association holding it; either way it names the target by `id` and
 * `entityType`.
 */
export function updateTarget(event: Readonly<Doc>): UpdateTarget | OtmError {
  let patch = event.entity;
  let path = 'entity';
  if (isObject(patch) && patch.associationType === 'inline' && isObject(patch.entity)) {
    patch = patch.entity;
    path = 'entity.entity';
  }
  if (!isObject(patch)) return { type: 'missingField', field: path, message: 'an updateEvent needs the entity it changes' };
  const kind = typeof patch.entityType === 'string' ? kindOfEntityType(patch.entityType) : undefined;
  if (kind === undefined) {
    return {
      type: 'missingField',
      field: `${path}.entityType`,
      message: 'an updateEvent must name the entityType of the entity it changes',
    };
  }
  if (typeof patch.id !== 'string' || patch.id === '') {
    return { type: 'missingField', field: `${path}.id`, message: 'an updateEvent must name the id of the entity it changes' };
  }
  return { kind, key: storageKey(patch.id), patch, path };
}

/** Applies `patch` to `target` and checks the result against the target's kind. */
export function applyUpdate(kind: KindSegment, target: Readonly<Doc>, patch: Readonly<Doc>): { doc: Doc; errors: OtmError[] } {
  const doc = mergePatch(target, patch) as Doc;
  return { doc, errors: validateEntity(kind, doc) };
}

/** An entity named by its external attributes (an `attributeRestriction` association). */
export interface Restriction {
  /** The attributes the entity must have, each with exactly this value. */
  readonly attributes: ReadonlyArray<readonly [string, string]>;
}

/** The restriction of an `attributeRestriction` association; an error item when it is malformed. */
export function restrictionOf(assoc: unknown, field: string): Restriction | OtmError {
  const r = isObject(assoc) && isObject(assoc.restriction) ? assoc.restriction.externalAttributes : undefined;
  if (!isObject(r) || Object.keys(r).length === 0) {
    return { type: 'invalidField', field: `${field}.restriction.externalAttributes`, message: 'must name at least one external attribute' };
  }
  const attributes: Array<readonly [string, string]> = [];
  for (const [k, v] of Object.entries(r)) {
    if (typeof v !== 'string')
      return { type: 'invalidField', field: `${field}.restriction.externalAttributes.${k}`, message: 'must be a string' };
    attributes.push([k, v]);
  }
  return { attributes };
}

export interface AssociationPlan {
  readonly kind1: KindSegment;
  /** entity1's key, or (with `restriction1`) '' until the restriction is resolved. */
  readonly key1: string;
  /** entity1 named by its external attributes instead of an id. */
  readonly restriction1?: Restriction;
  readonly kind2: KindSegment;
  /** entity2's id, when it has one. */
  readonly id2: string | undefined;
}

/** entity1's and entity2's kinds and ids of an association event. */
export function associationPlan(event: Readonly<Doc>): AssociationPlan | OtmError {
  const t1 = associationTarget(event.entity1);
  if (t1?.kind === undefined)
    return { type: 'invalidField', field: 'entity1', message: 'cannot tell the kind of entity1: give its entityType' };
  let restriction1: Restriction | undefined;
  if (t1.id === undefined || t1.id === '') {
    if (isObject(event.entity1) && event.entity1.associationType === 'attributeRestriction') {
      const r = restrictionOf(event.entity1, 'entity1');
      if ('type' in r) return r;
      restriction1 = r;
    }
  }
  if (restriction1 === undefined && (t1.id === undefined || t1.id === '')) {
    return {
      type: 'invalidField',
      field: 'entity1',
      message: 'entity1 must name one entity: an inline entity with an id, or a reference with a uuid',
    };
  }
  const t2 = associationTarget(event.entity2);
  if (t2?.kind === undefined)
    return { type: 'invalidField', field: 'entity2', message: 'cannot tell the kind of entity2: give its entityType' };
  return {
    kind1: t1.kind,
    key1: restriction1 ? '' : storageKey(t1.id!),
    ...(restriction1 ? { restriction1 } : {}),
    kind2: t2.kind,
    id2: t2.id,
  };
}

const sameTarget = (assoc: unknown, id2: string | undefined, whole: unknown): boolean => {
  if (id2 === undefined) return JSON.stringify(assoc) === JSON.stringify(whole);
  const t = associationTarget(assoc);
  return t?.id !== undefined && storageKey(t.id) === storageKey(id2);
};

/** entity1's document with entity2 coupled (created) or uncoupled (removed); undefined if no member can hold it. */
export function applyAssociation(
  kind1: KindSegment,
  doc1: Readonly<Doc>,
  plan: AssociationPlan,
  entity2: unknown,
  created: boolean,
): Doc | undefined {
  const holding = holdingMember(kind1, doc1, plan.kind2);
  if (holding === undefined) return undefined;
  const out: Doc = { ...doc1 };
  const current = out[holding.member];
  if (!holding.many) {
    if (created) out[holding.member] = entity2;
    else if (current !== undefined && sameTarget(current, plan.id2, entity2)) delete out[holding.member];
    return out;
  }
  const list: unknown[] = Array.isArray(current) ? current : [];
  if (created) {
    out[holding.member] = list.some((a) => sameTarget(a, plan.id2, entity2)) ? list : [...list, entity2];
  } else {
    const kept = list.filter((a) => !sameTarget(a, plan.id2, entity2));
    if (kept.length > 0) out[holding.member] = kept;
    else delete out[holding.member];
  }
  return out;
}

/** The association events, each with whether it couples (created) or uncouples (removed). */
export const ASSOCIATION_EVENTS: Record<string, boolean> = { associationCreatedEvent: true, associationRemovedEvent: false };

/** Most entities one attribute restriction is applied to. */
export const RESTRICTION_MATCHES_MAX = 100;

/**
 * Where an association event whose attributeRestriction selects no entity yet waits: a key of its
 * own made from the facet of its first attribute, which every entity stored with that attribute
 * looks at (pending effects are kept by kind and key).
 */
export const restrictionKey = (attributeFacetText: string): string => uuidV5(`otm:restriction:${attributeFacetText}`);

/**
 * The key an association event is published under (its partition): entity1's key, or for an
 * attributeRestriction the key its effect waits under.
 */
export function associationKey(plan: AssociationPlan): string {
  if (plan.restriction1 === undefined) return plan.key1;
  const [name, value] = plan.restriction1.attributes[0]!;
  return restrictionKey(attributeFacet(name, value));
}
