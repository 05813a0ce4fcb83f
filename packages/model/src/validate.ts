import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { DataValidateFunction, DataValidationCxt } from 'ajv/dist/types/index.js';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import { isRecurrenceRule } from './recurrence.js';
import { isDateTime } from './datetime.js';
import { buildAjvRoot, defRef, type AjvSchema, type DispatchSpec } from './transform.js';
import { formatPath, pointerSegments, valueAt, type PathSegment } from './paths.js';

export type OtmError =
  | { type: 'invalidJson'; message: string }
  | { type: 'invalidField'; field: string; message: string }
  | { type: 'missingField'; field: string; message: string };

/** At most this many items are reported for one document (the last one then says how many were left out). */
export const MAX_ERRORS = 100;

const FORMATS = ['uuid', 'duration', 'int32', 'int64', 'float', 'double', 'email', 'uri'] as const;

const FORMAT_TEXT: Record<string, string> = {
  'date-time': 'a date-time (RFC 3339 with time zone, e.g. 2021-06-23T13:45:00Z)',
  uuid: 'a UUID (e.g. 50824123-0924-4563-ac1e-ca0e37487823)',
  duration: 'an ISO 8601 duration (e.g. PT1H30M)',
  recurrence: 'an RFC 5545 recurrence rule (e.g. FREQ=WEEKLY;BYDAY=MO,TH)',
  int32: 'an integer in the 32-bit range',
  int64: 'an integer in the 64-bit range',
  email: 'an e-mail address',
  uri: 'a URI',
};

let root: AjvSchema | undefined;
let fastAjv: Ajv | undefined;
let fullAjv: Ajv | undefined;
const fastCache = new Map<string, ValidateFunction>();
const fullCache = new Map<string, ValidateFunction>();

function makeAjv(allErrors: boolean): Ajv {
  root ??= buildAjvRoot();
  const ajv = new Ajv({
    allErrors,
    verbose: allErrors,
    strict: false,
    validateFormats: true,
    messages: allErrors,
    code: { optimize: true },
    inlineRefs: false, // smaller code, faster compile; measured no slower here
  });
  for (const f of FORMATS) {
    const def = fullFormats[f];
    if (def !== undefined) ajv.addFormat(f, def as never);
  }
  ajv.addFormat('date-time', { type: 'string', validate: isDateTime });
  ajv.addFormat('recurrence', { type: 'string', validate: isRecurrenceRule });
  ajv.addVocabulary(['otmName', 'otmDiscriminator']);
  ajv.addKeyword({
    keyword: 'otmDispatch',
    schemaType: 'object',
    errors: true,
    compile(spec: DispatchSpec): DataValidateFunction {
      const branches = new Map<string, ValidateFunction>();
      const branch = (ref: string): ValidateFunction => {
        let fn = branches.get(ref);
        if (!fn) {
          fn = ajv.getSchema(ref);
          if (!fn) throw new Error(`schema ${ref} not found`);
          branches.set(ref, fn);
        }
        return fn;
      };
      const validate: DataValidateFunction = (data: unknown, cxt?: DataValidationCxt): boolean => {
        if (data === null || typeof data !== 'object' || Array.isArray(data)) return true; // `type` reports it
        let ref: string | undefined;
        if (!Object.hasOwn(data, spec.prop)) {
          if (spec.any) {
            // merge patch without discriminator: it must fit one branch; else the errors of the closest one
            let best: ErrorObject[] | undefined;
            for (const r of spec.any) {
              const fn = branch(r);
              if (fn(data, cxt)) return true;
              const errs = fn.errors ?? [];
              if (!best || errs.length < best.length) best = errs;
            }
            validate.errors = best ?? [];
            return false;
          }
          ref = spec.default;
        }
        else {
          const tag = (data as Record<string, unknown>)[spec.prop];
          if (typeof tag === 'string' && Object.hasOwn(spec.refs, tag)) ref = spec.refs[tag];
        }
        if (ref === undefined) return true; // `required` / `enum` of the discriminator report it
        const fn = branch(ref);
        if (fn(data, cxt)) return true;
        validate.errors = fn.errors ?? [];
        return false;
      };
      return validate;
    },
  });
  ajv.addKeyword({
    // merge patches: null (remove the member) or a value valid against the referenced schema
    keyword: 'otmOrNull',
    schemaType: 'string',
    errors: true,
    compile(ref: string): DataValidateFunction {
      let fn: ValidateFunction | undefined;
      const validate: DataValidateFunction = (data: unknown, cxt?: DataValidationCxt): boolean => {
        if (data === null) return true;
        if (!fn) {
          fn = ajv.getSchema(ref);
          if (!fn) throw new Error(`schema ${ref} not found`);
        }
        if (fn(data, cxt)) return true;
        validate.errors = fn.errors ?? [];
        return false;
      };
      return validate;
    },
  });
  ajv.addSchema(root);
  return ajv;
}

/** Compiled once per schema name and reused. `full` collects all errors (slow path, only on failure). */
export function compiled(schema: string, full: boolean): ValidateFunction {
  const cache = full ? fullCache : fastCache;
  let fn = cache.get(schema);
  if (!fn) {
    const ajv = full ? (fullAjv ??= makeAjv(true)) : (fastAjv ??= makeAjv(false));
    fn = ajv.getSchema(defRef(schema));
    if (!fn) throw new Error(`schema ${schema} not found`);
    cache.set(schema, fn);
  }
  return fn;
}

// ------------------------------------------------------------------------------------------------
// Error mapping
// ------------------------------------------------------------------------------------------------

const quote = (v: unknown): string => (typeof v === 'string' ? `'${v}'` : JSON.stringify(v));
const kindOf = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 57)}...` : v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  return Array.isArray(v) ? 'an array' : `a ${typeof v}`;
}

function levenshtein(a: string, b: string): number {
  const m = a.length;
  const n = b.length;
  let prev = Array.from({ length: n + 1 }, (_, j) => j);
  for (let i = 1; i <= m; i++) {
    const cur = [i];
    for (let j = 1; j <= n; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      cur[j] = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost);
    }
    prev = cur;
  }
  return prev[n] ?? 0;
}

/** Nearest known member name, if close enough to be a plausible typo. */
export function suggest(unknown: string, known: readonly string[]): string | undefined {
  if (unknown.length > 100) return undefined;
  const u = unknown.toLowerCase();
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of known) {
    const d = levenshtein(u, k.toLowerCase());
    if (d < bestD) {
      bestD = d;
      best = k;
    }
  }
  const limit = Math.max(1, Math.min(3, Math.floor(unknown.length / 3)));
  return best !== undefined && bestD <= limit ? best : undefined;
}

interface Mapped {
  error: OtmError;
  segments: PathSegment[];
  present: boolean;
  rank: number;
}

function parentSchema(e: ErrorObject): AjvSchema {
  return (e.parentSchema ?? {}) as AjvSchema;
}

function objName(e: ErrorObject): string {
  const n = parentSchema(e).otmName;
  return typeof n === 'string' ? n : 'object';
}

function mapError(e: ErrorObject, doc: unknown): Mapped | undefined {
  const segs = pointerSegments(e.instancePath, doc);
  const value = valueAt(doc, segs);
  const params = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'if':
      return undefined; // "must match then schema": the branch's own errors are reported instead
    case 'required': {
      const prop = String(params.missingProperty);
      const path = [...segs, prop];
      const ps = parentSchema(e);
      let message = `missing required member '${prop}' of ${objName(e)}`;
      if (ps.otmDiscriminator === prop) {
        const en = ((ps.properties as Record<string, AjvSchema> | undefined)?.[prop]?.enum ?? []) as unknown[];
        message += `; one of: ${en.map(quote).join(', ')}`;
      }
      return { error: { type: 'missingField', field: formatPath(path), message }, segments: path, present: false, rank: 0 };
    }
    case 'additionalProperties': {
      const prop = String(params.additionalProperty);
      const path = [...segs, prop];
      const known = Object.keys((parentSchema(e).properties as object | undefined) ?? {});
      const s = suggest(prop, known);
      const message = `unknown member of ${objName(e)}${s ? `; did you mean '${s}'?` : ''}`;
      return { error: { type: 'invalidField', field: formatPath(path), message }, segments: path, present: true, rank: 0 };
    }
    case 'enum':
    case 'const': {
      // null (allowed in merge patches) is not listed: no model enum contains it
      const allowed = ((e.keyword === 'enum' ? params.allowedValues : [params.allowedValue]) as unknown[]).filter((v) => v !== null);
      const message =
        allowed.length === 1
          ? `must be ${quote(allowed[0])}, got ${describe(value)}`
          : `must be one of: ${allowed.map(quote).join(', ')}; got ${describe(value)}`;
      return { error: { type: 'invalidField', field: formatPath(segs), message }, segments: segs, present: true, rank: 1 };
    }
    case 'type': {
      const word = (t: string): string => (t === 'object' ? 'a JSON object' : t === 'array' ? 'an array' : t === 'integer' ? 'an integer' : t === 'null' ? 'null' : `a ${t}`);
      const want = String(params.type).split(',').map(word).join(' or ');
      const message = `must be ${want}, got ${kindOf(value)}`;
      return { error: { type: 'invalidField', field: formatPath(segs), message }, segments: segs, present: true, rank: 2 };
    }
    case 'format': {
      const f = String(params.format);
      const message = `must be ${FORMAT_TEXT[f] ?? `in format ${f}`}`;
      return { error: { type: 'invalidField', field: formatPath(segs), message }, segments: segs, present: true, rank: 3 };
    }
    default:
      return {
        error: { type: 'invalidField', field: formatPath(segs), message: e.message ?? `fails ${e.keyword}` },
        segments: segs,
        present: true,
        rank: 4,
      };
  }
}

/** Order key in document order: the member's position among its siblings at each level. */
function orderKey(doc: unknown, segs: PathSegment[], present: boolean, cache: WeakMap<object, Map<string, number>>): number[] {
  const key: number[] = [];
  let cur: unknown = doc;
  for (let i = 0; i < segs.length; i++) {
    const s = segs[i] as PathSegment;
    if (Array.isArray(cur) && typeof s === 'number') {
      key.push(s);
      cur = cur[s];
    } else if (cur !== null && typeof cur === 'object') {
      let idx = cache.get(cur);
      if (!idx) {
        idx = new Map(Object.keys(cur).map((k, j) => [k, j]));
        cache.set(cur, idx);
      }
      const pos = idx.get(String(s));
      // missing members come after the present ones of the same object
      key.push(pos ?? (i === segs.length - 1 && !present ? 1e9 : 1e9 + 1));
      cur = pos === undefined ? undefined : (cur as Record<string, unknown>)[String(s)];
    } else key.push(0);
  }
  return key;
}

function compareKeys(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = (a[i] as number) - (b[i] as number);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

/** Turns ajv errors into one OtmError per field, in document order, capped at MAX_ERRORS. */
export function mapErrors(errors: readonly ErrorObject[], doc: unknown): OtmError[] {
  const byField = new Map<string, Mapped>();
  for (const e of errors) {
    const m = mapError(e, doc);
    if (!m) continue;
    const f = m.error.type === 'invalidJson' ? '' : m.error.field;
    const prev = byField.get(f);
    if (!prev || m.rank < prev.rank) byField.set(f, m);
  }
  const cache = new WeakMap<object, Map<string, number>>();
  const list = [...byField.values()].map((m) => ({ m, k: orderKey(doc, m.segments, m.present, cache) }));
  list.sort((a, b) => compareKeys(a.k, b.k));
  const out = list.map((x) => x.m.error);
  if (out.length > MAX_ERRORS) {
    const more = out.length - (MAX_ERRORS - 1);
    out.length = MAX_ERRORS - 1;
    out.push({ type: 'invalidField', field: '$', message: `${more} more problems not listed (at most ${MAX_ERRORS} items are reported)` });
  }
  return out;
}

/** Validates `doc` against the named model schema. Internal helper (also used for fragments in tests). */
export function validateAgainst(schema: string, doc: unknown): OtmError[] {
  try {
    if (compiled(schema, false)(doc)) return [];
    const full = compiled(schema, true);
    full(doc);
    const errs = mapErrors(full.errors ?? [], doc);
    return errs.length ? errs : [{ type: 'invalidField', field: '$', message: 'document is not valid' }];
  } catch (err) {
    const deep = err instanceof RangeError;
    return [{
      type: 'invalidField',
      field: '$',
      message: deep ? 'document is nested too deeply to be validated' : 'document could not be validated',
    }];
  }
}
