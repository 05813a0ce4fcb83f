/**
 * Validation of a document against its kind's OTM 5.9 schema with ajv: a fast validator that only says
 * whether it is valid, and a collecting one, run on invalid documents only, whose errors
 * error-items.ts turns into the model's error items.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { DataValidateFunction, DataValidationCxt } from 'ajv/dist/types/index.js';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import { isRecurrenceRule } from './recurrence.js';
import { isDateTime } from './datetime.js';
import { buildAjvRoot, defName, defRef, type AjvSchema, type DispatchSpec } from './transform.js';
import { MAX_COLLECTED, mapErrors, reportWork, type OtmError } from './error-items.js';

export { MAX_ANSWER_CHARS, MAX_COLLECTED, MAX_ERRORS, clip, mapErrors, reportWork, suggest, type OtmError } from './error-items.js';

const FORMATS = ['uuid', 'duration', 'int32', 'int64', 'float', 'double', 'email', 'uri'] as const;

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
