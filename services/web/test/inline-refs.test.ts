import { describe, expect, it } from 'vitest';
import { inlineRefs, pointerGet, resolveBounded } from '../src/docs/inline-refs.js';

// A small recursive web, as the model's schemas are: a vehicle's events name vehicles.
const spec = {
  components: {
    schemas: {
      vehicle: {
        type: 'object',
        properties: { name: { type: 'string' }, events: { type: 'array', items: { $ref: '#/components/schemas/event' } } },
      },
      event: {
        type: 'object',
        properties: { vehicle: { $ref: '#/components/schemas/vehicle' }, at: { $ref: '#/components/schemas/time' } },
      },
      time: { type: 'string', format: 'date-time', example: { $ref: '#/components/schemas/not-a-schema' } },
      'a/b~c': { const: 1 },
    },
  },
};
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
/** A schema as inlined: what these tests read of it. */
interface Inlined {
  $ref?: string;
  $$ref?: string;
  properties?: Record<string, Inlined>;
  items?: Inlined;
}
const inlined = (v: unknown): Inlined => v as Inlined;

describe('pointerGet', () => {
  it('follows a local JSON pointer, with its escapes', () => {
    expect(pointerGet(spec, '#/components/schemas/time')).toBe(spec.components.schemas.time);
    expect(pointerGet(spec, '#/components/schemas/a~1b~0c')).toEqual({ const: 1 });
    expect(pointerGet(spec, '#/components/schemas/nothing')).toBeUndefined();
    expect(pointerGet(spec, '#/components/schemas/time/type/length')).toBeUndefined();
  });
});

describe('inlineRefs', () => {
  it('inlines a schema and marks it with its name, keeping the members beside the $ref', () => {
    const { spec: out, inlined, errors } = inlineRefs(spec, { ...ref('time'), description: 'when' });
    expect(out).toEqual({ ...spec.components.schemas.time, description: 'when', $$ref: '#/components/schemas/time' });
    expect(inlined).toBe(1);
    expect(errors).toEqual([]);
  });

  it('never repeats a schema of its own path: a cycle stops at the $ref that would close it', () => {
    const { spec: out } = inlineRefs(spec, ref('vehicle'));
    const event = inlined(out).properties?.events?.items;
    expect(event?.$$ref).toBe('#/components/schemas/event');
    expect(event?.properties?.vehicle).toEqual(ref('vehicle'));
    expect(event?.properties?.at?.$$ref).toBe('#/components/schemas/time');
  });

  it('stops after maxRefs levels of $refs, and below `near` levels of objects', () => {
    const one = inlineRefs(spec, ref('vehicle'), { maxRefs: 1 });
    expect(inlined(one.spec).properties?.events?.items).toEqual(ref('event'));
    expect(one.inlined).toBe(1);
    const near = inlineRefs(spec, { a: { b: ref('time') } }, { near: 1 });
    expect(near.spec).toEqual({ a: { b: ref('time') } });
    expect(near.inlined).toBe(0);
  });

  it('leaves data as it is (an example holding a $ref) and shares what did not change', () => {
    const node = { properties: { t: spec.components.schemas.time, plain: { type: 'string' } } };
    const { spec: out } = inlineRefs(spec, node);
    expect(out).toBe(node);
    const withRef = { properties: { t: ref('time'), plain: { type: 'string' } } };
    const copied = inlineRefs(spec, withRef).spec as typeof withRef;
    expect(copied).not.toBe(withRef);
    expect(copied.properties.plain).toBe(withRef.properties.plain);
  });

  it('reports a $ref that names nothing, at its path, as Swagger UI does', () => {
    const { spec: out, errors } = inlineRefs(spec, { items: [ref('nothing')] }, { basePath: ['paths', '/x'] });
    expect(out).toEqual({ items: [ref('nothing')] });
    expect(errors).toEqual([
      { message: 'Could not resolve reference: #/components/schemas/nothing', fullPath: ['paths', '/x', 'items', 0, '$ref'] },
    ]);
  });

  it('tells of each schema inlined and each object copied', () => {
    const seen: unknown[] = [];
    const copies: [unknown, unknown][] = [];
    const node = { a: ref('time') };
    const { spec: out } = inlineRefs(spec, node, { onInline: (s) => seen.push(s), onCopy: (from, to) => copies.push([from, to]) });
    expect(seen).toEqual([(out as typeof node).a]);
    // The $ref's own members (none but the $ref) are copied first, then the node holding it.
    expect(copies.map(([from]) => from)).toEqual([node.a, node]);
    expect(copies[1]![1]).toBe(out);
  });
});

describe('resolveBounded', () => {
  // A chain without cycles: s1 -> s2 -> ... -> s6.
  const chain = {
    components: {
      schemas: Object.fromEntries(
        [1, 2, 3, 4, 5, 6].map((i) => [`s${i}`, i < 6 ? { type: 'object', properties: { next: ref(`s${i + 1}`) } } : { type: 'string' }]),
      ),
    },
  };
  /** The names inlined along the chain from s1's `next`, in order. */
  const inlinedNames = (out: unknown): string[] => {
    const names: string[] = [];
    for (let n: Inlined | undefined = inlined(out); n?.$$ref !== undefined; n = n.properties?.next) names.push(n.$$ref.split('/').pop()!);
    return names;
  };

  it('inlines two levels, then deeper while at most the bound of schemas are', () => {
    const path = ['components', 'schemas', 's1', 'properties', 'next'];
    expect(inlinedNames(resolveBounded(chain, path, 3).spec)).toEqual(['s2', 's3', 's4']);
    expect(inlinedNames(resolveBounded(chain, path, 40).spec)).toEqual(['s2', 's3', 's4', 's5', 's6']);
    // Two levels always, whatever the bound.
    expect(inlinedNames(resolveBounded(chain, path, 0).spec)).toEqual(['s2', 's3']);
    expect(resolveBounded(chain, ['nowhere']).spec).toBeUndefined();
  });
});
