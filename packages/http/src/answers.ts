/**
 * The pieces of route schemas that many routes share: how an answer is declared (its status, media
 * types, schema, headers), the error answers the HTTP edge gives on every authenticated route, and
 * the path and query parameters several routes take. A route declares its schema with these;
 * @fastify/swagger makes the OpenAPI document of them (openapi.ts), and fastify checks the path and
 * query parameters against them (validation.ts).
 */
import { KINDS } from '@otm/model';

/** A route's answer for one status, as @fastify/swagger reads it: description, content by media type, headers. */
export interface Answer {
  readonly description: string;
  readonly content?: Record<string, { readonly schema: unknown; readonly example?: unknown }>;
  readonly headers?: Record<string, unknown>;
  /** An answer without a body. */
  readonly type?: 'null';
}

export const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** An answer of `schema` as JSON, with an example when given. */
export const jsonAnswer = (description: string, schema: unknown, example?: unknown): Answer => ({
  description,
  content: { 'application/json': example === undefined ? { schema } : { schema, example } },
});

/** An error answer: the error array (a 4xx other than 400, a 5xx). */
export const errorAnswer = (description: string): Answer => jsonAnswer(description, ref('errorItems'));

/** A 400: the model's own error items (clientError). */
export const badRequest = (description: string): Answer => jsonAnswer(description, ref('clientError'));

/** An answer without a body (204). */
export const emptyAnswer = (description: string): Answer => ({ description, type: 'null' });

const intHeader = (description: string) => ({ description, type: 'integer', minimum: 0 });

/** The RateLimit-* headers (IETF draft) every answer of an authenticated route carries while a quota is set. */
const RATE_LIMIT_HEADERS = {
  'RateLimit-Limit': intHeader('The quota reported (the one with the least left): requests, or bulk documents, a window'),
  'RateLimit-Remaining': intHeader('What that quota has left'),
  'RateLimit-Reset': intHeader('Seconds until that quota is whole again'),
  'RateLimit-Policy': { description: 'The quota as `<count>;w=<window seconds>`', type: 'string' },
};

/** A 429 (the quotas, OTM_RATE_LIMIT and OTM_TENANT_RATE_LIMIT; the streams a token has), with Retry-After and RateLimit-*. */
export const tooManyRequests = (description: string): Answer => ({
  ...errorAnswer(description),
  headers: { 'Retry-After': intHeader('Seconds to wait before trying again'), ...RATE_LIMIT_HEADERS },
});

export const QUOTA_429 =
  "More requests (a bulk document counting one) than the credential's quota (OTM_RATE_LIMIT) or the tenant's (OTM_TENANT_RATE_LIMIT) allow: `tooManyRequests`, with Retry-After and RateLimit-*";

/** Why any authenticated operation may answer 503 before it starts: its credential cannot be checked for now. */
export const CREDENTIAL_UNCHECKED =
  'the credential cannot be checked for now: the JWKS (OTM_JWT_JWKS) or the API key store does not answer';

/**
 * The answers every authenticated route may give besides its own (authentication.ts adds those it
 * does not declare itself): the credential, the scope, the connection limits, the quotas, a fault.
 */
export const AUTHENTICATED_ANSWERS: Readonly<Record<string, Answer>> = {
  '401': errorAnswer(
    'No credential, or one that is not valid: an unknown token or API key, a revoked or expired API key, a JWT whose signature, issuer, audience or times do not check (with WWW-Authenticate: Bearer)',
  ),
  '403': errorAnswer('The credential lacks the scope: write or write:<kind> for PUT, DELETE and POST; read or read:<kind> for GET'),
  '408': errorAnswer(
    'The headers (OTM_HEADERS_TIMEOUT_MS) or the whole request (OTM_REQUEST_TIMEOUT_MS) did not arrive in time; the connection is closed',
  ),
  '414': errorAnswer('A path segment longer than 200 characters'),
  '429': tooManyRequests(QUOTA_429),
  '431': errorAnswer('Request line and headers larger than the limit'),
  '500': errorAnswer(
    "A fault of the service: the error array (type internal) like every other error answer, not the model's bare serverError string",
  ),
  '503': errorAnswer(`${CREDENTIAL_UNCHECKED.charAt(0).toUpperCase()}${CREDENTIAL_UNCHECKED.slice(1)} (with Retry-After)`),
};

/** The answers of a route that reads a body (framing.ts adds those it does not declare). */
export const BODY_ANSWERS: Readonly<Record<string, Answer>> = {
  '413': errorAnswer('A body larger than OTM_BODY_LIMIT'),
  '415': errorAnswer(
    'A body that is not application/json in UTF-8 (a charset parameter may say utf-8), or sent with a Content-Encoding or a Transfer-Encoding other than chunked',
  ),
};

/** A page of `item`s and the path of the next page. */
export const pageOf = (item: unknown) => ({
  type: 'object',
  required: ['items', 'next'],
  properties: { items: { type: 'array', items: item }, next: { type: ['string', 'null'], description: 'path and query of the next page' } },
});

/** The query of a route that takes no query parameter. */
export const NO_QUERY = { type: 'object', additionalProperties: false, properties: {} } as const;

/** A query of these parameters and no other; each given at most once. */
export const query = (properties: Record<string, unknown>, required: readonly string[] = []) => ({
  type: 'object',
  additionalProperties: false,
  properties,
  ...(required.length === 0 ? {} : { required }),
});

/** A path parameter that is a UUID (a 400 naming it when it is not). */
export const UUID_PARAM = { type: 'string', format: 'uuid', 'x-message': 'the path parameter must be a UUID' } as const;

/** The path parameters of a route under `/{UUID}` (or `/{id}`). */
export const uuidParams = (name = 'UUID') => ({ type: 'object', required: [name], properties: { [name]: UUID_PARAM } });

/** The kinds' path segments, for a schema's `enum`. */
export const KIND_SEGMENTS: readonly string[] = KINDS.map((k) => k.segment);

/** `kinds`: comma-separated kind segments. */
export const KINDS_PARAM = {
  type: 'string',
  pattern: `^(${KIND_SEGMENTS.join('|')})(,(${KIND_SEGMENTS.join('|')}))*$`,
  description: 'comma-separated kinds, e.g. trips,events',
  'x-message': 'must be kinds as path segments, comma-separated, e.g. trips,events',
} as const;

/** A date-time with a time zone (RFC 3339). */
export const timeParam = (description?: string) => ({
  type: 'string',
  format: 'date-time',
  ...(description === undefined ? {} : { description }),
  'x-message': 'must be a date-time with a time zone, such as 2026-11-25T08:00:00Z',
});

/** `limit`: a whole number from 1 to `max`. */
export const limitParam = (max: number, fallback: number, description?: string) => ({
  type: 'integer',
  minimum: 1,
  maximum: max,
  default: fallback,
  ...(description === undefined ? {} : { description }),
  'x-message': `must be a whole number from 1 to ${max}`,
});

export const capital = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);
