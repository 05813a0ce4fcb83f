import { describe, expect, it } from 'vitest';
import { exceedsDepthOf } from '../src/index.js';

/** `levels` arrays or objects nested in one another. */
const nested = (levels: number, kind: 'array' | 'object'): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = kind === 'array' ? [v] : { a: v };
  return v;
};

describe('exceedsDepthOf', () => {
  it('counts levels of arrays and objects, not scalars', () => {
    for (const kind of ['array', 'object'] as const) {
      expect(exceedsDepthOf(nested(3, kind), 3)).toBe(false);
      expect(exceedsDepthOf(nested(4, kind), 3)).toBe(true);
    }
    expect(exceedsDepthOf('text', 0)).toBe(false);
    expect(exceedsDepthOf(null, 0)).toBe(false);
    expect(exceedsDepthOf({}, 0)).toBe(true);
  });

  it('finds the deep branch among shallow siblings, in arrays and objects mixed', () => {
    const doc = { a: [1, { b: 2 }], c: { d: [[{ e: [3] }]] }, f: null };
    // levels: doc 1, c 2, d 3, [ ] 4, { e } 5, e's array 6
    expect(exceedsDepthOf(doc, 6)).toBe(false);
    expect(exceedsDepthOf(doc, 5)).toBe(true);
    expect(exceedsDepthOf([doc, doc], 7)).toBe(false);
    expect(exceedsDepthOf([doc, doc], 6)).toBe(true);
  });

  it('does not exhaust the stack on a hostile nesting', () => {
    expect(exceedsDepthOf(nested(200_000, 'array'), 64)).toBe(true);
    expect(exceedsDepthOf(nested(200_000, 'object'), 300_000)).toBe(false);
  });
});
