/**
 * Request bodies: JSON only, within the size limit, with a limit on nesting depth. Malformed JSON
 * is a 400 with one `invalidJson` item. `JSON.parse` keeps a `__proto__` key as an ordinary own
 * member (it never sets a prototype); validation then rejects such members outside
 * `externalAttributes`.
 */
import { exceedsDepthOf } from './depth.js';
import type { OtmError } from '@otm/model';
import { invalidDocument } from './errors.js';

/** The error item of a document nested deeper than `limit` levels of arrays and objects. */
export const tooDeep = (limit: number): OtmError => ({
  type: 'invalidJson',
  message: `the document nests objects and arrays deeper than ${limit} levels`,
});

/** Parses a body; a 400 with one `invalidJson` item when it is empty or not JSON. Depth is not checked. */
export function parseJsonText(text: string): unknown {
  if (text.trim() === '') {
    throw invalidDocument([{ type: 'invalidJson', message: 'the request body is empty; a JSON document is expected' }]);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw invalidDocument([{ type: 'invalidJson', message: `the body is not valid JSON: ${(e as Error).message}` }]);
  }
}

/** `parseJsonText`, and a 400 when the document nests deeper than `maxDepth` levels. */
export function parseJsonBody(text: string, maxDepth: number): unknown {
  const value = parseJsonText(text);
  if (exceedsDepthOf(value, maxDepth)) throw invalidDocument([tooDeep(maxDepth)]);
  return value;
}
