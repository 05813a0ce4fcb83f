export { JSON_TYPE, createHttpApp, methodNotAllowed, type HttpAppOptions } from './app.js';
export { parseJsonBody } from '@otm/core';
export { kindParam, uuidParam, onlyQuery, clip, contentCodings, jsonMediaType, ECHO_LIMIT, type JsonMediaType } from './params.js';
export { openApiDocument } from './openapi.js';
