/**
 * What a request's headers name: its media type, its content codings. Error messages that echo
 * what the client sent keep them short (`clip`). Path and query parameters are checked against
 * their routes' schemas (validation.ts).
 */

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
