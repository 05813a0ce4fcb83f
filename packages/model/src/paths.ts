/**
 * Field paths used in `invalidField` / `missingField` errors.
 *
 * - Members are written from the document root, joined by dots: `vehicle.entity.fuel`.
 * - Array items are written with their index in brackets: `actions[0].entity.location`.
 * - A member name that is not a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`, e.g. it contains a dot,
 *   a space, a dash or a `$`) is written as a JSON string in brackets: `externalAttributes["odd.name"]`,
 *   at the start too: `["odd.name"]`.
 * - The document itself (the root) is written `$`.
 * - A member name of more than 64 characters is written as its first 60 and `...` (in brackets); a
 *   path of more than 1,000 characters as its start and its end joined by `...`.
 */
export type PathSegment = string | number;

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Member names longer than this are written shortened in a field path (their first SHORT_NAME characters and `...`). */
export const MAX_NAME = 64;
const SHORT_NAME = 60;
/** A field path longer than this is written shortened (its start and its end, joined by `...`). */
export const MAX_FIELD = 1_000;

/** The field path of `segments`; names and paths over the limits above are shortened. */
export function formatPath(segments: readonly PathSegment[]): string {
  return formatField(segments).field;
}

/**
 * The field path of `segments`, and whether it had to be shortened: a member name of more than
 * MAX_NAME characters is written as its first characters and `...`, in brackets
 * (`["aaaa...aaa..."]`); a path still longer than MAX_FIELD keeps its start and its end, joined by
 * `...`. A document's member names are echoed in answers, so neither may echo more than that.
 */
export function formatField(segments: readonly PathSegment[]): { field: string; shortened: boolean } {
  if (segments.length === 0) return { field: '$', shortened: false };
  let out = '';
  let shortened = false;
  for (const s of segments) {
    if (typeof s === 'number') out += `[${s}]`;
    else if (s.length > MAX_NAME) {
      out += `[${JSON.stringify(`${s.slice(0, SHORT_NAME)}...`)}]`;
      shortened = true;
    } else if (IDENT.test(s)) out += out === '' ? s : `.${s}`;
    else out += `[${JSON.stringify(s)}]`;
    if (out.length > 4 * MAX_FIELD) break; // the rest is cut anyway
  }
  if (out.length > MAX_FIELD) {
    const half = Math.floor((MAX_FIELD - 3) / 2);
    // the end is taken from the whole path: the member at fault is its last segment
    const whole = out.length > 4 * MAX_FIELD ? formatTail(segments, half) : out;
    out = `${out.slice(0, half)}...${whole.slice(-half)}`;
    shortened = true;
  }
  return { field: out, shortened };
}

/** At least the last `n` characters of the field path of `segments` (names shortened as above). */
function formatTail(segments: readonly PathSegment[], n: number): string {
  let out = '';
  for (let i = segments.length - 1; i >= 0 && out.length < n; i--) {
    const s = segments[i] as PathSegment;
    if (typeof s === 'number') out = `[${s}]${out}`;
    else if (s.length > MAX_NAME) out = `[${JSON.stringify(`${s.slice(0, SHORT_NAME)}...`)}]${out}`;
    else if (IDENT.test(s)) out = `.${s}${out}`;
    else out = `[${JSON.stringify(s)}]${out}`;
  }
  return out;
}

/** Splits an ajv instancePath (JSON pointer) into segments, using the data to tell array indices apart. */
export function pointerSegments(pointer: string, data: unknown): PathSegment[] {
  if (pointer === '') return [];
  const raw = pointer
    .slice(1)
    .split('/')
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  const out: PathSegment[] = [];
  let cur: unknown = data;
  for (const seg of raw) {
    if (Array.isArray(cur)) {
      const i = Number(seg);
      out.push(i);
      cur = cur[i];
    } else {
      out.push(seg);
      cur = cur !== null && typeof cur === 'object' && Object.hasOwn(cur, seg) ? (cur as Record<string, unknown>)[seg] : undefined;
    }
  }
  return out;
}

/** The value at `segments` in `data` (own members only), or undefined. */
export function valueAt(data: unknown, segments: readonly PathSegment[]): unknown {
  let cur: unknown = data;
  for (const s of segments) {
    if (Array.isArray(cur) && typeof s === 'number') cur = cur[s];
    else if (cur !== null && typeof cur === 'object' && Object.hasOwn(cur, String(s))) cur = (cur as Record<string, unknown>)[String(s)];
    else return undefined;
  }
  return cur;
}
