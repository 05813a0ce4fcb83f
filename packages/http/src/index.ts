export { createHttpApp, type HttpAppOptions } from './app.js';
export { JSON_TYPE } from './errors.js';
export { servedElsewhere, MAX_PARAM_LENGTH } from './methods.js';
export { type Quotas } from './quotas.js';
export { parseJsonBody } from '@otm/core';
export { clip, contentCodings, jsonMediaType, ECHO_LIMIT, type JsonMediaType } from './params.js';
export * from './answers.js';
export { KIND_EXAMPLES } from './examples.js';
export { type AuthOutcome, type BearerAuthenticator } from './auth.js';
export { JwtVerifier, JWT_ALGORITHMS, JWT_CLOCK_TOLERANCE_S, type JwtVerifierOptions } from './jwt.js';
export { ApiKeyAuthenticator, API_KEY_CACHE_MS } from './api-keys.js';
// The plugins' additions to fastify's types (request.principal, route config, schema keywords of
// the OpenAPI document), for the route groups of the services.
export type { AuthenticationOptions } from './authentication.js';
export type { FramingOptions } from './framing.js';
export type { ErrorAnswerOptions } from './errors.js';
export type { QuotaOptions } from './quotas.js';
export type { OperationsOptions } from './operations.js';
export type { SwaggerOptions } from '@fastify/swagger';
export { openApi } from './openapi.js';
export { methods } from './methods.js';
export { schemaRefusal, validatorCompiler } from './validation.js';
