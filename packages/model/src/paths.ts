/**
 * Field paths used in `invalidField` / `missingField` errors.
 *
 * - Members are written from the document root, joined by dots: `vehicle.entity.fuel`.
 * - Array items are written with their index in brackets: `actions[0].entity.location`.
 * - A member name that is not a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`, e.g. it contains a dot,
 *   a space, a dash or a `$`) is written as a JSON string in brackets: `externalAttributes["odd.name"]`,
 *   at the start too: `["odd.name"]`.
 * - The document itself (the root) is written `$`.
 */
export type PathSegment = string | number;

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function formatPath(segments: readonly PathSegment[]): string {
  if (segments.length === 0) return '$';
  let out = '';
  for (const s of segments) {
    if (typeof s === 'number') out += `[${s}]`;
    else if (IDENT.test(s)) out += out === '' ? s : `.${s}`;
    else out += `[${JSON.stringify(s)}]`;
  }
  return out;
}

/** Splits an ajv instancePath (JSON pointer) into segments, using the data to tell array indices apart. */
export function pointerSegments(pointer: string, data: unknown): PathSegment[] {
  if (pointer === '') return [];
  const raw = pointer.slice(1).split('/').map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
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
