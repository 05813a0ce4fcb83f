/**
 * The served OpenAPI document read as a strict client reads it: a JSON Schema 2020-12 validator
 * (ajv) that enforces `oneOf` (exactly one branch) and knows nothing of discriminators. The
 * service's own 200 answers must validate against the response schemas it serves: for each of the
 * model's example documents (packages/model/test/fixtures/model-examples.json), for the document's
 * own examples, and for a person and a company actor (a typed actor once matched two branches of
 * `actor`). And every `oneOf` served is exclusive by construction (below), whatever the documents.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, json, MODEL_EXAMPLES as examples, startService, type TestService } from './helpers.js';

type Schema = Record<string, any>;
const SCHEMAS = '#/components/schemas/';

let svc: TestService;
let doc: { paths: Record<string, Record<string, any>>; components: { schemas: Record<string, Schema> } };
let ajv: Ajv2020;
beforeAll(async () => {
  svc = await startService();
  doc = (await svc.app.inject({ method: 'GET', url: '/api/v5/openapi.json' })).json();
  // Strict: unknown keywords and formats are errors (OpenAPI's own keywords declared); the
  // stylistic checks (a `required` beside no `type`) are off: they are no validation rules.
  ajv = new Ajv2020({ strict: true, strictTypes: false, strictRequired: false, strictTuples: false, allErrors: true });
  for (const [name, format] of Object.entries(fullFormats)) ajv.addFormat(name, format);
  ajv.addFormat('recurrence', true); // the model's own format (an iCalendar RRULE): any string here
  ajv.addVocabulary(['discriminator', 'example', 'xml', 'externalDocs']);
  ajv.addSchema(rebased({ $id: 'otm', $defs: doc.components.schemas }));
});
afterAll(async () => svc.close());

/** A schema of the document with its `$ref`s pointing into the `otm` schema (the components as $defs). */
const rebased = (schema: unknown): Schema => JSON.parse(JSON.stringify(schema).replaceAll(`"${SCHEMAS}`, '"otm#/$defs/')) as Schema;

/** The 200 answer's JSON schema of an operation, compiled (once). */
const compiled = new Map<string, ValidateFunction>();
function answerSchema(path: string, method: string): ValidateFunction {
  const known = compiled.get(`${method} ${path}`);
  if (known !== undefined) return known;
  const schema: unknown = doc.paths[path]?.[method]?.responses?.['200']?.content?.['application/json']?.schema;
  if (schema === undefined) throw new Error(`${method} ${path}: no JSON 200 answer`);
  const validate = ajv.compile(rebased(schema));
  compiled.set(`${method} ${path}`, validate);
  return validate;
}

/** Adds to `problems` what the validator says of `body`, if it is not valid. */
function check(problems: string[], label: string, validate: ValidateFunction, body: unknown): void {
  if (!validate(body)) problems.push(`${label}: ${ajv.errorsText(validate.errors)}`);
}

/**
 * PUTs a document for `tenant` (its writer token, helpers.ts) and GETs it back at once: each 200
 * answer checked against the served schema.
 */
async function answersOf(problems: string[], tenant: string, label: string, kind: string, document: unknown): Promise<void> {
  const token = auth(`writer-token-${tenant}`);
  const put = await svc.app.inject({
    method: 'PUT',
    url: `/api/v5/${kind}`,
    headers: { ...json, ...token },
    payload: JSON.stringify(document),
  });
  expect(put.statusCode, `${label}: ${put.body}`).toBe(200);
  check(problems, `PUT ${label}`, answerSchema(`/api/v5/${kind}`, 'put'), put.json());
  const got = await svc.app.inject({ method: 'GET', url: put.headers.location as string, headers: token });
  expect(got.statusCode).toBe(200);
  check(problems, `GET ${label}`, answerSchema(`/api/v5/${kind}/{UUID}`, 'get'), got.json());
}

describe('the served OpenAPI document, read by a strict validator', () => {
  it("validates the service's 200 answers to every model example against the response schemas served", async () => {
    const problems: string[] = [];
    const documents = examples.filter((e) => e.kind !== null && e.valid);
    expect(documents).toHaveLength(45);
    for (const e of documents) await answersOf(problems, 'acme', e.name, e.kind!, e.document);
    expect(problems).toEqual([]);
  });

  // Another tenant, so that the lists hold these documents alone.
  it("validates its 200 answers to the document's own examples, a person and a company actor, and the lists", async () => {
    const problems: string[] = [];
    const kinds: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      const example: unknown = ops.put?.requestBody?.content?.['application/json']?.example;
      if (example === undefined || !path.startsWith('/api/v5/')) continue;
      kinds.push(path.slice('/api/v5/'.length));
      await answersOf(problems, 'globex', `the example of PUT ${path}`, kinds.at(-1)!, example);
    }
    expect(kinds).toHaveLength(13);
    // A typed actor matched two branches of `actor` (actor-base and its own) before served-schemas.ts.
    const actor = examples.find((e) => e.name === 'actor-base')!.document;
    await answersOf(problems, 'globex', 'a person actor', 'actors', { ...actor, id: undefined, type: 'person', firstName: 'Ada' });
    await answersOf(problems, 'globex', 'a company actor', 'actors', { ...actor, id: undefined, type: 'company', vat: 'NL001234567B01' });
    for (const kind of kinds) {
      const list = await svc.app.inject({ method: 'GET', url: `/api/v5/${kind}?limit=100`, headers: auth('writer-token-globex') });
      expect(list.statusCode).toBe(200);
      expect(list.json().items.length).toBeGreaterThan(0);
      check(problems, `GET /api/v5/${kind}`, answerSchema(`/api/v5/${kind}`, 'get'), list.json());
    }
    expect(problems).toEqual([]);
  });

  it('accepts the valid fragments of the model examples under the schema they are examples of', () => {
    const problems: string[] = [];
    const fragments = examples.filter((e) => e.kind === null && e.valid);
    expect(fragments.map((e) => e.name)).toEqual(['externalIdentifier', 'uom', 'stop-entity', 'move-entity']);
    for (const e of fragments) check(problems, e.name, ajv.compile({ $ref: `otm#/$defs/${e.name}` }), e.document);
    expect(problems).toEqual([]);
  });

  it('serves every oneOf exclusive by its discriminator: each branch requires it with values of its own, or forbids it', () => {
    const unions: string[] = [];
    const overlapping: string[] = [];
    const walk = (node: unknown, at: string): void => {
      if (node === null || typeof node !== 'object') return;
      for (const [k, v] of Object.entries(node)) walk(v, `${at}/${k}`);
      const s = node as Schema;
      if (!Array.isArray(s.oneOf)) return;
      unions.push(at);
      const member: unknown = s.discriminator?.propertyName;
      if (typeof member !== 'string') return void overlapping.push(`${at}: no discriminator`);
      const parentRequires = Array.isArray(s.required) && s.required.includes(member);
      const taken = new Set<unknown>();
      let absentTaken = false;
      for (const [i, branch] of (s.oneOf as Schema[]).entries()) {
        const m = memberRule(branch, member);
        if (m.forbidden) {
          if (absentTaken || parentRequires) overlapping.push(`${at}/oneOf/${i}: a second branch without ${member}`);
          absentTaken = true;
        } else if (m.values === undefined || (!m.required && !parentRequires)) {
          overlapping.push(`${at}/oneOf/${i}: ${member} not required with values of its own`);
        } else {
          for (const v of m.values) {
            if (taken.has(v)) overlapping.push(`${at}/oneOf/${i}: ${member} ${JSON.stringify(v)} in two branches`);
            taken.add(v);
          }
        }
      }
    };
    walk(doc, '#');
    expect(unions.length).toBeGreaterThan(150);
    expect(overlapping).toEqual([]);
  });

  it("validates a vehicle's activity answers and their example against the schema served", async () => {
    const problems: string[] = [];
    const vehicle = 'a9000000-0000-4000-8000-000000000001';
    const validate = answerSchema('/api/v5/vehicles/{UUID}/activity', 'get');
    const example: unknown = doc.paths['/api/v5/vehicles/{UUID}/activity']!.get.responses['200'].content['application/json'].example;
    check(problems, 'the example', validate, example);
    const at = (min: number) => new Date(Date.parse('2026-06-02T06:00:00Z') + min * 60_000).toISOString();
    await svc.app.inject({
      method: 'PUT',
      url: '/api/v5/locations',
      headers: { ...json, ...auth() },
      payload: JSON.stringify({
        id: 'a9100000-0000-4000-8000-000000000001',
        geoReference: { type: 'latLonPointGeoReference', lat: 52.01, lon: 5 },
      }),
    });
    // Driving north without a reported speed (maxSpeed from the steps), ten minutes parked, then on.
    const positions = [0, 1, 2, ...Array.from({ length: 11 }, () => 2), 3, 4];
    for (const [i, p] of positions.entries()) {
      const put = await svc.app.inject({
        method: 'PUT',
        url: '/api/v5/events',
        headers: { ...json, ...auth() },
        payload: JSON.stringify({
          eventType: 'locationUpdateEvent',
          creationDate: at(i),
          vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: vehicle },
          geoReference: { type: 'latLonPointGeoReference', lat: 52 + p * 0.005, lon: 5 },
        }),
      });
      expect(put.statusCode).toBe(200);
    }
    for (const [from, to] of [
      [at(0), at(20)],
      [at(-60), at(-30)],
    ] as const) {
      const res = await svc.app.inject({
        method: 'GET',
        url: `/api/v5/vehicles/${vehicle}/activity?from=${from}&to=${to}`,
        headers: auth(),
      });
      expect(res.statusCode).toBe(200);
      check(problems, `activity ${from}`, validate, res.json());
    }
    const body = (
      await svc.app.inject({ method: 'GET', url: `/api/v5/vehicles/${vehicle}/activity?from=${at(0)}&to=${at(20)}`, headers: auth() })
    ).json();
    expect(body.stops).toHaveLength(1);
    expect(body.stops[0].location.uuid).toBe('a9100000-0000-4000-8000-000000000001');
    expect(problems).toEqual([]);
  });
});

/**
 * What a schema says of one member: the values it allows (undefined: any), whether it requires it,
 * whether it forbids it (`not: {required: [member]}`), through `$ref`, `allOf` and nested `oneOf`.
 */
function memberRule(schema: Schema, member: string, seen: ReadonlySet<string> = new Set()): MemberRule {
  if (typeof schema.$ref === 'string') {
    if (seen.has(schema.$ref)) return { required: false, forbidden: false };
    const target = doc.components.schemas[schema.$ref.slice(SCHEMAS.length)];
    if (target === undefined) throw new Error(`${schema.$ref} is not in the document`);
    return memberRule(target, member, new Set([...seen, schema.$ref]));
  }
  const prop = schema.properties?.[member] as Schema | undefined;
  const own: MemberRule = {
    values: prop?.const !== undefined ? [prop.const] : (prop?.enum as unknown[] | undefined),
    required: Array.isArray(schema.required) && schema.required.includes(member),
    forbidden: Array.isArray(schema.not?.required) && schema.not.required.includes(member),
  };
  const parts = ((schema.allOf ?? []) as Schema[]).map((p) => memberRule(p, member, seen));
  if (Array.isArray(schema.oneOf)) {
    const branches = (schema.oneOf as Schema[]).map((b) => memberRule(b, member, seen));
    parts.push({
      values: branches.every((b) => b.values !== undefined) ? [...new Set(branches.flatMap((b) => b.values!))] : undefined,
      required: branches.every((b) => b.required),
      forbidden: branches.every((b) => b.forbidden),
    });
  }
  return parts.reduce<MemberRule>(
    (a, b) => ({
      values: a.values === undefined ? b.values : b.values === undefined ? a.values : a.values.filter((v) => b.values!.includes(v)),
      required: a.required || b.required,
      forbidden: a.forbidden || b.forbidden,
    }),
    own,
  );
}
interface MemberRule {
  values?: unknown[];
  required: boolean;
  forbidden: boolean;
}
