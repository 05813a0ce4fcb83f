/**
 * Property-based fuzzing of the model's validation (@otm/model) with fast-check: arbitrary JSON
 * values and mutated valid documents (the model's examples, the own fixtures) as documents and
 * merge patches of every kind. Invariants: validation never throws and answers a bounded array of
 * well-formed items; a valid document holds only finite numbers and stays valid after a JSON round
 * trip; a latitude or longitude out of range anywhere is refused at its path. Bounded runs (a few
 * seconds); on a failure fast-check prints the seed and the path to replay it.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KINDS, MAX_ANSWER_CHARS, MAX_ERRORS, validateEntity, validatePatch, type KindSegment, type OtmError } from '@otm/model';
import { MAX_FIELD, formatPath, type PathSegment } from '../../packages/model/src/paths.js';
import { oneOfEachKind } from '../fixtures/documents.js';

type Json = unknown;
interface Example {
  name: string;
  kind: KindSegment | null;
  valid: boolean;
  document: Json;
}

const fixtures = new URL('../../packages/model/test/fixtures/', import.meta.url);
const examples = JSON.parse(readFileSync(new URL('model-examples.json', fixtures), 'utf8')) as Example[];
const typicalTrip = JSON.parse(readFileSync(new URL('typical-trip.json', fixtures), 'utf8')) as Json;

/** Valid documents of every kind: the model's valid examples and the own fixtures. */
const VALID: ReadonlyArray<{ kind: KindSegment; doc: Json }> = [
  ...examples.filter((e) => e.kind !== null && e.valid).map((e) => ({ kind: e.kind as KindSegment, doc: e.document })),
  { kind: 'trips', doc: typicalTrip },
  ...Object.entries(oneOfEachKind).map(([kind, doc]) => ({ kind: kind as KindSegment, doc })),
];
const SEGMENTS = KINDS.map((k) => k.segment);
const RUNS = { numRuns: 300 };
const TYPES = new Set(['invalidJson', 'invalidField', 'missingField']);

const clone = (v: Json): Json => structuredClone(v);
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Every value inside `v` with its path (the root excluded), parents before children. */
function paths(v: Json, at: PathSegment[] = [], out: Array<{ path: PathSegment[]; value: Json }> = []) {
  if (Array.isArray(v))
    v.forEach((x, i) => {
      out.push({ path: [...at, i], value: x });
      paths(x, [...at, i], out);
    });
  else if (isObject(v))
    for (const [k, x] of Object.entries(v)) {
      out.push({ path: [...at, k], value: x });
      paths(x, [...at, k], out);
    }
  return out;
}

function parentOf(doc: Json, path: readonly PathSegment[]): Record<string | number, unknown> {
  let cur = doc as Record<string | number, unknown>;
  for (const s of path.slice(0, -1)) cur = cur[s] as Record<string | number, unknown>;
  return cur;
}

/** Whether every number in `v` is finite. */
function finite(v: Json): boolean {
  if (typeof v === 'number') return Number.isFinite(v);
  if (Array.isArray(v)) return v.every(finite);
  if (isObject(v)) return Object.values(v).every(finite);
  return true;
}

/** The invariants of every answer. */
function checkAnswer(doc: Json, errs: OtmError[]): void {
  expect(Array.isArray(errs)).toBe(true);
  expect(errs.length).toBeLessThanOrEqual(MAX_ERRORS);
  for (const e of errs) {
    expect(TYPES.has(e.type)).toBe(true);
    expect(typeof e.message).toBe('string');
    expect(e.message.length).toBeLessThanOrEqual(1_000);
    if (e.type === 'invalidJson') expect(Object.keys(e).sort()).toEqual(['message', 'type']);
    else {
      expect(Object.keys(e).sort()).toEqual(['field', 'message', 'type']);
      expect(typeof e.field).toBe('string');
      expect(e.field.length).toBeLessThanOrEqual(MAX_FIELD);
    }
  }
  const docSize = JSON.stringify(doc)?.length ?? 0;
  expect(JSON.stringify(errs).length).toBeLessThanOrEqual(docSize + MAX_ANSWER_CHARS);
  if (errs.length === 0) {
    expect(finite(doc)).toBe(true);
  }
}

/** A valid document stays valid after a JSON round trip. */
function checkRoundTrip(kind: KindSegment, doc: Json, errs: OtmError[]): void {
  if (errs.length === 0) expect(validateEntity(kind, JSON.parse(JSON.stringify(doc)) as Json)).toEqual([]);
}

// ------------------------------------------------------------------------------------------------
// Arbitraries
// ------------------------------------------------------------------------------------------------

const kind = fc.constantFrom(...SEGMENTS);
const json = fc.jsonValue({ maxDepth: 4 });
/** A value a hostile sender might put anywhere. */
const hostileValue = fc.oneof(
  json,
  fc.constantFrom(Infinity, -Infinity, NaN, 1e308, -1e308, Number.MAX_VALUE, Number.MIN_VALUE, -0, 90.0001, -180.0001, '', null),
  fc.double(),
  fc.string({ maxLength: 200 }),
  fc.nat({ max: 20_000 }).map((n) => 'x'.repeat(n)),
);
/** A member name: ordinary, odd, prototype-ish or very long. */
const memberName = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.constantFrom('__proto__', 'constructor', 'prototype', 'licencePlate', 'lat', 'lon', 'odd.name', 'a/b~c', ''),
  fc.nat({ max: 5_000 }).map((n) => 'n'.repeat(n + 65)),
);

type Mutation =
  | { op: 'set'; at: number; value: Json }
  | { op: 'delete'; at: number }
  | { op: 'add'; at: number; name: string; value: Json }
  | { op: 'rename'; at: number; name: string };
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant('set' as const), at: fc.nat(), value: hostileValue }),
  fc.record({ op: fc.constant('delete' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('add' as const), at: fc.nat(), name: memberName, value: hostileValue }),
  fc.record({ op: fc.constant('rename' as const), at: fc.nat(), name: memberName }),
);

/** `doc` (a copy) with the mutations applied; each picks its place among the paths of the document as it is then. */
function mutate(doc: Json, ms: readonly Mutation[]): Json {
  const out = clone(doc);
  for (const m of ms) {
    const all = paths(out);
    if (m.op === 'add') {
      const objects = [{ path: [] as PathSegment[], value: out }, ...all].filter((p) => isObject(p.value));
      const target = objects[m.at % objects.length]?.value as Record<string, unknown>;
      Object.defineProperty(target, m.name, { value: m.value, enumerable: true, writable: true, configurable: true });
      continue;
    }
    if (all.length === 0) continue;
    const { path } = all[m.at % all.length] as { path: PathSegment[] };
    const parent = parentOf(out, path);
    const last = path[path.length - 1] as string | number;
    if (m.op === 'set') parent[last] = m.value;
    else if (m.op === 'delete') {
      if (Array.isArray(parent)) parent.splice(last as number, 1);
      else delete parent[last];
    } else if (!Array.isArray(parent)) {
      const value = parent[last];
      delete parent[last];
      Object.defineProperty(parent, m.name, { value, enumerable: true, writable: true, configurable: true });
    }
  }
  return out;
}

const validDoc = fc.constantFrom(...VALID);

// ------------------------------------------------------------------------------------------------
// Properties
// ------------------------------------------------------------------------------------------------

describe('fuzzing documents against the model', () => {
  it('the fixtures are valid (the fuzzing starts from valid documents)', () => {
    for (const { kind: k, doc } of VALID) expect(validateEntity(k, doc)).toEqual([]);
  });

  it('arbitrary JSON values as documents and merge patches: well-formed, bounded answers, never a throw', () => {
    fc.assert(
      fc.property(kind, json, (k, doc) => {
        const errs = validateEntity(k, doc);
        checkAnswer(doc, errs);
        checkRoundTrip(k, doc, errs);
        checkAnswer(doc, validatePatch(k, doc));
      }),
      RUNS,
    );
  });

  it('arbitrary members inside a document of the right kind', () => {
    fc.assert(
      fc.property(validDoc, fc.dictionary(memberName, hostileValue, { maxKeys: 30 }), ({ kind: k, doc }, extra) => {
        const d = { ...(doc as Record<string, unknown>) };
        for (const [name, v] of Object.entries(extra))
          Object.defineProperty(d, name, { value: v, enumerable: true, writable: true, configurable: true });
        const errs = validateEntity(k, d);
        checkAnswer(d, errs);
        checkRoundTrip(k, d, errs);
      }),
      RUNS,
    );
  });

  it('mutated valid documents: well-formed, bounded answers; what validates is finite and survives a round trip', () => {
    fc.assert(
      fc.property(validDoc, fc.array(mutation, { minLength: 1, maxLength: 4 }), ({ kind: k, doc }, ms) => {
        const d = mutate(doc, ms);
        const errs = validateEntity(k, d);
        checkAnswer(d, errs);
        checkRoundTrip(k, d, errs);
        // the same mutated document as a merge patch, and as the entity of an updateEvent
        const patch = validatePatch(k, d);
        checkAnswer(d, patch);
        if (isObject(d) && typeof d.entityType === 'string') {
          const event = {
            eventType: 'updateEvent',
            entity: { ...d, id: typeof d.id === 'string' ? d.id : '50824123-0924-4563-ac1e-ca0e37487823' },
          };
          const errs2 = validateEntity('events', event);
          checkAnswer(event, errs2);
          checkRoundTrip('events', event, errs2);
        }
      }),
      RUNS,
    );
  });

  it('a non-finite number anywhere in a valid document is refused', () => {
    fc.assert(
      fc.property(validDoc, fc.nat(), fc.constantFrom(Infinity, -Infinity, NaN), ({ kind: k, doc }, at, bad) => {
        const d = clone(doc);
        const numbers = paths(d).filter((p) => typeof p.value === 'number');
        fc.pre(numbers.length > 0);
        const { path } = numbers[at % numbers.length] as { path: PathSegment[] };
        parentOf(d, path)[path[path.length - 1] as string | number] = bad;
        const errs = validateEntity(k, d);
        checkAnswer(d, errs);
        expect(errs).toContainEqual({
          type: 'invalidField',
          field: formatPath(path),
          message: expect.stringMatching(/^must be a finite (number|integer)/),
        });
      }),
      RUNS,
    );
  });
});

describe('fuzzing latitudes and longitudes', () => {
  /** Every latitude and longitude of the valid documents: lat/lon members and the first two numbers of GeoJSON positions. */
  const places = VALID.flatMap(({ kind: k, doc }, i) =>
    paths(doc).flatMap(({ path }) => {
      const last = path[path.length - 1];
      if (last === 'lat') return [{ i, kind: k, path, range: 90 }];
      if (last === 'lon') return [{ i, kind: k, path, range: 180 }];
      // [..., 'coordinates', ..., position, 0 | 1]: the innermost arrays of numbers of `coordinates`
      if (typeof last === 'number' && last < 2 && path.includes('coordinates')) {
        const position = parentOf(doc, path) as unknown as unknown[];
        if (position.every((x) => typeof x === 'number')) return [{ i, kind: k, path, range: last === 0 ? 180 : 90 }];
      }
      return [];
    }),
  );

  it('the valid documents hold latitudes and longitudes of both forms', () => {
    expect(places.some((p) => p.path.includes('coordinates'))).toBe(true);
    expect(places.some((p) => p.path[p.path.length - 1] === 'lat')).toBe(true);
  });

  const outOfRange = (range: number) =>
    fc.oneof(
      fc.double({ min: range, max: Number.MAX_VALUE, minExcluded: true, noNaN: true }),
      fc.double({ min: -Number.MAX_VALUE, max: -range, maxExcluded: true, noNaN: true }),
      fc.constantFrom(range + 1e-9, -range - 1e-9, Infinity, -Infinity),
    );

  it('a value out of range at a random latitude or longitude is refused at that path', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...places).chain((p) => fc.tuple(fc.constant(p), outOfRange(p.range))),
        ([p, value]) => {
          const d = clone((VALID[p.i] as { doc: Json }).doc);
          parentOf(d, p.path)[p.path[p.path.length - 1] as string | number] = value;
          const errs = validateEntity(p.kind, d);
          checkAnswer(d, errs);
          expect(errs.map((e) => ('field' in e ? e.field : ''))).toContain(formatPath(p.path));
          // and in range it is valid again
          parentOf(d, p.path)[p.path[p.path.length - 1] as string | number] = p.range;
          expect(validateEntity(p.kind, d)).toEqual([]);
        },
      ),
      RUNS,
    );
  });

  it('the same in the entity of an updateEvent (a merge patch)', () => {
    const located = places.filter(
      (p) => isObject(VALID[p.i]?.doc) && typeof (VALID[p.i]?.doc as Record<string, unknown>).entityType === 'string',
    );
    fc.assert(
      fc.property(
        fc.constantFrom(...located).chain((p) => fc.tuple(fc.constant(p), outOfRange(p.range))),
        ([p, value]) => {
          const entity = clone((VALID[p.i] as { doc: Json }).doc) as Record<string, unknown>;
          entity.id ??= '50824123-0924-4563-ac1e-ca0e37487823';
          parentOf(entity, p.path)[p.path[p.path.length - 1] as string | number] = value;
          const errs = validateEntity('events', { eventType: 'updateEvent', entity });
          expect(errs.map((e) => ('field' in e ? e.field : ''))).toContain(formatPath(['entity', ...p.path]));
        },
      ),
      { numRuns: 100 },
    );
  });
});
