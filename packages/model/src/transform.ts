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
 *   rejected). Values typed `unrestricted_json` (externalAttributes) accept any JSON value.
 * - Every object schema carries `otmName` (used in messages), dispatch nodes carry `otmDiscriminator`.
 */
import { MODEL, refName, schemaByName, type ModelSchema } from './model-data.js';

export type AjvSchema = Record<string, unknown>;

/** Discriminator dispatch: the branch for `refs[value of prop]`, or `default` when prop is absent. */
export interface DispatchSpec {
  prop: string;
  refs: Record<string, string>;
  default?: string;
}

const ROOT_ID = 'otm';
export const defRef = (name: string): string => `${ROOT_ID}#/$defs/${name}`;

const UNRESTRICTED = 'unrestricted_json';

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
function flattenParts(parts: ModelSchema[]): ModelSchema {
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
  for (const k of ['type', 'format', 'enum', 'const', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum',
    'minLength', 'maxLength', 'pattern', 'minItems', 'maxItems', 'uniqueItems', 'minProperties', 'maxProperties']) {
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
      for (const [k, v] of props) tp[k] = transform(v, `${name}.${k}`);
      out.properties = tp;
    }
    if (s.required?.length) out.required = s.required;
    const ap = s.additionalProperties;
    if (ap !== undefined && typeof ap === 'object') {
      if (ap.$ref && refName(ap.$ref) === UNRESTRICTED) {
        /* any JSON value */
      } else out.additionalProperties = transform(ap, `${name}{}`);
    } else if (ap === false || (ap === undefined && props.length > 0)) {
      out.additionalProperties = false;
    }
  }
  return out;
}

/** The whole model as one ajv schema document with `$id: "otm"` and the schemas under `$defs`. */
export function buildAjvRoot(): AjvSchema {
  const defs: Record<string, AjvSchema> = {};
  for (const [name, s] of Object.entries(MODEL.schemas)) defs[name] = transform(s, displayName(name));
  return { $id: ROOT_ID, $defs: defs };
}
