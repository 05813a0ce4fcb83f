/**
 * Request bodies: JSON only, within the size limit, with a limit on nesting depth. Malformed JSON
 * is a 400 with one `invalidJson` item. `JSON.parse` keeps a `__proto__` key as an ordinary own
 * member (it never sets a prototype); validation then rejects such members outside
 * `externalAttributes`.
 */
import { invalidDocument } from '@otm/core';

/** Whether `value` nests arrays and objects deeper than `limit` levels. */
export function exceedsDepth(value: unknown, limit: number): boolean {
  // Iterative, so that a hostile document cannot exhaust the stack.
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth > limit) return true;
    if (Array.isArray(v)) {
      for (const item of v) if (item !== null && typeof item === 'object') stack.push([item, depth + 1]);
    } else {
      for (const key in v) {
        const item = (v as Record<string, unknown>)[key];
        if (item !== null && typeof item === 'object') stack.push([item, depth + 1]);
      }
    }
  }
  return false;
}

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
