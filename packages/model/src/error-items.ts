/**
 * The error items of an invalid document: ajv's errors mapped to the model's items (`mapErrors`),
 * in document order, with plain-words messages, spelling suggestions for unknown members, and the
 * bounds on how many items and characters one answer holds. validate.ts finds the errors.
 */
import type { ErrorObject } from 'ajv';
import type { AjvSchema } from './transform.js';
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
