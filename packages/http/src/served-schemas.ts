/**
 * The model's schemas as the OpenAPI document serves them (components.schemas), where a plain
 * JSON Schema reading of the model differs from what the service does with it (its validator,
 * packages/model/src/transform.ts, reads them its own way):
 *
 * - A `oneOf` is exclusive: a document matches exactly one branch. The model's unions pick their
 *   branch by a discriminator member (`type`, `eventType`, `associationType`, ...), and each branch
 *   named in the discriminator's mapping requires that member with its value, so those branches
 *   exclude one another. A branch the mapping does not name is the service's default, taken when
 *   the member is absent (the plain actor, `actor-base`, beside `actor-person` and `actor-company`);
 *   as served it accepted the typed ones too (actor-person is actor-base with more members), so a
 *   company actor matched two branches and a validator that enforces `oneOf` rejected the
 *   service's own answers. Such a branch is served as a schema of its own, `<branch>-without-<member>`:
 *   the branch, without the discriminator member. `anyOf` would have hidden the overlap rather than
 *   say what the service does; this is exactly its rule (a present member must be one of the
 *   mapping's values).
 * - `unrestricted_json` (the values of `externalAttributes`) is any JSON value, as the service has
 *   always accepted (the model's own examples put strings there); the model says an object.
 *
 * What the service accepts does not change: it validates with the model's schemas, not these.
 */
import { MODEL, type ModelSchema } from '@otm/model';

const PREFIX = '#/components/schemas/';

/** The schema that stands for branch `ref` of a union on `member` when the branch is its default. */
function withoutMemberName(ref: string, member: string): string {
  return `${ref.slice(PREFIX.length)}-without-${member}`;
}

/**
 * A copy of `schemas` in which every default branch of a discriminated `oneOf` is replaced by a
 * reference to a schema added for it (the branch, without the discriminator member). The input
 * is not changed; what needs no change is shared.
 */
export function exclusiveUnions(schemas: Readonly<Record<string, ModelSchema>>): Record<string, ModelSchema> {
  const added: Record<string, ModelSchema> = {};
  const visit = (node: unknown): unknown => {
    if (Array.isArray(node)) {
      const out = node.map(visit);
      return out.every((x, i) => x === node[i]) ? node : out;
    }
    if (node === null || typeof node !== 'object') return node;
    let copy: Record<string, unknown> | undefined;
    for (const [k, v] of Object.entries(node)) {
      const next = visit(v);
      if (next !== v) (copy ??= { ...node })[k] = next;
    }
    const s = (copy ?? node) as ModelSchema;
    if (s.oneOf === undefined || s.discriminator === undefined) return s;
    const member = s.discriminator.propertyName;
    const mapped = new Set(Object.values(s.discriminator.mapping ?? {}));
    let changed = false;
    const oneOf = s.oneOf.map((branch) => {
      if (branch.$ref === undefined || mapped.has(branch.$ref) || Object.keys(branch).length > 1) return branch;
      const name = withoutMemberName(branch.$ref, member);
      added[name] ??= { allOf: [{ $ref: branch.$ref }], not: { required: [member] } };
      changed = true;
      return { $ref: `${PREFIX}${name}` };
    });
    return changed ? { ...s, oneOf } : s;
  };
  const out: Record<string, ModelSchema> = {};
  for (const [name, schema] of Object.entries(schemas)) out[name] = visit(schema) as ModelSchema;
  for (const [name, schema] of Object.entries(added)) {
    if (Object.hasOwn(out, name)) throw new Error(`served schemas: ${name} is already a schema of the model`);
    out[name] = schema;
  }
  return out;
}

/** The schemas of the served OpenAPI document's components, from the model's (see above). */
export function servedModelSchemas(): Record<string, ModelSchema> {
  return {
    ...exclusiveUnions(MODEL.schemas),
    unrestricted_json: { description: 'Any JSON value.' },
  };
}
