/**
 * @otm/model: Open Trip Model 5.9 types, kinds and validation.
 *
 * Field paths in errors: dotted members from the document root, array indices in brackets, member
 * names that are not plain identifiers as JSON strings in brackets, the root itself as `$`:
 * `vehicle.entity.fuel`, `actions[0].entity.location.entity.geoReference.lat`,
 * `externalAttributes["odd.name"]`; a member name of more than 64 characters is shortened to its first
 * 60 and `...`. See README.md for the validation policy.
 */
import { clip, compiled, validateAgainst, type OtmError } from './validate.js';
import { ENTITY_TYPES_OF_KIND, KINDS, isKindSegment, kindInfo, type KindInfo, type KindSegment } from './kinds.js';
import { PATCH_SUFFIX } from './transform.js';
import type {
  Trip,
  Vehicle,
  Route,
  Sensor,
  Location,
  Actor,
  Consignment,
  Event,
  Action,
  Goods,
  Document,
  TransportOrder,
  Constraint,
} from './generated/types.js';

export type { OtmError } from './validate.js';
export { MAX_ERRORS, MAX_ANSWER_CHARS } from './validate.js';
export { MODEL, type ModelData, type ModelSchema } from './model-data.js';
export { KINDS, isKindSegment, detectKind, kindOfEntityType, type KindInfo, type KindSegment } from './kinds.js';
export { KIND_SEGMENTS } from './kind-names.js';
export {
  inlineEntities,
  associationTarget,
  holdingMember,
  associationTable,
  type Path,
  type InlineEntity,
  type HoldingMember,
  type AssociationRow,
} from './entity-structure.js';
export * from './generated/types.js';

export type OtmEvent = Event;
export type OtmDocument = Document;
/** Any document of one of the 13 kinds. */
export type Entity =
  Trip | Vehicle | Route | Sensor | Location | Actor | Consignment | OtmEvent | Action | Goods | OtmDocument | TransportOrder | Constraint;

const kindWord: Partial<Record<KindSegment, string>> = {
  actions: "'action' or the actionType",
  events: "'event' or the eventType",
};

/** Errors of a body that is not an object, or whose top-level entityType names another kind; else undefined. */
function precheck(kind: KindSegment, info: KindInfo, doc: unknown, what: string, where: string): OtmError[] | undefined {
  if (doc === undefined) return [{ type: 'invalidJson', message: 'no JSON document' }];
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    const got = doc === null ? 'null' : Array.isArray(doc) ? 'an array' : `a ${typeof doc}`;
    return [{ type: 'invalidField', field: '$', message: `${what} must be one JSON object (a ${info.label.toLowerCase()}), got ${got}` }];
  }
  if (Object.hasOwn(doc, 'entityType')) {
    const et = (doc as Record<string, unknown>).entityType;
    const allowed = ENTITY_TYPES_OF_KIND.get(kind) ?? [];
    if (typeof et === 'string' && !allowed.includes(et)) {
      return [
        {
          type: 'invalidField',
          field: 'entityType',
          message: `entityType '${clip(et)}' does not match the kind of ${where}: ${kind} expects ${kindWord[kind] ?? `'${info.entityType}'`}`,
        },
      ];
    }
  }
  return undefined;
}

/**
 * Validates `doc` (already parsed JSON) as the body of `PUT /api/v5/<kind>`.
 * Returns [] when valid, else at most MAX_ERRORS items in document order. Never throws.
 */
export function validateEntity(kind: KindSegment, doc: unknown): OtmError[] {
  try {
    if (!isKindSegment(kind)) return [{ type: 'invalidField', field: '$', message: `unknown entity kind '${clip(String(kind))}'` }];
    const info = kindInfo(kind);
    return precheck(kind, info, doc, 'the body', 'this path') ?? validateAgainst(info.schema, doc);
  } catch {
    return [{ type: 'invalidField', field: '$', message: 'document could not be validated' }];
  }
}

/**
 * Validates a JSON Merge Patch (RFC 7396) for an entity of `kind` (e.g. the `entity` of an updateEvent).
 * Same rules as validateEntity (unknown members with suggestions, types, enums, formats, discriminator
 * dispatch) except that nothing is required and any member may be `null` (= remove it), but `id`,
 * `entityType`, `actionType`, `eventType`, which identify the entity, and a discriminator that selects a
 * sub-kind. Nested objects are patches too (they are merged); array items are whole values. Without its
 * discriminator (actions, events, goods, an actor, an association without associationType) a patch must fit at
 * least one sub-kind; otherwise the errors against the closest sub-kind (fewest errors, first in model order)
 * are reported. Paths are relative to the patch root. Never throws.
 */
export function validatePatch(kind: KindSegment, patch: unknown): OtmError[] {
  try {
    if (!isKindSegment(kind)) return [{ type: 'invalidField', field: '$', message: `unknown entity kind '${clip(String(kind))}'` }];
    const info = kindInfo(kind);
    return precheck(kind, info, patch, 'a merge patch', 'the patched entity') ?? validateAgainst(info.schema + PATCH_SUFFIX, patch);
  } catch {
    return [{ type: 'invalidField', field: '$', message: 'document could not be validated' }];
  }
}

/** Compiles the validators of all kinds now (otherwise each is compiled on its first use). */
export function precompile(): void {
  for (const k of KINDS) compiled(k.schema, false);
}
