export { JSON_TYPE, createHttpApp, methodNotAllowed, type HttpAppOptions, type Quotas } from './app.js';
export { parseJsonBody } from '@otm/core';
export { kindParam, uuidParam, onlyQuery, clip, contentCodings, jsonMediaType, ECHO_LIMIT, type JsonMediaType } from './params.js';
export { openApiDocument } from './openapi.js';
export { type AuthOutcome, type BearerAuthenticator } from './auth.js';
export { JwtVerifier, JWT_ALGORITHMS, JWT_CLOCK_TOLERANCE_S, type JwtVerifierOptions } from './jwt.js';
export { ApiKeyAuthenticator, API_KEY_CACHE_MS } from './api-keys.js';
