/**
 * Inlining of a document's local `$ref`s, bounded: what the API docs page hands Swagger UI instead
 * of its own resolver's answer (bounded-refs.ts says why). Pure: nothing here touches the page.
 */

/** Members whose value is data (an example, a default, the values of an enum), never a schema. */
const SCHEMA_DATA = new Set(['example', 'examples', 'default', 'const', 'enum']);

type Json = unknown;
type JsonObject = Record<string, Json>;
type Path = readonly (string | number)[];

const isObject = (v: Json): v is JsonObject => v !== null && typeof v === 'object' && !Array.isArray(v);
const isLocalRef = (v: Json): v is { $ref: string } => isObject(v) && typeof v.$ref === 'string' && v.$ref.startsWith('#/');

/** The value at a local JSON pointer (`#/components/schemas/vehicle`), or undefined. */
export function pointerGet(doc: Json, ref: string): Json {
  let v = doc;
  for (const raw of ref.slice(2).split('/')) {
    const k = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    if (v === null || typeof v !== 'object' || !Object.prototype.hasOwnProperty.call(v, k)) return undefined;
    v = (v as JsonObject)[k];
  }
  return v;
}

export interface InlineOptions {
  /** At most this many levels of `$ref`s (one inside an inlined schema is one level deeper). */
  maxRefs?: number;
  /** Only within this many levels of objects and arrays under the node: what is deeper is left as it is. */
  near?: number;
  /** Told of each schema inlined (with its name in `$$ref`). */
  onInline?: (schema: JsonObject) => void;
  /** Told of each object copied because something under it changed. */
  onCopy?: (from: JsonObject, to: JsonObject) => void;
  /** The path of the node in the document (for the errors' `fullPath`). */
  basePath?: Path;
}

export interface InlineResult {
  spec: Json;
  /** A `$ref` that names nothing in the document: as Swagger UI's resolver reports it. */
  errors: { message: string; fullPath: (string | number)[] }[];
  /** How many schemas were inlined. */
  inlined: number;
}

/**
 * `node` with its local `$ref`s inlined, within `maxRefs` levels of them and `near` levels of
 * objects and arrays, never one that would repeat a schema of its own path. What changes is
 * copied, the rest is shared. An inlined schema keeps its name in `$$ref`, as Swagger UI's own
 * resolver marks it. Data (examples, defaults, enums) is kept as it is.
 */
export function inlineRefs(spec: Json, node: Json, opts: InlineOptions = {}): InlineResult {
  const { maxRefs = Infinity, near = Infinity, onInline = () => {}, onCopy = () => {}, basePath = [] } = opts;
  const errors: InlineResult['errors'] = [];
  let inlined = 0;
  // `examples` holds data, unless it is OpenAPI's map of named examples (an object, not an array).
  const isData = (k: string, x: Json) => SCHEMA_DATA.has(k) && !(k === 'examples' && isObject(x));
  const walk = (v: Json, refs: number, level: number, stack: readonly string[], path: Path): Json => {
    if (v === null || typeof v !== 'object' || level > near) return v;
    if (Array.isArray(v)) {
      const out = v.map((x: Json, i) => walk(x, refs, level + 1, stack, [...path, i]));
      return out.every((x, i) => x === v[i]) ? v : out;
    }
    const obj = v as JsonObject;
    const members = (skip?: string): JsonObject => {
      const out: JsonObject = {};
      let changed = skip !== undefined;
      for (const [k, x] of Object.entries(obj)) {
        if (k === skip) continue;
        out[k] = isData(k, x) ? x : walk(x, refs, level + 1, stack, [...path, k]);
        if (out[k] !== x) changed = true;
      }
      if (!changed) return obj;
      onCopy(obj, out);
      return out;
    };
    if (!isLocalRef(obj)) return members();
    const target = pointerGet(spec, obj.$ref);
    if (target === undefined) {
      errors.push({ message: `Could not resolve reference: ${obj.$ref}`, fullPath: [...path, '$ref'] });
      return obj;
    }
    if (refs >= maxRefs || stack.includes(obj.$ref)) return obj;
    inlined++;
    const inner = walk(target, refs + 1, level, [...stack, obj.$ref], path);
    if (!isObject(inner)) return inner;
    const merged: JsonObject = { ...inner, ...members('$ref'), $$ref: obj.$ref };
    onInline(merged);
    return merged;
  };
  return { spec: walk(node, 0, 0, [], basePath), errors, inlined };
}

/** Schemas inlined at most when an operation opens (bounded-refs.ts). */
export const MAX_INLINED = 40;

/**
 * The part of `spec` at `path` with its `$ref`s inlined two levels deep, then deeper while at most
 * `maxInlined` schemas are (and while a level adds any).
 */
export function resolveBounded(spec: Json, path: Path, maxInlined = MAX_INLINED): Pick<InlineResult, 'spec' | 'errors'> {
  let node = spec;
  for (const k of path) node = node === null || typeof node !== 'object' ? undefined : (node as Record<string | number, Json>)[k];
  let best = inlineRefs(spec, node, { maxRefs: 2, basePath: path });
  for (let depth = 3; depth <= 20; depth++) {
    const next = inlineRefs(spec, node, { maxRefs: depth, basePath: path });
    if (next.inlined > maxInlined || next.inlined === best.inlined) break;
    best = next;
  }
  return { spec: best.spec, errors: best.errors };
}
