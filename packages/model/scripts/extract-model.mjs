#!/usr/bin/env node
// Extracts the machine-readable facts of an Open Trip Model OpenAPI file into this package.
//
//   npm run model:extract -- <path-to-otm-api.yaml>
//
// Writes (relative to packages/model):
//   src/generated/otm-schemas.json     every component schema, prose removed, plus our documented patches
//   src/generated/types.ts             TypeScript types generated from the same facts
//   test/fixtures/model-examples.json  every schema-level `example` of the file, classified by kind:
//       { name, kind, valid, note?, document }. `name` is the schema the example belongs to; `kind` the
//       path segment it can be PUT to, or null for fragments (then `valid` is about schema `name`).
//
// Only facts are kept: names, types, formats, enums, required members, discriminators, references,
// defaults and deprecated flags. Descriptions, titles, summaries and examples are dropped (examples
// go to the test fixtures only). Unknown schema keywords abort the run so that a future model
// version cannot silently lose a fact.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { load } from 'js-yaml';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');

const yamlPath = process.argv[2];
if (!yamlPath) {
  console.error('usage: extract-model.mjs <path-to-otm-openapi.yaml>');
  process.exit(2);
}
const api = load(fs.readFileSync(yamlPath, 'utf8'));
const source = api?.components?.schemas;
if (!source || typeof source !== 'object') {
  console.error(`${yamlPath}: no components.schemas`);
  process.exit(1);
}

// ---------------------------------------------------------------------------------------------
// 1. Strip prose, keep facts
// ---------------------------------------------------------------------------------------------
const PROSE = new Set(['description', 'example', 'examples', 'title', 'summary', 'externalDocs']);
const FACT_SCALARS = new Set([
  'type',
  'format',
  'enum',
  'const',
  'required',
  'deprecated',
  'default',
  '$ref',
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
  'nullable',
  'readOnly',
  'writeOnly',
]);
const SCHEMA_LISTS = new Set(['oneOf', 'allOf', 'anyOf']);

function clean(node, where) {
  if (node === null || typeof node !== 'object' || Array.isArray(node)) {
    throw new Error(`${where}: schema expected`);
  }
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (PROSE.has(k) || k.startsWith('x-')) continue;
    if (FACT_SCALARS.has(k)) out[k] = structuredClone(v);
    else if (k === 'properties') {
      out.properties = {};
      for (const [pk, pv] of Object.entries(v)) out.properties[pk] = clean(pv, `${where}.${pk}`);
    } else if (k === 'items' || k === 'not') out[k] = clean(v, `${where}/${k}`);
    else if (k === 'additionalProperties') out[k] = typeof v === 'boolean' ? v : clean(v, `${where}/${k}`);
    else if (SCHEMA_LISTS.has(k)) out[k] = v.map((x, i) => clean(x, `${where}/${k}[${i}]`));
    else if (k === 'discriminator') {
      out.discriminator = { propertyName: v.propertyName };
      if (v.mapping) out.discriminator.mapping = { ...v.mapping };
    } else throw new Error(`${where}: unknown schema keyword '${k}' (extend extract-model.mjs)`);
  }
  return out;
}

const schemas = {};
for (const [name, s] of Object.entries(source)) schemas[name] = clean(s, name);

const refName = (ref) => {
  const m = /^#\/components\/schemas\/(.+)$/.exec(ref);
  if (!m) throw new Error(`unsupported $ref ${ref}`);
  return m[1];
};
const hasRef = (node, name) => node?.$ref === `#/components/schemas/${name}`;

// ---------------------------------------------------------------------------------------------
// 2. Patches (each one documented in `patches` of the output and in the README)
// ---------------------------------------------------------------------------------------------
const patches = [];
const ACTION_TYPES = Object.keys(schemas.action.discriminator.mapping);
const EVENT_TYPES = Object.keys(schemas.event.discriminator.mapping);
const REFERENCE_ENTITY_TYPES = schemas.reference.properties.entityType.enum;

// 2a0. weigh: the model's own weigh example weighs a consignment, but the weigh schema has no
//      `consignment` member. Add it with the same association schema load/unload use.
if (schemas.weigh?.properties && !schemas.weigh.properties.consignment && schemas.load?.properties?.consignment) {
  const props = {};
  for (const [k, v] of Object.entries(schemas.weigh.properties)) {
    props[k] = v;
    if (k === 'transportEquipment') props.consignment = structuredClone(schemas.load.properties.consignment);
  }
  if (!props.consignment) props.consignment = structuredClone(schemas.load.properties.consignment);
  schemas.weigh.properties = props;
  patches.push("weigh: member consignment added (same association as load.consignment); the model's own weigh example uses it");
}

// 2a. updateEvent.entity: the `entity` union has no `weigh` entry although `weigh` is an action kind.
//     Synthesise `weigh-in-events` the way the model derives the other `*-in-events` variants from
//     their action (drop actionType and stop, add required entityType).
if (schemas.weigh && !schemas['weigh-in-events'] && !schemas.entity.discriminator.mapping.weigh) {
  const w = structuredClone(schemas.weigh);
  const props = { entityType: { type: 'string', enum: ['weigh'] } };
  for (const [k, v] of Object.entries(w.properties)) if (k !== 'actionType' && k !== 'stop') props[k] = v;
  schemas['weigh-in-events'] = { type: 'object', properties: props, required: ['entityType'] };
  schemas.entity.oneOf.push({ $ref: '#/components/schemas/weigh-in-events' });
  schemas.entity.discriminator.mapping.weigh = '#/components/schemas/weigh-in-events';
  patches.push(
    'weigh-in-events: synthesised from weigh (without actionType and stop, with required entityType "weigh") and added to the entity union, whose mapping lacks weigh',
  );
}

// 2b. Entity variants that the model declares without the member naming their kind accept that
//     member (optional) with the kind's value, so that a sender who always writes entityType is not
//     rejected by the unknown-member policy.
function addOptional(name, prop, values) {
  const s = schemas[name];
  if (!s?.properties || s.properties[prop]) return false;
  s.properties = { [prop]: { type: 'string', enum: values }, ...s.properties };
  return true;
}
const constraintVariants = [];
for (const [name, s] of Object.entries(schemas)) {
  if (name !== 'constraint' && /-constraint$/.test(name) && hasRef(s.properties?.value, 'constraintValue')) {
    if (addOptional(name, 'entityType', ['constraint'])) constraintVariants.push(name);
  }
}
patches.push(`optional entityType "constraint" accepted on the constraint-entity variants: ${constraintVariants.join(', ')}`);
if (addOptional('route-entity-constraint', 'entityType', ['route'])) {
  patches.push('optional entityType "route" accepted on route-entity-constraint');
}
for (const [name, t] of [
  ['stop-entity', 'stop'],
  ['move-entity', 'move'],
]) {
  if (addOptional(name, 'actionType', [t])) addOptional(name, 'entityType', ['action', t]);
  patches.push(`optional actionType "${t}" and entityType "action" | "${t}" accepted on ${name}`);
}
// 2c. Actions and events have no entityType member in the model. Accept an optional entityType with
//     the generic kind name or the sub-kind's own name (as the reference enum spells it), so that it
//     can be checked against the path's kind instead of being an unknown member.
for (const t of ACTION_TYPES) {
  const name = refName(schemas.action.discriminator.mapping[t]);
  addOptional(name, 'entityType', ['action', t]);
}
patches.push('optional entityType "action" | <actionType> accepted on every action kind');
for (const t of EVENT_TYPES) {
  const name = refName(schemas.event.discriminator.mapping[t]);
  const short = t.replace(/Event$/, '');
  const values = ['event', t];
  if (short !== t && REFERENCE_ENTITY_TYPES.includes(short)) values.push(short);
  addOptional(name, 'entityType', values);
}
patches.push(
  'optional entityType "event" | <eventType> (| the short name used by the reference entityType enum) accepted on every event kind',
);
// 2d. The *-in-events variants (discriminated by entityType) accept an optional actionType equal to
//     their entityType, so an action written as for PUT /actions plus entityType is accepted.
for (const [v, ref] of Object.entries(schemas.entity.discriminator.mapping)) {
  const name = refName(ref);
  if (ACTION_TYPES.includes(v)) addOptional(name, 'actionType', [v]);
}
patches.push('optional actionType equal to entityType accepted on the *-in-events variants');

// ---------------------------------------------------------------------------------------------
// 3. Kinds (from paths)
// ---------------------------------------------------------------------------------------------
function schemaNameFor(node) {
  if (node.$ref) return refName(node.$ref);
  const c = JSON.stringify(clean(node, 'path schema'));
  for (const [n, s] of Object.entries(schemas)) if (JSON.stringify(s) === c) return n;
  throw new Error('request schema without a named equivalent');
}
const kinds = {};
for (const [p, item] of Object.entries(api.paths ?? {})) {
  const m = /^\/api\/v5\/([A-Za-z]+)$/.exec(p);
  if (!m || !item.put) continue;
  const sch = item.put.requestBody?.content?.['application/json']?.schema;
  if (!sch) continue;
  kinds[m[1]] = { schema: schemaNameFor(sch), operationId: item.put.operationId ?? null };
}

const out = {
  $comment: 'GENERATED by packages/model/scripts/extract-model.mjs - do not edit. Facts only, prose removed.',
  source: { openapi: api.openapi, version: api.info?.version ?? null },
  patches,
  kinds,
  schemas,
};
fs.mkdirSync(path.join(pkg, 'src/generated'), { recursive: true });
fs.writeFileSync(path.join(pkg, 'src/generated/otm-schemas.json'), JSON.stringify(out, null, 1) + '\n');

// ---------------------------------------------------------------------------------------------
// 4. TypeScript types
// ---------------------------------------------------------------------------------------------
const pascal = (n) =>
  n
    .split(/[-_]/)
    .filter(Boolean)
    .map((p) => p[0].toUpperCase() + p.slice(1))
    .join('');
const RENAME = { entity: 'EntityInEvents' }; // `Entity` is the public union of the 13 kinds (index.ts)
const typeNames = {};
const taken = new Map();
// camelCase schema names first so that they keep the plain name on collision
const order = Object.keys(schemas).sort((a, b) => Number(a.includes('-')) - Number(b.includes('-')));
for (const n of order) {
  let t = RENAME[n] ?? pascal(n);
  if (taken.has(t)) t = `${t}Entity`;
  if (taken.has(t)) throw new Error(`type name collision: ${n} -> ${t}`);
  taken.set(t, n);
  typeNames[n] = t;
}
const ident = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const key = (k) => (ident.test(k) ? k : JSON.stringify(k));
const lit = (v) => JSON.stringify(v);
const paren = (t) => (/[|&]/.test(t) ? `(${t})` : t);

function tsType(s, indent) {
  if (s.$ref) return typeNames[refName(s.$ref)];
  if (s.enum) return s.enum.map(lit).join(' | ');
  if (s.const !== undefined) return lit(s.const);
  if (s.oneOf || s.anyOf) return (s.oneOf ?? s.anyOf).map((x) => paren(tsType(x, indent))).join(' | ');
  if (s.allOf) {
    const parts = s.allOf.map((x) => tsType(x, indent)).filter((t) => t !== 'unknown');
    return parts.length ? parts.map(paren).join(' & ') : 'unknown';
  }
  const t = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
  if (t.length > 1) return t.map((x) => tsType({ ...s, type: x }, indent)).join(' | ');
  switch (t[0]) {
    case 'string':
      return 'string';
    case 'number':
    case 'integer':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array':
      return `${paren(s.items ? tsType(s.items, indent) : 'unknown')}[]`;
    case 'object':
    case undefined: {
      if (!s.properties && t[0] === undefined) return 'unknown';
      return objType(s, indent);
    }
    default:
      return 'unknown';
  }
}
function objType(s, indent) {
  const props = Object.entries(s.properties ?? {});
  const req = new Set(s.required ?? []);
  let addl = null;
  if (s.additionalProperties && typeof s.additionalProperties === 'object') {
    addl = hasRef(s.additionalProperties, 'unrestricted_json') ? 'unknown' : tsType(s.additionalProperties, indent);
  } else if (props.length === 0) addl = 'unknown';
  const pad = '  '.repeat(indent + 1);
  const lines = [];
  for (const [k, v] of props) {
    const dep = v.deprecated || v.allOf?.some((x) => x.deprecated) ? `${pad}/** @deprecated */\n` : '';
    lines.push(`${dep}${pad}${key(k)}${req.has(k) ? '' : '?'}: ${tsType(v, indent + 1)};`);
  }
  if (addl) lines.push(`${pad}[key: string]: ${addl};`);
  if (!lines.length) return '{}';
  return `{\n${lines.join('\n')}\n${'  '.repeat(indent)}}`;
}

const constName = (n) =>
  n
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/[-]/g, '_')
    .toUpperCase() + '_VALUES';
let ts = `// GENERATED by packages/model/scripts/extract-model.mjs from Open Trip Model ${api.info?.version ?? ''} - do not edit.\n`;
ts += '// One type per component schema (facts only). Schema name in the comment above each type.\n\n';
// const arrays for enumerations and discriminators
const consts = [];
for (const [n, s] of Object.entries(schemas)) {
  if (s.enum) consts.push([constName(n), s.enum]);
  else if (s.type === 'array' && s.items?.enum) consts.push([constName(n), s.items.enum]);
}
consts.push(['EVENT_TYPES', EVENT_TYPES], ['ACTION_TYPES', ACTION_TYPES]);
consts.push(['GOODS_TYPES', Object.keys(schemas.goods.discriminator.mapping)]);
consts.push(['ACTOR_TYPES', Object.keys(schemas.actor.discriminator.mapping)]);
consts.push(['CONSTRAINT_VALUE_TYPES', Object.keys(schemas.constraintValue.discriminator.mapping)]);
consts.push(['REFERENCE_ENTITY_TYPES', REFERENCE_ENTITY_TYPES]);
for (const [c, vals] of consts) ts += `export const ${c} = ${JSON.stringify(vals)} as const;\n`;
ts += '\n';
for (const [n, s] of Object.entries(schemas)) {
  const dep = s.deprecated ? ' @deprecated' : '';
  ts += `/** Schema \`${n}\`${dep} */\n`;
  ts += `export type ${typeNames[n]} = ${tsType(s, 0)};\n\n`;
}
fs.writeFileSync(path.join(pkg, 'src/generated/types.ts'), ts);

// ---------------------------------------------------------------------------------------------
// 5. Example documents -> test fixtures
// ---------------------------------------------------------------------------------------------
const segmentOfSchema = {};
for (const [seg, k] of Object.entries(kinds)) segmentOfSchema[k.schema] = seg;
for (const t of ACTION_TYPES) segmentOfSchema[refName(schemas.action.discriminator.mapping[t])] = 'actions';
for (const t of EVENT_TYPES) segmentOfSchema[refName(schemas.event.discriminator.mapping[t])] = 'events';
for (const r of Object.values(schemas.goods.discriminator.mapping)) segmentOfSchema[refName(r)] = 'goods';
for (const r of schemas.actor.oneOf) segmentOfSchema[refName(r.$ref)] = 'actors';
for (const n of constraintVariants) segmentOfSchema[n] = 'constraints'; // constraint entities
segmentOfSchema['route-entity-constraint'] = 'routes'; // a route entity (used inside routeEntityConstraint)
// stop-entity / move-entity are the inline stop and move of other actions: they lack the required
// actionType, so they are not documents of PUT /actions -> fragments (kind null).
// Examples that are invalid against their own schema (for fragments: against the schema they exemplify).
const KNOWN_INVALID = new Map([
  ['attachTransportEquipment', 'inline transportEquipment lacks the required type'],
  ['attach-in-events', 'lacks the required entityType; inline transportEquipment lacks the required type'],
]);
for (const n of Object.keys(source)) {
  if (n.endsWith('-in-events') && !KNOWN_INVALID.has(n)) KNOWN_INVALID.set(n, 'lacks the required entityType');
}

const examples = [];
for (const [name, s] of Object.entries(source)) {
  if (s.example === undefined) continue;
  const kind = segmentOfSchema[name] ?? null;
  const entry = { name, kind, valid: !KNOWN_INVALID.has(name) };
  if (KNOWN_INVALID.has(name)) entry.note = KNOWN_INVALID.get(name);
  entry.document = s.example;
  examples.push(entry);
}
fs.mkdirSync(path.join(pkg, 'test/fixtures'), { recursive: true });
fs.writeFileSync(path.join(pkg, 'test/fixtures/model-examples.json'), JSON.stringify(examples, null, 1) + '\n');

console.log(
  `schemas: ${Object.keys(schemas).length} (${Object.keys(source).length} in the file), kinds: ${Object.keys(kinds).length}, examples: ${examples.length}`,
);
