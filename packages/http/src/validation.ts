/**
 * The path and query parameters of every route, checked against the route's schema before its
 * handler runs, and a refusal answered in the model's error format: one `invalidField` item naming
 * the parameter (a missing one: `missingField`), or 404 for a path segment that names no resource.
 * Bodies are not checked here: a document is checked by the model's validator (ingress), the
 * other bodies by their routes; their schemas are there for the OpenAPI document only. Nor is an
 * answer serialized from its schema: routes send their answers as text or bytes.
 */
import { Ajv, type ErrorObject } from 'ajv';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import type { FastifySchemaCompiler } from 'fastify';
import type { OtmError } from '@otm/model';
import { invalidDocument, notFound, type OtmServiceError } from '@otm/core';
import { clip } from './params.js';

/**
 * Query values are strings (or arrays of them when a parameter comes more than once): coerced to
 * the schema's type (`limit=5` to 5, `atomic=true` to true); an array of more than one value fails
 * a scalar type. Unknown parameters fail (`additionalProperties: false`) rather than being dropped,
 * and no default is filled in: a route's `next` link repeats the query it was given.
 */
const ajv = new Ajv({
  coerceTypes: 'array',
  useDefaults: false,
  removeAdditional: false,
  allErrors: false,
  verbose: true,
  strictSchema: true,
  formats: { 'date-time': fullFormats['date-time'], uuid: fullFormats.uuid },
});
// What a refusal says, where the keyword's own words would not do (read by `schemaItems`).
ajv.addKeyword({ keyword: 'x-message', schemaType: 'string' });
// Annotations the OpenAPI document carries.
ajv.addKeyword({ keyword: 'example' });

/** The check of a body: none (see above). */
const PASS = (): boolean => true;

/** Compiles the params and querystring schemas (and headers'); bodies pass (see above). */
export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) =>
  httpPart === 'body' ? PASS : ajv.compile(schema as object);

/** Answers are not serialized from their schemas (routes send text or bytes; JSON.stringify for the rest). */
export const serializerCompiler = () => (data: unknown) => JSON.stringify(data);

/** A parameter's name from the error's path (`/limit`), or from what it is about. */
function nameOf(e: ErrorObject): string {
  if (e.keyword === 'additionalProperties') return String((e.params as { additionalProperty: string }).additionalProperty);
  if (e.keyword === 'required') return String((e.params as { missingProperty: string }).missingProperty);
  return e.instancePath.slice(1).split('/')[0] ?? '';
}

/** What the value given was, for the message (cut short). */
const given = (data: unknown): string => (typeof data === 'string' ? `; got '${clip(data)}'` : '');

/** The error item of one schema error of a query or path parameter. */
function itemOf(e: ErrorObject, allowed: readonly string[]): OtmError {
  const field = clip(nameOf(e));
  switch (e.keyword) {
    case 'additionalProperties':
      return { type: 'invalidField', field, message: `unknown query parameter${allowed.length ? `; allowed: ${allowed.join(', ')}` : ''}` };
    case 'required': {
      const properties = (e.parentSchema as { properties?: Record<string, { description?: string }> } | undefined)?.properties;
      return { type: 'missingField', field, message: properties?.[field]?.description ?? 'is required' };
    }
    default:
      break;
  }
  if (Array.isArray(e.data)) return { type: 'invalidField', field, message: 'must be given once' };
  const own = (e.parentSchema as { 'x-message'?: string } | undefined)?.['x-message'];
  if (own !== undefined) return { type: 'invalidField', field, message: `${own}${given(e.data)}` };
  if (e.keyword === 'enum') {
    const values = (e.params as { allowedValues: unknown[] }).allowedValues.join(', ');
    return { type: 'invalidField', field, message: `must be one of ${values}${given(e.data)}` };
  }
  return { type: 'invalidField', field, message: `${e.message ?? 'is not valid'}${given(e.data)}` };
}

/**
 * The refusal of a request whose path or query parameters do not follow its route's schema: a
 * path segment outside its `enum` (an unknown kind) is a 404 like any unknown path; anything else
 * a 400 with the item of the first problem.
 */
export function schemaRefusal(
  errors: readonly ErrorObject[],
  context: string,
  schema: { properties?: Record<string, unknown> } | undefined,
  method: string,
  url: string,
): OtmServiceError {
  const first = errors[0];
  if (first === undefined) return invalidDocument([{ type: 'invalidJson', message: `the ${context} is not valid` }]);
  if (context === 'params' && first.keyword === 'enum') return notFound(`no resource at ${method} ${clip(url.split('?')[0]!)}`);
  const names = Object.keys(schema?.properties ?? {});
  const item = itemOf(first, names);
  // Header names come lower-cased: the parameter as the schema spells it (Last-Event-ID).
  if (item.type !== 'invalidJson') item.field = names.find((n) => n.toLowerCase() === item.field) ?? item.field;
  return invalidDocument([item]);
}
