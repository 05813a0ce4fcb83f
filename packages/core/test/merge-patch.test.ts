import { describe, expect, it } from 'vitest';
import { mergePatch } from '../src/index.js';

describe('mergePatch (RFC 7396)', () => {
  // The examples of RFC 7396, appendix A.
  it.each([
    [{ a: 'b' }, { a: 'c' }, { a: 'c' }],
    [{ a: 'b' }, { b: 'c' }, { a: 'b', b: 'c' }],
    [{ a: 'b' }, { a: null }, {}],
    [{ a: 'b', b: 'c' }, { a: null }, { b: 'c' }],
    [{ a: ['b'] }, { a: 'c' }, { a: 'c' }],
    [{ a: 'c' }, { a: ['b'] }, { a: ['b'] }],
    [{ a: { b: 'c' } }, { a: { b: 'd', c: null } }, { a: { b: 'd' } }],
    [{ a: [{ b: 'c' }] }, { a: [1] }, { a: [1] }],
    [
      ['a', 'b'],
      ['c', 'd'],
      ['c', 'd'],
    ],
    [{ a: 'b' }, ['c'], ['c']],
    [{ a: 'foo' }, null, null],
    [{ a: 'foo' }, 'bar', 'bar'],
    [{ e: null }, { a: 1 }, { e: null, a: 1 }],
    [[1, 2], { a: 'b', c: null }, { a: 'b' }],
    [{}, { a: { bb: { ccc: null } } }, { a: { bb: {} } }],
  ])('%j + %j = %j', (target, patch, result) => {
    expect(mergePatch(target, patch)).toEqual(result);
  });

  it('changes neither input', () => {
    const target = { a: { b: 1 } };
    const patch = { a: { c: 2 } };
    mergePatch(target, patch);
    expect(target).toEqual({ a: { b: 1 } });
    expect(patch).toEqual({ a: { c: 2 } });
  });

  it('treats __proto__ as data and pollutes nothing', () => {
    const patch = JSON.parse('{"externalAttributes":{"__proto__":{"polluted":true},"after":1}}');
    const out = mergePatch({ externalAttributes: { x: 1 } }, patch) as { externalAttributes: Record<string, unknown> };
    expect(Object.getPrototypeOf(out.externalAttributes)).toBe(Object.prototype);
    expect(Object.keys(out.externalAttributes)).toEqual(['x', '__proto__', 'after']);
    expect(JSON.stringify(out)).toBe('{"externalAttributes":{"x":1,"__proto__":{"polluted":true},"after":1}}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});
