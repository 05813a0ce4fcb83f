import { isKindSegment, type KindSegment } from '@otm/model';
import { invalidDocument, isUuid, notFound } from '@otm/core';

/** The `<kind>` path segment; an unknown kind is a 404 like any unknown path. */
export function kindParam(raw: string | undefined, url: string, method: string): KindSegment {
  if (raw !== undefined && isKindSegment(raw)) return raw;
  throw notFound(`no resource at ${method} ${url.split('?')[0]}`);
}

/** The `{UUID}` path segment, lower-cased; a malformed one is a 400. */
export function uuidParam(raw: string | undefined): string {
  if (raw === undefined || !isUuid(raw)) {
    throw invalidDocument([
      { type: 'invalidField', field: 'UUID', message: `the path parameter must be a UUID, got '${raw ?? ''}'` },
    ]);
  }
  return raw.toLowerCase();
}

/** Rejects query parameters other than `allowed`. */
export function onlyQuery(query: unknown, allowed: readonly string[]): Record<string, string> {
  const q = (query ?? {}) as Record<string, unknown>;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(q)) {
    if (!allowed.includes(k)) {
      throw invalidDocument([
        { type: 'invalidField', field: k, message: `unknown query parameter${allowed.length ? `; allowed: ${allowed.join(', ')}` : ''}` },
      ]);
    }
    if (typeof v !== 'string') {
      throw invalidDocument([{ type: 'invalidField', field: k, message: 'must be given once' }]);
    }
    out[k] = v;
  }
  return out;
}
