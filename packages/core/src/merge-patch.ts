/**
 * JSON Merge Patch (RFC 7396), as `updateEvent` applies it: members of the patch replace those of
 * the target, `null` removes a member, objects merge recursively, arrays and other values replace.
 *
 * Written here rather than taken from the `json-merge-patch` package because that one stops at a
 * `__proto__` key and silently drops the rest of the patch; here every key, `__proto__` included,
 * is plain data (defined with `defineProperty`, never assigned), and neither input is changed.
 */
type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function define(obj: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isPlainObject(patch)) return patch;
  const out: Record<string, unknown> = {};
  if (isPlainObject(target)) for (const k of Object.keys(target)) define(out, k, target[k]);
  for (const k of Object.keys(patch)) {
    const v = patch[k];
    if (v === null) {
      delete out[k];
    } else {
      define(out, k, mergePatch(Object.prototype.hasOwnProperty.call(out, k) ? out[k] : undefined, v));
    }
  }
  return out;
}

export type { Json };
