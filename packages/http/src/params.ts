/**
 * What a request names besides its body: path and query parameters, and its media type. Error
 * messages that echo what the client sent keep them short (`clip`).
 */
import { isKindSegment, type KindSegment } from '@otm/model';
import { invalidDocument, isUuid, notFound } from '@otm/core';

/** Most characters of client-sent text (a path, a header, a name) an error message repeats. */
export const ECHO_LIMIT = 200;

/** `text`, cut to `max` characters (saying how long it was) when longer: for error messages that echo it. */
export function clip(text: string, max: number = ECHO_LIMIT): string {
  return text.length <= max ? text : `${text.slice(0, max)}... (${text.length} characters)`;
}

/** What a Content-Type header says of a body: JSON, NDJSON, either in a charset other than UTF-8, or neither (undefined). */
export type JsonMediaType = 'json' | 'ndjson' | 'unsupported-charset';

const JSON_ESSENCE = /^application\/([a-z0-9.-]+\+)?json$/;
const NDJSON_ESSENCE = /^application\/(x-)?ndjson$/;
/** A `charset` parameter and its value, a token or a quoted string (RFC 9110, section 5.6.6). */
const CHARSET_PARAM = /;\s*charset\s*=\s*("(?:[^"\\]|\\.)*"|[^;\s]*)/gi;

/**
 * The content codings a `Content-Encoding` header lists, lower case, in order, `identity` left out
 * (it changes nothing): `gzip, br` gives ['gzip', 'br']; no header, or `identity`, gives [].
 */
export function contentCodings(header: string | undefined): string[] {
  if (header === undefined) return [];
  return header
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
}

/**
 * The kind of body a Content-Type announces: `json` for `application/json` and `application/*+json`,
 * `ndjson` for `application/x-ndjson` and `application/ndjson`, in any case, with or without
 * parameters; `unsupported-charset` when one of those has a `charset` other than UTF-8 (the name
 * in any case, quoted or not); undefined for any other type or none.
 */
export function jsonMediaType(contentType: string | undefined): JsonMediaType | undefined {
  if (contentType === undefined) return undefined;
  if (contentType === 'application/json') return 'json';
  const semicolon = contentType.indexOf(';');
  const essence = (semicolon < 0 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase();
  const kind = JSON_ESSENCE.test(essence) ? 'json' : NDJSON_ESSENCE.test(essence) ? 'ndjson' : undefined;
  if (kind === undefined || semicolon < 0) return kind;
  for (const m of contentType.slice(semicolon).matchAll(CHARSET_PARAM)) {
    let charset = m[1]!;
    if (charset.startsWith('"')) charset = charset.slice(1, -1).replace(/\\(.)/g, '$1');
    charset = charset.toLowerCase();
    if (charset !== 'utf-8' && charset !== 'utf8') return 'unsupported-charset';
  }
  return kind;
}

/** The `<kind>` path segment; an unknown kind is a 404 like any unknown path. */
export function kindParam(raw: string | undefined, url: string, method: string): KindSegment {
  if (raw !== undefined && isKindSegment(raw)) return raw;
  throw notFound(`no resource at ${method} ${clip(url.split('?')[0]!)}`);
}

/** The `{UUID}` path segment, lower-cased; a malformed one is a 400. */
export function uuidParam(raw: string | undefined): string {
  if (raw === undefined || !isUuid(raw)) {
    throw invalidDocument([
      { type: 'invalidField', field: 'UUID', message: `the path parameter must be a UUID, got '${clip(raw ?? '')}'` },
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
        {
          type: 'invalidField',
          field: clip(k),
          message: `unknown query parameter${allowed.length ? `; allowed: ${allowed.join(', ')}` : ''}`,
        },
      ]);
    }
    if (typeof v !== 'string') {
      throw invalidDocument([{ type: 'invalidField', field: clip(k), message: 'must be given once' }]);
    }
    out[k] = v;
  }
  return out;
}
