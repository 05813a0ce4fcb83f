/**
 * Request bodies: JSON only, within the size limit, with a limit on nesting depth. Malformed JSON
 * is a 400 with one `invalidJson` item. `JSON.parse` keeps a `__proto__` key as an ordinary own
 * member (it never sets a prototype); validation then rejects such members outside
 * `externalAttributes`.
 */
import { exceedsDepthOf as exceedsDepth } from './depth.js';
import { invalidDocument } from './errors.js';

export function parseJsonBody(text: string, maxDepth: number): unknown {
  if (text.trim() === '') {
    throw invalidDocument([{ type: 'invalidJson', message: 'the request body is empty; a JSON document is expected' }]);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw invalidDocument([{ type: 'invalidJson', message: `the body is not valid JSON: ${(e as Error).message}` }]);
  }
  if (exceedsDepth(value, maxDepth)) {
    throw invalidDocument([
      { type: 'invalidJson', message: `the document nests objects and arrays deeper than ${maxDepth} levels` },
    ]);
  }
  return value;
}
