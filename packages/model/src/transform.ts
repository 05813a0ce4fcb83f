/**
 * Rewrites the model's OpenAPI schemas into plain JSON Schema that ajv can validate fast and with
 * precise errors:
 *
 * - `oneOf` + `discriminator` becomes a dispatch on the discriminator: the discriminator member gets
 *   an `enum` of the allowed values, and the custom keyword `otmDispatch` (see validate.ts) runs only
 *   the branch selected by the value, so errors only ever come from the taken branch. A branch that
 *   the mapping does not name (the plain actor) is taken when the discriminator member is absent.
 *   (An `if`/`then` per value works too but costs about 1 us per node for the failing `if`s.)
 * - `allOf` compositions are flattened into one object (actor-person = actor-base + extras) so that
 *   unknown members can be detected; metadata-only parts (`{deprecated: true}`) are dropped.
 * - Every object schema with declared members gets `additionalProperties: false` (unknown members are
 *   rejected). Values typed `unrestricted_json` (externalAttributes) accept any JSON value whose
 *   numbers are all finite (custom keyword `otmFinite`); elsewhere ajv's `strictNumbers` refuses
 *   non-finite numbers.
 * - This service's range rule, which the model does not state: a member `lat` is a latitude in
 *   [-90, 90], a member `lon` a longitude in [-180, 180], and so are the first two numbers of each
 *   GeoJSON position in `coordinates` ([longitude, latitude, altitude...]); such nodes carry
 *   `otmRange` (used in messages).
 * - Every object schema carries `otmName` (used in messages), dispatch nodes carry `otmDiscriminator`.
 */
import { MODEL, refName, schemaByName, type ModelSchema } from './model-data.js';

export type AjvSchema = Record<string, unknown>;

/**
 * Discriminator dispatch: the branch for `refs[value of prop]`, or `default` when prop is absent.
 * `any` (merge patches only): when prop is absent, valid if any of these branches accepts; otherwise the
 * errors of the branch with the fewest.
 */
export interface DispatchSpec {
  prop: string;
  refs: Record<string, string>;
  default?: string;
  any?: string[];
}

const ROOT_ID = 'otm';
export const defRef = (name: string): string => `${ROOT_ID}#/$defs/${name}`;
/** The def name of a defRef. */
export const defName = (ref: string): string => ref.slice(`${ROOT_ID}#/$defs/`.length);

const UNRESTRICTED = 'unrestricted_json';
/** A value of `unrestricted_json`: any JSON value, its numbers finite. */
const ANY_JSON: AjvSchema = { otmFinite: true };

const RANGES: Record<string, { otmRange: string; minimum: number; maximum: number }> = {
  latitude: { otmRange: 'latitude', minimum: -90, maximum: 90 },
  longitude: { otmRange: 'longitude', minimum: -180, maximum: 180 },
};

const isNumberNode = (n: unknown): boolean => {
  const t = (n as AjvSchema | undefined)?.type;
  return t === 'number' || (Array.isArray(t) && t.includes('number'));
};

/**
 * Member `key` of an object, as transformed into `node`, with this service's range rule: `lat`
 * and `lon` numbers are a latitude and a longitude; `coordinates` arrays of GeoJSON hold
 * positions whose first two numbers are a longitude and a latitude.
 */
function withRange(key: string, node: AjvSchema): AjvSchema {
  if ((key === 'lat' || key === 'lon') && isNumberNode(node)) return { ...node, ...RANGES[key === 'lat' ? 'latitude' : 'longitude'] };
  if (key === 'coordinates') return positions(node) ?? node;
  return node;
}

/** An array of numbers nested in arrays as a GeoJSON position: items [longitude, latitude], more numbers after. */
function positions(node: AjvSchema): AjvSchema | undefined {
  const items = node.items as AjvSchema | undefined;
  if (!items || Array.isArray(items)) return undefined;
  if (isNumberNode(items)) {
    return {
      ...node,
      items: [
        { ...items, ...RANGES.longitude },
        { ...items, ...RANGES.latitude },
      ],
      additionalItems: items,
    };
  }
  const inner = positions(items);
  return inner ? { ...node, items: inner } : undefined;
}

/** Display name of a model schema in messages. */
export function displayName(name: string): string {
  const s = MODEL.schemas[name];
  if (name.endsWith('-inline')) return `inline ${displayName(name.slice(0, -'-inline'.length))} association`;
  if (name === 'reference' || name === 'reference-roles') return 'reference association';
  if (name === 'attributeRestriction' || name === 'attributeRestriction-roles') return 'attributeRestriction association';
  if (name === 'actor-base') return 'actor';
  if (name === 'actor-person') return 'actor (person)';
  if (name === 'actor-company') return 'actor (company)';
  if (name === 'route-entity-constraint') return 'route';
  if (name === 'stop-entity') return 'stop';
  if (name === 'move-entity') return 'move';
  if (s?.properties?.value?.$ref === '#/components/schemas/constraintValue') return 'constraint';
  if (name.endsWith('-in-events')) {
    const e = s?.properties?.entityType?.enum?.[0];
    return typeof e === 'string' ? e : name;
  }
  return name;
}

function isMetaOnly(s: ModelSchema): boolean {
  return Object.keys(s).every((k) => k === 'deprecated' || k === 'default');
}

/** Resolve a schema (following $ref and flattening allOf) into one object schema for merging. */
export function flattenParts(parts: ModelSchema[]): ModelSchema {
  const props: Record<string, ModelSchema> = {};
  const required: string[] = [];
  for (const part of parts) {
    if (isMetaOnly(part)) continue;
    let p = part.$ref ? schemaByName(refName(part.$ref)) : part;
    if (p.allOf) p = flattenParts(p.allOf);
    if (p.oneOf) throw new Error('allOf over oneOf is not supported');
    Object.assign(props, p.properties ?? {});
    for (const r of p.required ?? []) if (!required.includes(r)) required.push(r);
  }
  const out: ModelSchema = { type: 'object', properties: props };
  if (required.length) out.required = required;
  return out;
}

function transform(s: ModelSchema, name: string): AjvSchema {
  if (s.$ref) return { $ref: defRef(refName(s.$ref)) };

  if (s.allOf) {
    const parts = s.allOf.filter((p) => !isMetaOnly(p));
    const only = parts[0];
    if (parts.length === 1 && only && only.$ref && Object.keys(only).length === 1) return transform(only, name);
    return transform(flattenParts(parts), name);
  }

  if (s.oneOf) {
    if (!s.discriminator) throw new Error(`${name}: oneOf without discriminator`);
    const p = s.discriminator.propertyName;
    const mapping = s.discriminator.mapping ?? {};
    const values = Object.keys(mapping);
    const mapped = new Set(Object.values(mapping));
    const defaults = s.oneOf.filter((b) => b.$ref && !mapped.has(b.$ref));
    if (defaults.length > 1) throw new Error(`${name}: more than one branch without discriminator value`);
    const refs: Record<string, string> = {};
    for (const v of values) refs[v] = defRef(refName(mapping[v] as string));
    const def = defaults[0];
    const dispatch: DispatchSpec = { prop: p, refs };
    if (def?.$ref) dispatch.default = defRef(refName(def.$ref));
    const out: AjvSchema = {
      type: 'object',
      otmName: name,
      otmDiscriminator: p,
      properties: { [p]: { enum: values } },
      otmDispatch: dispatch,
    };
    if (!def) out.required = [p];
    return out;
  }

  const out: AjvSchema = {};
  for (const k of [
    'type',
    'format',
    'enum',
    'const',
    'minimum',
    'maximum',
    'exclusiveMinimum',
    'exclusiveMaximum',
    'minLength',
    'maxLength',
    'pattern',
    'minItems',
    'maxItems',
    'uniqueItems',
    'minProperties',
    'maxProperties',
  ]) {
    if (s[k] !== undefined) out[k] = s[k];
  }
  if (s.items) out.items = transform(s.items, `${name}[]`);
  const isObject = s.type === 'object' || s.properties !== undefined;
  if (isObject) {
    out.type = 'object';
    out.otmName = name;
    const props = Object.entries(s.properties ?? {});
    if (props.length) {
      const tp: Record<string, AjvSchema> = {};
      for (const [k, v] of props) tp[k] = withRange(k, transform(v, `${name}.${k}`));
      out.properties = tp;
    }
    if (s.required?.length) out.required = s.required;
    const ap = s.additionalProperties;
    if (ap !== undefined && typeof ap === 'object') {
      out.additionalProperties = ap.$ref && refName(ap.$ref) === UNRESTRICTED ? ANY_JSON : transform(ap, `${name}{}`);
    } else if (ap === false || (ap === undefined && props.length > 0)) {
      out.additionalProperties = false;
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Merge patches (RFC 7396)
// ------------------------------------------------------------------------------------------------

/** Def name suffix of the merge-patch variant of a model schema (`trip~patch`). */
export const PATCH_SUFFIX = '~patch';
/** Def of the `entity` member of updateEvent: the entity union as a patch that names its target. */
export const UPDATE_ENTITY_DEF = 'entity~update';
/** Members that identify an entity: never removable (null) in a patch. */
const NOT_NULLABLE = new Set(['id', 'entityType', 'actionType', 'eventType']);

/** Name of the event sub-schema `updateEvent` (from the event discriminator). */
export function updateEventSchema(): string {
  const m = schemaByName('event').discriminator?.mapping?.updateEvent;
  if (!m) throw new Error('model has no updateEvent');
  return refName(m);
}

/** The schema name when `m` is only a reference (possibly wrapped in allOf with metadata-only parts). */
export function singleRef(m: ModelSchema): string | undefined {
  if (m.$ref) return refName(m.$ref);
  if (m.allOf && !m.properties && !m.oneOf) {
    const parts = m.allOf.filter((p) => !isMetaOnly(p));
    const only = parts[0];
    if (parts.length === 1 && only?.$ref && Object.keys(only).length === 1) return refName(only.$ref);
  }
  return undefined;
}

function isStructured(s: ModelSchema): boolean {
  const r = singleRef(s);
  if (r !== undefined) return r !== UNRESTRICTED && isStructured(schemaByName(r));
  return s.oneOf !== undefined || s.allOf !== undefined || s.type === 'object' || s.properties !== undefined;
}

function addNull(node: AjvSchema): AjvSchema {
  if (Array.isArray(node.enum)) node.enum = [...(node.enum as unknown[]), null];
  if (node.const !== undefined) {
    node.enum = [node.const, null];
    delete node.const;
  }
  if (typeof node.type === 'string') node.type = [node.type, 'null'];
  else if (Array.isArray(node.type) && !node.type.includes('null')) node.type = [...(node.type as string[]), 'null'];
  return node;
}

/**
 * Builds the merge-patch variants: an object is partial (nothing required), every member but `id`,
 * `entityType`, `actionType`, `eventType` may be null (= remove), nested objects reached through members
 * are patches too (RFC 7396 merges them), array items are whole values (validated as usual). A
 * discriminated union dispatches on its discriminator when present; without it the patch must fit at
 * least one branch.
 */
class PatchDefs {
  constructor(private readonly defs: Record<string, AjvSchema>) {}

  /** Def name holding model schema `name` in patch mode (the usual def for scalars and arrays). */
  ref(name: string): string {
    const s = schemaByName(name);
    if (name === UNRESTRICTED || !isStructured(s)) return name;
    const pn = name + PATCH_SUFFIX;
    if (!Object.hasOwn(this.defs, pn)) {
      this.defs[pn] = {}; // placeholder: the schemas are recursive
      this.defs[pn] = this.node(s, displayName(name));
    }
    return pn;
  }

  node(s: ModelSchema, name: string, anyWhenAbsent = true): AjvSchema {
    const r = singleRef(s);
    if (r !== undefined) return { $ref: defRef(this.ref(r)) };
    if (s.oneOf) {
      if (!s.discriminator) throw new Error(`${name}: oneOf without discriminator`);
      const p = s.discriminator.propertyName;
      const mapping = s.discriminator.mapping ?? {};
      const refs: Record<string, string> = {};
      for (const [v, ref] of Object.entries(mapping)) refs[v] = defRef(this.ref(refName(ref)));
      const dispatch: DispatchSpec = { prop: p, refs };
      if (anyWhenAbsent) {
        dispatch.any = s.oneOf.map((b) => {
          if (!b.$ref) throw new Error(`${name}: inline oneOf branch`);
          return defRef(this.ref(refName(b.$ref)));
        });
      }
      return {
        type: 'object',
        otmName: name,
        otmDiscriminator: p,
        properties: { [p]: { enum: Object.keys(mapping) } },
        otmDispatch: dispatch,
      };
    }
    if (s.allOf) return this.node(flattenParts(s.allOf.filter((p) => !isMetaOnly(p))), name);
    const out: AjvSchema = { type: 'object', otmName: name };
    const props = Object.entries(s.properties ?? {});
    if (props.length) {
      const tp: Record<string, AjvSchema> = {};
      for (const [k, v] of props) tp[k] = withRange(k, this.member(v, `${name}.${k}`, !NOT_NULLABLE.has(k)));
      out.properties = tp;
    }
    const ap = s.additionalProperties;
    if (ap !== undefined && typeof ap === 'object') {
      out.additionalProperties = ap.$ref && refName(ap.$ref) === UNRESTRICTED ? ANY_JSON : this.member(ap, `${name}{}`, true);
    } else if (ap === false || (ap === undefined && props.length > 0)) {
      out.additionalProperties = false;
    }
    return out;
  }

  member(m: ModelSchema, name: string, nullable: boolean): AjvSchema {
    const r = singleRef(m);
    if (r !== undefined) {
      if (r === UNRESTRICTED) return ANY_JSON;
      const ref = defRef(this.ref(r));
      return nullable ? { otmOrNull: ref } : { $ref: ref };
    }
    const node = isStructured(m) ? this.node(m, name) : transform(m, name);
    return nullable ? addNull(node) : node;
  }
}

/** The whole model as one ajv schema document with `$id: "otm"` and the schemas under `$defs`. */
export function buildAjvRoot(): AjvSchema {
  const defs: Record<string, AjvSchema> = {};
  for (const [name, s] of Object.entries(MODEL.schemas)) defs[name] = transform(s, displayName(name));
  const patch = new PatchDefs(defs);
  for (const k of Object.values(MODEL.kinds)) patch.ref(k.schema);
  // updateEvent.entity carries only changed data: the entity union as a patch, with id and entityType required
  const upd = updateEventSchema();
  const entity = schemaByName(upd).properties?.entity;
  const target = entity ? singleRef(entity) : undefined;
  if (!target) throw new Error(`${upd}.entity is not a reference`);
  const node = patch.node(schemaByName(target), displayName(target), false);
  node.required = ['entityType', 'id'];
  defs[UPDATE_ENTITY_DEF] = node;
  ((defs[upd] as AjvSchema).properties as Record<string, AjvSchema>).entity = { $ref: defRef(UPDATE_ENTITY_DEF) };
  return { $id: ROOT_ID, $defs: defs };
}
