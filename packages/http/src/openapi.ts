/**
 * The service's own OpenAPI 3.1 description: the model's schemas (prose removed, as extracted
 * into @otm/model) and paths, plus what the model leaves open and this service decided: the
 * answers for 401, 403, 404, 405, 408, 413, 414, 415, 431 and 503, the `?lifecycle=` query, the bulk extension
 * and the operational endpoints. Served at GET /api/v5/openapi.json.
 */
import { ANSWER_TYPES } from '@otm/core';
import { KINDS, MODEL } from '@otm/model';

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });
const errorAnswer = (description: string) => ({ description, content: json(ref('errorItems')) });

const capital = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

export function openApiDocument(): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  const common = {
    '401': errorAnswer('No bearer token, or an unknown one (with WWW-Authenticate: Bearer)'),
    '403': errorAnswer('The token lacks the scope (write for PUT/DELETE/POST, read for GET)'),
    '408': errorAnswer(
      'The headers (OTM_HEADERS_TIMEOUT_MS) or the whole request (OTM_REQUEST_TIMEOUT_MS) did not arrive in time; the connection is closed',
    ),
    '414': errorAnswer('A path segment longer than 200 characters'),
    '431': errorAnswer('Request line and headers larger than the limit'),
    '500': { description: 'A fault of the service', content: json(ref('serverError')) },
  };
  for (const k of KINDS) {
    const name = capital(k.entityType);
    paths[`/api/v5/${k.segment}`] = {
      put: {
        operationId: MODEL.kinds[k.segment]?.operationId ?? `create${name}`,
        summary: `Add (or replace) a ${k.label.toLowerCase()}; the id is generated when absent`,
        tags: [k.label],
        requestBody: { required: true, content: json(ref(k.schema)) },
        responses: {
          '200': {
            description:
              'The entity as stored (Location header: its path). A telemetry event sent as plain JSON (see the bulk extension) is stored and answered as the bytes sent; any other document as its re-encoded JSON.',
            content: json(ref(k.schema)),
          },
          '400': { description: 'Malformed JSON or a document that does not follow the model', content: json(ref('clientError')) },
          ...common,
          '405': errorAnswer('Another method than PUT (with Allow)'),
          '413': errorAnswer('A body larger than OTM_BODY_LIMIT'),
          '415': errorAnswer(
            'A body that is not application/json in UTF-8 (a charset parameter may say utf-8), or sent with a Content-Encoding or a Transfer-Encoding other than chunked',
          ),
          '503': errorAnswer('The bus cannot take the write now (with Retry-After); nothing was stored'),
        },
        security: [{ BearerToken: [] }],
      },
    };
    const uuid = { name: 'UUID', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } };
    paths[`/api/v5/${k.segment}/{UUID}`] = {
      get: {
        operationId: `get${name}ByUuid`,
        tags: [k.label],
        parameters: [
          uuid,
          {
            name: 'lifecycle',
            in: 'query',
            required: false,
            schema: ref('lifecycle'),
            description: 'that lifecycle version instead of the latest',
          },
        ],
        responses: {
          '200': { description: 'The entity (its latest lifecycle unless asked)', content: json(ref(k.schema)) },
          '400': { description: 'A malformed UUID or query', content: json(ref('clientError')) },
          '404': errorAnswer('No such entity for this tenant'),
          ...common,
        },
        security: [{ BearerToken: [] }],
      },
      delete: {
        operationId: `delete${name}ByUuid`,
        tags: [k.label],
        parameters: [uuid],
        responses: {
          '204': { description: 'Deleted (every lifecycle version; entities it held inline stay)' },
          '400': { description: 'A malformed UUID', content: json(ref('clientError')) },
          '404': errorAnswer('No such entity for this tenant'),
          ...common,
          '503': errorAnswer('The bus cannot take the delete now (with Retry-After)'),
        },
        security: [{ BearerToken: [] }],
      },
    };
    paths[`/api/v5/bulk/${k.segment}`] = {
      post: {
        operationId: `bulkCreate${name}`,
        summary: `Extension: many ${k.segment} at once, each checked like a PUT`,
        description:
          'Each document is checked and stored as a PUT of it would be; invalid ones are reported by index. ' +
          'A telemetry event sent as plain JSON (compact, with its id, no repeated member name, no member name starting with a digit, ' +
          'no number with an exponent or more than 15 significant digits) is stored as the bytes sent, as by PUT; any other document as its re-encoded JSON.',
        tags: [k.label, 'Extensions'],
        parameters: [{ name: 'atomic', in: 'query', required: false, schema: { type: 'boolean' }, description: 'all or nothing' }],
        requestBody: {
          required: true,
          content: {
            'application/json': { schema: { type: 'array', items: ref(k.schema) } },
            'application/x-ndjson': { schema: { type: 'string', description: 'one document per line' } },
          },
        },
        responses: {
          '200': { description: 'Per item: its id, or the model error items for it', content: json(ref('bulkResult')) },
          '400': { description: 'A body that is neither a JSON array nor NDJSON', content: json(ref('clientError')) },
          ...common,
          '413': errorAnswer('More than OTM_BULK_LIMIT bytes (as sent, or once decompressed) or OTM_BULK_MAX_ITEMS documents'),
          '415': errorAnswer('A body that is neither JSON nor NDJSON in UTF-8, or compressed otherwise than with gzip'),
          '503': errorAnswer('The bus cannot take the writes now (with Retry-After); nothing was stored'),
        },
        security: [{ BearerToken: [] }],
      },
    };
  }
  paths['/healthz'] = { get: { operationId: 'health', tags: ['Operations'], responses: { '200': { description: 'The process runs' } } } };
  paths['/readyz'] = {
    get: {
      operationId: 'ready',
      tags: ['Operations'],
      responses: { '200': { description: 'Dependencies answer' }, '503': { description: 'A dependency does not answer' } },
    },
  };
  paths['/metrics'] = {
    get: { operationId: 'metrics', tags: ['Operations'], responses: { '200': { description: 'Prometheus text format' } } },
  };

  return {
    openapi: '3.1.0',
    info: {
      title: 'OTM trip data exchange service',
      version: '5.9',
      description: 'The Open Trip Model 5.9 interface, with the answers this service gives where the model is silent.',
    },
    paths,
    components: {
      securitySchemes: { BearerToken: { type: 'http', scheme: 'bearer' } },
      schemas: {
        ...MODEL.schemas,
        errorItems: {
          type: 'array',
          items: {
            type: 'object',
            required: ['type', 'message'],
            properties: {
              type: {
                type: 'string',
                enum: [...ANSWER_TYPES],
              },
              message: { type: 'string' },
            },
          },
        },
        bulkResult: {
          type: 'object',
          required: ['accepted', 'rejected', 'items'],
          properties: {
            accepted: { type: 'integer' },
            rejected: { type: 'integer' },
            items: {
              type: 'array',
              items: {
                type: 'object',
                required: ['index'],
                properties: { index: { type: 'integer' }, id: { type: 'string' }, errors: ref('clientError') },
              },
            },
          },
        },
      },
    },
  };
}
