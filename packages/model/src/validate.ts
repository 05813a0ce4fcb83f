import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { DataValidateFunction, DataValidationCxt } from 'ajv/dist/types/index.js';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import { isRecurrenceRule } from './recurrence.js';
import { isDateTime } from './datetime.js';
import { buildAjvRoot, defName, defRef, type AjvSchema, type DispatchSpec } from './transform.js';
import { formatField, pointerSegments, valueAt, type PathSegment } from './paths.js';

export type OtmError =
  | { type: 'invalidJson'; message: string }
  | { type: 'invalidField'; field: string; message: string }
  | { type: 'missingField'; field: string; message: string };

/** At most this many items are reported for one document (the last one then says how many were left out). */
export const MAX_ERRORS = 100;
/**
 * The JSON of one answer is at most this many characters: the items that would go past it are left
 * out, like those past MAX_ERRORS. (Every text an item echoes from the document is shortened, so
 * this is only reached by many long items.)
 */
export const MAX_ANSWER_CHARS = 32 * 1024;
/**
 * The validator stops looking once it has found this many problems (ajv errors): the problems past
 * them are neither listed nor counted (the last item then says "more problems not listed").
 */
export const MAX_COLLECTED = 1_000;
/** Member names longer than this get no spelling suggestion (no member of the model is near that long). */
const MAX_SUGGEST_NAME = 64;

/**
 * Work done for error answers since the process started, for tests (time is not deterministic):
 * ajv errors mapped to items, suggestions looked for, member names compared for them, and sub-kinds
 * tried by the collecting validator for merge patches without their discriminator.
 */
export const reportWork = { mapped: 0, suggested: 0, compared: 0, tried: 0 };

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

// ------------------------------------------------------------------------------------------------
// Collecting the problems of an invalid document
// ------------------------------------------------------------------------------------------------
//
// ajv (allErrors) hands the errors of a referenced schema to its caller by `vErrors.concat(...)`, once per
// failing call: an array of n failing items costs n^2/2 copies. The collecting validator therefore calls
// referenced schemas through the keyword `otmRef` instead of `$ref`, and every keyword that calls a
// validator (otmRef, otmDispatch, otmOrNull, otmFinite) moves the callee's errors into the run's list and
// reports success to ajv: each error is moved once, and the run can stop once it has MAX_COLLECTED.
// `additionalProperties: false` becomes `otmKnown`, which collects the unknown members one by one, so that
// an object with a hundred thousand of them stops the run after the first MAX_COLLECTED.

/** The problems found so far by the collecting validator, and whether it stopped before the end. */
interface Run {
  errors: ErrorObject[];
  more: boolean;
  /** The run stops when it holds this many (MAX_COLLECTED; less while a sub-kind that cannot be the closest is tried). */
  limit: number;
}
let run: Run | undefined;

/** Thrown through ajv's code to stop the collecting validator. */
class Enough extends Error {}
const ENOUGH = new Enough('enough problems found');

/** Moves `errors` into the run under way; stops the run when it holds MAX_COLLECTED and more come. */
function collect(errors: readonly ErrorObject[] | null | undefined): void {
  if (errors) for (const e of errors) collectOne(e);
}

function collectOne(e: ErrorObject): void {
  const r = run;
  if (!r) return;
  if (r.errors.length >= r.limit) {
    r.more = true;
    throw ENOUGH;
  }
  r.errors.push(e);
}

/** The schema with every `$ref` turned into `otmRef` and `additionalProperties: false` into `otmKnown` (for the collecting validator). */
function withCalls(s: AjvSchema): AjvSchema {
  const each = (m: unknown): unknown => Object.fromEntries(Object.entries(m as AjvSchema).map(([k, v]) => [k, withCalls(v as AjvSchema)]));
  const out: AjvSchema = {};
  for (const [k, v] of Object.entries(s)) {
    if (k === '$ref') out.otmRef = v;
    else if (k === 'additionalProperties' && v === false) out.otmKnown = true;
    else if (k === 'properties' || k === '$defs') out[k] = each(v);
    else if ((k === 'items' || k === 'additionalItems' || k === 'additionalProperties') && v !== null && typeof v === 'object') {
      out[k] = Array.isArray(v) ? v.map((x) => withCalls(x as AjvSchema)) : withCalls(v as AjvSchema);
    } else out[k] = v;
  }
  return out;
}

/** Whether every number in `v` (at any depth) is finite. */
function allFinite(v: unknown): boolean {
  if (typeof v === 'number') return Number.isFinite(v);
  if (v === null || typeof v !== 'object') return true;
  if (Array.isArray(v)) {
    for (const x of v) if (!allFinite(x)) return false;
    return true;
  }
  for (const k in v) if (Object.hasOwn(v, k) && !allFinite((v as Record<string, unknown>)[k])) return false;
  return true;
}

const escapePointer = (k: string): string => k.replace(/~/g, '~0').replace(/\//g, '~1');

/** An `otmFinite` error for each number in `v` that is not finite (at most `limit`), at its own path below `pointer`. */
function nonFinite(v: unknown, pointer: string, limit: number): ErrorObject[] {
  const out: ErrorObject[] = [];
  const segs: string[] = [];
  const walk = (x: unknown): void => {
    if (out.length >= limit) return;
    if (typeof x === 'number') {
      if (Number.isFinite(x)) return;
      const instancePath = pointer + segs.map((s) => `/${s}`).join('');
      out.push({ keyword: 'otmFinite', instancePath, schemaPath: '#/otmFinite', params: {}, message: 'must be a finite number' });
    } else if (Array.isArray(x)) {
      for (let i = 0; i < x.length; i++) {
        segs.push(String(i));
        walk(x[i]);
        segs.pop();
      }
    } else if (x !== null && typeof x === 'object') {
      for (const k in x) {
        if (!Object.hasOwn(x, k)) continue;
        segs.push(escapePointer(k));
        walk((x as Record<string, unknown>)[k]);
        segs.pop();
      }
    }
  };
  walk(v);
  return out;
}

function makeAjv(allErrors: boolean): Ajv {
  root ??= buildAjvRoot();
  const ajv = new Ajv({
    allErrors,
    verbose: allErrors,
    strict: false,
    strictNumbers: true, // NaN and ±Infinity (JSON.parse gives Infinity for 1e400) are not numbers
    validateFormats: true,
    messages: allErrors,
    code: { optimize: true },
    inlineRefs: false, // smaller code, faster compile; measured no slower here
  });
  for (const f of FORMATS) {
    const def = fullFormats[f];
    if (def !== undefined) ajv.addFormat(f, def);
  }
  ajv.addFormat('date-time', { type: 'string', validate: isDateTime });
  ajv.addFormat('recurrence', { type: 'string', validate: isRecurrenceRule });
  ajv.addVocabulary(['otmName', 'otmDiscriminator', 'otmRange']);
  const lookup = (ref: string): ValidateFunction => {
    const fn = ajv.getSchema(ref);
    if (!fn) throw new Error(`schema ${ref} not found`);
    return fn;
  };
  /** A keyword's answer for a callee's errors: moved into the run (collecting validator), else its own. */
  const report = (validate: DataValidateFunction, errors: ErrorObject[]): boolean => {
    if (allErrors && run) {
      collect(errors);
      return true;
    }
    validate.errors = errors;
    return false;
  };
  ajv.addKeyword({
    keyword: 'otmDispatch',
    schemaType: 'object',
    errors: true,
    compile(spec: DispatchSpec): DataValidateFunction {
      const branches = new Map<string, ValidateFunction>();
      const branch = (ref: string): ValidateFunction => {
        let fn = branches.get(ref);
        if (!fn) {
          fn = lookup(ref);
          branches.set(ref, fn);
        }
        return fn;
      };
      // Merge patch without discriminator: the members each branch knows (undefined: it takes any member)
      const known = spec.any?.map((ref) => {
        const def = (root?.$defs as Record<string, AjvSchema> | undefined)?.[defName(ref)];
        return def && def.additionalProperties === false && !def.otmDispatch
          ? new Set(Object.keys((def.properties as object | undefined) ?? {}))
          : undefined;
      });
      /**
       * How many members of `data` each branch does not know (one pass: an object with many members is
       * not walked once per branch); with `stop`, the name of the first member that no branch knows, if any.
       */
      const unknownCounts = (data: object, stop: boolean): number[] | string => {
        const sets = known ?? [];
        const counts = sets.map(() => 0);
        for (const k in data) {
          if (!Object.hasOwn(data, k)) continue;
          let nowhere = true;
          for (let b = 0; b < sets.length; b++) {
            const set = sets[b];
            if (set && !set.has(k)) counts[b] = (counts[b] ?? 0) + 1;
            else nowhere = false;
          }
          if (nowhere && stop) return k;
        }
        return counts;
      };
      /** Merge patch without discriminator (fast validator): valid if it fits one branch; else the errors of the closest. */
      const anyOf = (refs: string[], data: object, cxt?: DataValidationCxt): ErrorObject[] | undefined => {
        const nowhere = unknownCounts(data, true);
        if (typeof nowhere === 'string') {
          return [
            {
              keyword: 'additionalProperties',
              instancePath: cxt?.instancePath ?? '',
              schemaPath: '#/otmDispatch',
              params: { additionalProperty: nowhere },
              message: 'must NOT have additional properties',
            },
          ];
        }
        let best: ErrorObject[] | undefined;
        for (const r of refs) {
          const fn = branch(r);
          if (fn(data, cxt)) return undefined;
          const errs = fn.errors ?? [];
          if (!best || errs.length < best.length) best = errs;
        }
        return best ?? [];
      };
      /**
       * The same for the collecting validator: each branch's problems are collected, then all but the
       * closest's dropped. A branch is not tried when the members it does not know already make it no
       * closer than the closest so far, and a try stops once it is no closer.
       */
      const anyOfCollecting = (r: Run, refs: string[], data: object, cxt?: DataValidationCxt): boolean => {
        const start = r.errors.length;
        const more = r.more;
        const limit = r.limit;
        const unknown = unknownCounts(data, false) as number[];
        let best: ErrorObject[] | undefined;
        let bestMore = false;
        for (let b = 0; b < refs.length; b++) {
          if (best && (unknown[b] ?? 0) >= best.length) continue;
          const fn = branch(refs[b] as string);
          reportWork.tried++;
          let ok = false;
          r.limit = best ? Math.min(limit, start + best.length) : limit;
          try {
            ok = fn(data, cxt);
            if (!ok) collect(fn.errors);
          } catch (err) {
            if (err !== ENOUGH) throw err;
          }
          r.limit = limit;
          const found = r.errors.splice(start);
          const stopped = r.more;
          r.more = more;
          if (ok && found.length === 0) return true;
          if (!best || found.length < best.length) {
            best = found;
            bestMore = stopped;
          }
        }
        collect(best);
        if (bestMore) {
          r.more = true;
          throw ENOUGH;
        }
        return true;
      };
      const validate: DataValidateFunction = (data: unknown, cxt?: DataValidationCxt): boolean => {
        if (data === null || typeof data !== 'object' || Array.isArray(data)) return true; // `type` reports it
        let ref: string | undefined;
        if (!Object.hasOwn(data, spec.prop)) {
          if (spec.any) {
            if (allErrors && run) return anyOfCollecting(run, spec.any, data, cxt);
            const errs = anyOf(spec.any, data, cxt);
            return errs === undefined || report(validate, errs);
          }
          ref = spec.default;
        } else {
          const tag = (data as Record<string, unknown>)[spec.prop];
          if (typeof tag === 'string' && Object.hasOwn(spec.refs, tag)) ref = spec.refs[tag];
        }
        if (ref === undefined) return true; // `required` / `enum` of the discriminator report it
        const fn = branch(ref);
        return fn(data, cxt) || report(validate, fn.errors ?? []);
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
        fn ??= lookup(ref);
        return fn(data, cxt) || report(validate, fn.errors ?? []);
      };
      return validate;
    },
  });
  ajv.addKeyword({
    // `$ref` in the collecting validator (see withCalls)
    keyword: 'otmRef',
    schemaType: 'string',
    errors: true,
    compile(ref: string): DataValidateFunction {
      let fn: ValidateFunction | undefined;
      const validate: DataValidateFunction = (data: unknown, cxt?: DataValidationCxt): boolean => {
        fn ??= lookup(ref);
        return fn(data, cxt) || report(validate, fn.errors ?? []);
      };
      return validate;
    },
  });
  ajv.addKeyword({
    // `additionalProperties: false` in the collecting validator (see withCalls), with ajv's error for each unknown member
    keyword: 'otmKnown',
    schemaType: 'boolean',
    errors: true,
    compile(_: boolean, parent: AjvSchema): DataValidateFunction {
      const known = new Set(Object.keys((parent.properties as object | undefined) ?? {}));
      const validate: DataValidateFunction = (data: unknown, cxt?: DataValidationCxt): boolean => {
        if (data === null || typeof data !== 'object' || Array.isArray(data)) return true;
        const errors: ErrorObject[] = [];
        let position = -1; // among the object's own members, for the order of the answer
        for (const k in data) {
          if (!Object.hasOwn(data, k)) continue;
          position++;
          if (known.has(k)) continue;
          const e: ErrorObject = {
            keyword: 'additionalProperties',
            instancePath: cxt?.instancePath ?? '',
            schemaPath: '#/otmKnown',
            params: { additionalProperty: k, position },
            message: 'must NOT have additional properties',
            parentSchema: parent,
          };
          if (allErrors && run) collectOne(e);
          else errors.push(e);
        }
        return errors.length === 0 || report(validate, errors);
      };
      return validate;
    },
  });
  ajv.addKeyword({
    // any JSON value whose numbers are all finite (values typed unrestricted_json)
    keyword: 'otmFinite',
    schemaType: 'boolean',
    errors: true,
    compile(): DataValidateFunction {
      const validate: DataValidateFunction = (data: unknown, cxt?: DataValidationCxt): boolean => {
        if (allFinite(data)) return true;
        return report(validate, nonFinite(data, cxt?.instancePath ?? '', allErrors ? MAX_COLLECTED + 1 : 1));
      };
      return validate;
    },
  });
  ajv.addSchema(allErrors ? withCalls(root) : root);
  return ajv;
}

/**
 * Compiled once per schema name and reused. `full` is the collecting validator (all errors, slow path,
 * only on failure); it reports its errors only inside validateAgainst.
 */
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

const SHORT_TEXT = 60;
/** `s` itself, or its first characters and `...` when longer than 60 characters (for texts echoed in messages). */
export const clip = (s: string): string => (s.length > SHORT_TEXT ? `${s.slice(0, SHORT_TEXT - 3)}...` : s);

const quote = (v: unknown): string => (typeof v === 'string' ? `'${v}'` : JSON.stringify(v));
const kindOf = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(clip(v));
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  return Array.isArray(v) ? 'an array' : `a ${typeof v}`;
}

/** Message for a number that is not finite (NaN only comes from code: JSON has none). */
function notFinite(v: number, integer: boolean): string {
  const want = integer ? 'a finite integer' : 'a finite number';
  return Number.isNaN(v) ? `must be ${want}; got NaN` : `must be ${want}; the number given is out of range (its magnitude is over 1.8e308)`;
}

/**
 * Edit distance of `a` and `b` when it is at most `max`, else `max + 1` (the rows stop as soon as
 * every entry of one is over `max`: the entries never decrease from one row to the next).
 */
function distanceWithin(a: string, b: string, max: number): number {
  const n = b.length;
  let prev = Array.from({ length: n + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    let least = i;
    for (let j = 1; j <= n; j++) {
      const cost = a.charCodeAt(i - 1) === b.charCodeAt(j - 1) ? 0 : 1;
      const d = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost);
      cur[j] = d;
      if (d < least) least = d;
    }
    if (least > max) return max + 1;
    prev = cur;
  }
  return Math.min(prev[n] ?? 0, max + 1);
}

/**
 * Nearest known member name, if close enough to be a plausible typo: within max(1, min(3, len/3))
 * edits, case-insensitive, the first of the nearest. Names over 64 characters get none, and only
 * names whose length is within that many of the unknown one's are compared.
 */
export function suggest(unknown: string, known: readonly string[]): string | undefined {
  reportWork.suggested++;
  if (unknown.length > MAX_SUGGEST_NAME) return undefined;
  const u = unknown.toLowerCase();
  const limit = Math.max(1, Math.min(3, Math.floor(unknown.length / 3)));
  let best: string | undefined;
  let bestD = limit + 1;
  for (const k of known) {
    const kl = k.toLowerCase();
    if (Math.abs(kl.length - u.length) > limit) continue;
    reportWork.compared++;
    const d = distanceWithin(u, kl, limit);
    if (d < bestD) {
      bestD = d;
      best = k;
    }
  }
  return best;
}

interface Mapped {
  type: 'invalidField' | 'missingField';
  field: string;
  /** The field path had to be shortened (the message then says so). */
  shortened: boolean;
  message: string;
  /** Unknown member: its name and the members its object knows (a suggestion is looked for when listed). */
  unknown?: { name: string; known: object | undefined };
  /** Position of the (unknown) member among its object's own members, when the validator counted it. */
  position?: number;
  segments: PathSegment[];
  present: boolean;
  rank: number;
}

function parentSchema(e: ErrorObject): AjvSchema {
  return e.parentSchema ?? {};
}

function objName(e: ErrorObject): string {
  const n = parentSchema(e).otmName;
  return typeof n === 'string' ? n : 'object';
}

function mapError(e: ErrorObject, doc: unknown): Mapped | undefined {
  reportWork.mapped++;
  const segs = pointerSegments(e.instancePath, doc);
  const value = valueAt(doc, segs);
  const params = e.params as Record<string, unknown>;
  const at = (path: PathSegment[], message: string, rank: number, type: Mapped['type'] = 'invalidField', present = true): Mapped => {
    const { field, shortened } = formatField(path);
    return { type, field, shortened, message, segments: path, present, rank };
  };
  switch (e.keyword) {
    case 'if':
      return undefined; // "must match then schema": the branch's own errors are reported instead
    case 'required': {
      const prop = String(params.missingProperty);
      const ps = parentSchema(e);
      let message = `missing required member '${prop}' of ${objName(e)}`;
      if (ps.otmDiscriminator === prop) {
        const en = ((ps.properties as Record<string, AjvSchema> | undefined)?.[prop]?.enum ?? []) as unknown[];
        message += `; one of: ${en.map(quote).join(', ')}`;
      }
      return at([...segs, prop], message, 0, 'missingField', false);
    }
    case 'additionalProperties': {
      const prop = String(params.additionalProperty);
      const m = at([...segs, prop], `unknown member of ${objName(e)}`, 0);
      m.unknown = { name: prop, known: parentSchema(e).properties as object | undefined };
      if (typeof params.position === 'number') m.position = params.position;
      return m;
    }
    case 'enum':
    case 'const': {
      // null (allowed in merge patches) is not listed: no model enum contains it
      const allowed = ((e.keyword === 'enum' ? params.allowedValues : [params.allowedValue]) as unknown[]).filter((v) => v !== null);
      const message =
        allowed.length === 1
          ? `must be ${quote(allowed[0])}, got ${describe(value)}`
          : `must be one of: ${allowed.map(quote).join(', ')}; got ${describe(value)}`;
      return at(segs, message, 1);
    }
    case 'type': {
      const types = String(params.type).split(',');
      if (typeof value === 'number' && !Number.isFinite(value)) return at(segs, notFinite(value, !types.includes('number')), 2);
      const word = (t: string): string =>
        t === 'object' ? 'a JSON object' : t === 'array' ? 'an array' : t === 'integer' ? 'an integer' : t === 'null' ? 'null' : `a ${t}`;
      return at(segs, `must be ${types.map(word).join(' or ')}, got ${kindOf(value)}`, 2);
    }
    case 'otmFinite':
      return at(segs, notFinite(typeof value === 'number' ? value : NaN, false), 2);
    case 'format': {
      const f = String(params.format);
      return at(segs, `must be ${FORMAT_TEXT[f] ?? `in format ${f}`}`, 3);
    }
    case 'minimum':
    case 'maximum': {
      const ps = parentSchema(e);
      if (typeof ps.otmRange === 'string') {
        return at(
          segs,
          `must be a ${ps.otmRange} in degrees, from ${String(ps.minimum)} to ${String(ps.maximum)}; got ${describe(value)}`,
          3,
        );
      }
      return at(segs, e.message ?? `fails ${e.keyword}`, 4);
    }
    default:
      return at(segs, e.message ?? `fails ${e.keyword}`, 4);
  }
}

/** The item of a mapped error: the suggestion for an unknown member is looked for here, for listed items only. */
function finish(m: Mapped): OtmError {
  let message = m.message;
  if (m.unknown) {
    const s = suggest(m.unknown.name, Object.keys(m.unknown.known ?? {}));
    if (s) message += `; did you mean '${s}'?`;
  }
  if (m.shortened) message += ' (field shortened: a member name or the path is too long to repeat whole)';
  return { type: m.type, field: m.field, message };
}

/**
 * Order keys in document order, one per item: the member's position among its siblings at each level.
 * The positions are found in one pass over each object on the items' paths, which stops once it has
 * found the members asked for there (an object with many members is not indexed whole); the positions
 * of unknown members come counted by the validator (an object holding nothing but unknown members
 * asked for is not walked again).
 */
function orderKeys(doc: unknown, items: readonly Mapped[]): number[][] {
  const wanted = new Map<object, Set<string>>();
  const counted = new Map<object, Map<string, number>>();
  for (const m of items) {
    let cur: unknown = doc;
    for (let i = 0; i < m.segments.length; i++) {
      const s = m.segments[i] as PathSegment;
      if (Array.isArray(cur) && typeof s === 'number') cur = cur[s];
      else if (cur !== null && typeof cur === 'object') {
        const name = String(s);
        if (i === m.segments.length - 1 && m.position !== undefined) {
          let pos = counted.get(cur);
          if (!pos) counted.set(cur, (pos = new Map<string, number>()));
          pos.set(name, m.position);
        } else {
          let names = wanted.get(cur);
          if (!names) wanted.set(cur, (names = new Set()));
          names.add(name);
        }
        cur = Object.hasOwn(cur, name) ? (cur as Record<string, unknown>)[name] : undefined;
      } else break;
    }
  }
  const positions = counted;
  for (const [obj, names] of wanted) {
    for (const n of counted.get(obj)?.keys() ?? []) names.add(n);
    const pos = new Map<string, number>();
    let i = 0;
    for (const k in obj) {
      if (!Object.hasOwn(obj, k)) continue;
      if (names.has(k)) {
        pos.set(k, i);
        if (pos.size === names.size) break;
      }
      i++;
    }
    positions.set(obj, pos);
  }
  return items.map((m) => {
    const key: number[] = [];
    let cur: unknown = doc;
    for (let i = 0; i < m.segments.length; i++) {
      const s = m.segments[i] as PathSegment;
      if (Array.isArray(cur) && typeof s === 'number') {
        key.push(s);
        cur = cur[s];
      } else if (cur !== null && typeof cur === 'object') {
        const pos = positions.get(cur)?.get(String(s));
        // missing members come after the present ones of the same object
        key.push(pos ?? (i === m.segments.length - 1 && !m.present ? 1e9 : 1e9 + 1));
        cur = pos === undefined ? undefined : (cur as Record<string, unknown>)[String(s)];
      } else key.push(0);
    }
    return key;
  });
}

function compareKeys(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = (a[i] as number) - (b[i] as number);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

/** Room kept for the last item ("... more problems not listed") when the answer is cut. */
const SUMMARY_CHARS = 160;

/**
 * Turns ajv errors into one OtmError per field, in document order, at most MAX_ERRORS items and
 * MAX_ANSWER_CHARS characters of JSON. Only the first MAX_COLLECTED errors are looked at; `more`
 * says that the validator stopped before the end (then the problems left out are not counted).
 */
export function mapErrors(errors: readonly ErrorObject[], doc: unknown, more = false): OtmError[] {
  if (errors.length > MAX_COLLECTED) {
    errors = errors.slice(0, MAX_COLLECTED);
    more = true;
  }
  const byField = new Map<string, Mapped>();
  for (const e of errors) {
    const m = mapError(e, doc);
    if (!m) continue;
    const prev = byField.get(m.field);
    if (!prev || m.rank < prev.rank) byField.set(m.field, m);
  }
  const mapped = [...byField.values()];
  const keys = orderKeys(doc, mapped);
  const list = mapped.map((m, i) => ({ m, k: keys[i] as number[] }));
  list.sort((a, b) => compareKeys(a.k, b.k));
  const out: OtmError[] = [];
  let chars = 2;
  let full = false;
  let i = 0;
  for (; i < list.length; i++) {
    const last = i === list.length - 1 && !more;
    if (out.length === MAX_ERRORS - 1 && !last) break;
    const item = finish((list[i] as { m: Mapped }).m);
    const size = JSON.stringify(item).length + 1;
    if (chars + size + (last ? 0 : SUMMARY_CHARS) > MAX_ANSWER_CHARS) {
      full = true;
      break;
    }
    out.push(item);
    chars += size;
  }
  if (i < list.length || more) {
    const left = more ? 'more' : `${list.length - i} more`;
    const limit = full ? `an answer holds at most ${MAX_ANSWER_CHARS / 1024} KiB` : `at most ${MAX_ERRORS} items are reported`;
    out.push({ type: 'invalidField', field: '$', message: `${left} problems not listed (${limit})` });
  }
  return out;
}

/** Validates `doc` against the named model schema. Internal helper (also used for fragments in tests). */
export function validateAgainst(schema: string, doc: unknown): OtmError[] {
  try {
    if (compiled(schema, false)(doc)) return [];
    const full = compiled(schema, true);
    const r: Run = { errors: [], more: false, limit: MAX_COLLECTED };
    run = r;
    try {
      if (!full(doc)) collect(full.errors);
    } catch (err) {
      if (err !== ENOUGH) throw err;
    } finally {
      run = undefined;
    }
    const errs = mapErrors(r.errors, doc, r.more);
    return errs.length ? errs : [{ type: 'invalidField', field: '$', message: 'document is not valid' }];
  } catch (err) {
    const deep = err instanceof RangeError;
    return [
      {
        type: 'invalidField',
        field: '$',
        message: deep ? 'document is nested too deeply to be validated' : 'document could not be validated',
      },
    ];
  }
}
