import { describe, expect, it } from 'vitest';
import { exceedsDepthOf, membersWithin } from '../src/index.js';

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

describe('membersWithin', () => {
  it('counts the members of all objects at any depth, or -1 past the limit', () => {
    const doc = { a: [1, { b: 2, c: { d: null } }], e: {}, f: 'x' };
    // levels: doc 1, a 2, { b, c } 3, c 4
    expect(membersWithin(doc, 10)).toBe(6);
    expect(membersWithin(doc, 4)).toBe(6);
    expect(membersWithin(doc, 3)).toBe(-1);
    expect(membersWithin([{ a: 1 }, { a: 1, b: 2 }], Infinity)).toBe(3);
    expect(membersWithin('text', 0)).toBe(0);
    // A repeated name counts once: JSON.parse keeps one member.
    expect(membersWithin(JSON.parse('{"a":1,"a":2}'), Infinity)).toBe(1);
  });
});
