/**
 * The service's own OpenAPI 3.1 description: the model's schemas (prose removed, as extracted
 * into @otm/model) and paths, plus what the model leaves open and this service decided: the
 * answers for 401, 403, 404, 405, 408, 413, 414, 415, 431 and 503, the `?lifecycle=` query, the bulk extension
 * and the operational endpoints. Served at GET /api/v5/openapi.json.
 */
import { ANSWER_TYPES, LIST_FILTERS } from '@otm/core';
import { KINDS, MODEL } from '@otm/model';

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });
const errorAnswer = (description: string) => ({ description, content: json(ref('errorItems')) });

const capital = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

const pageOf = (item: unknown) => ({
  type: 'object',
  required: ['items', 'next'],
  properties: { items: { type: 'array', items: item }, next: { type: ['string', 'null'], description: 'path and query of the next page' } },
});

const listParameters = [
  { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 1000, default: 100 } },
  { name: 'cursor', in: 'query', required: false, schema: { type: 'string' }, description: 'from the `next` of the previous page' },
  {
    name: 'updatedSince',
    in: 'query',
    required: false,
    schema: { type: 'string', format: 'date-time' },
    description: 'last changed at or after',
  },
  {
    name: 'updatedBefore',
    in: 'query',
    required: false,
    schema: { type: 'string', format: 'date-time' },
    description: 'last changed before',
  },
];

const FILTER_TEXT: Record<string, string> = {
  status: 'the status',
  vehicle: 'the id of the vehicle it names',
  actor: 'the id of one of its actors',
  externalId: 'the id of one of its externalIdentifiers (any scheme)',
  licensePlate: 'the licence plate',
  eventType: 'the event type',
  actionType: 'the action type',
  lifecycle: 'has a version in this lifecycle (answered in it)',
  from: 'event time at or after',
  to: 'event time before',
};

const filterParameter = (name: string) => ({
  name,
  in: 'query',
  required: false,
  schema: name === 'from' || name === 'to' ? { type: 'string', format: 'date-time' } : { type: 'string' },
  description: FILTER_TEXT[name],
});

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
      get: {
        operationId: `list${name}s`,
        summary: `Extension: the tenant's ${k.segment}, a page at a time`,
        description:
          'Keyset order: the time of the last change, then the id; never offsets, so a client walking every page while others write sees ' +
          'each entity that did not change during the walk exactly once (one that changed moves to the end). Filters combine; each item is ' +
          'the document as GET answers it (the asked lifecycle with `lifecycle`, else the latest).',
        tags: [k.label, 'Extensions'],
        parameters: [...listParameters, ...LIST_FILTERS[k.segment].map((f) => filterParameter(f))],
        responses: {
          '200': { description: 'A page, and the path of the next one (null on the last page)', content: json(pageOf(ref(k.schema))) },
          '400': { description: 'An unknown query parameter or a bad value, named in `field`', content: json(ref('clientError')) },
          ...common,
        },
        security: [{ BearerToken: [] }],
      },
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
  paths['/api/v5/changes'] = {
    get: {
      operationId: 'listChanges',
      summary: "Extension: the change feed, every put and delete of the tenant's data in the order applied",
      description:
        'Resumable from any cursor within OTM_FEED_RETENTION (default 7 days). `next` is always given: at the end it is where to ask again later. ' +
        'A put carries the document written (or, for telemetry events in the distributed deployment, the version as stored when read).',
      tags: ['Extensions'],
      parameters: [
        {
          name: 'cursor',
          in: 'query',
          required: false,
          schema: { type: 'string' },
          description: 'from a `next` or an item; absent: from the oldest change kept',
        },
        {
          name: 'kinds',
          in: 'query',
          required: false,
          schema: { type: 'string' },
          description: 'comma-separated kinds, e.g. trips,events',
        },
        { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 1000, default: 100 } },
      ],
      responses: {
        '200': { description: 'A page of changes', content: json(pageOf(ref('change'))) },
        '400': { description: 'A bad cursor, kind or limit, named in `field`', content: json(ref('clientError')) },
        '410': errorAnswer('The cursor is older than the feed keeps (OTM_FEED_RETENTION): start again without one'),
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/vehicles/{UUID}/track'] = {
    get: {
      operationId: 'getVehicleTrack',
      summary: "Extension: a vehicle's locationUpdateEvents in event time order",
      description:
        'The window is at most OTM_TRACK_MAX_DAYS (default 31) days; default: the day before `to` (default now). json pages with `limit` and `cursor`; ' +
        'the other formats stream the whole window. geojson: a FeatureCollection of one Point feature per position, then the LineString of all of them.',
      tags: ['Vehicle', 'Extensions'],
      parameters: [
        { name: 'UUID', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } },
        { name: 'from', in: 'query', required: false, schema: { type: 'string', format: 'date-time' } },
        { name: 'to', in: 'query', required: false, schema: { type: 'string', format: 'date-time' } },
        {
          name: 'format',
          in: 'query',
          required: false,
          schema: { type: 'string', enum: ['json', 'geojson', 'gpx', 'csv', 'ndjson'], default: 'json' },
        },
        {
          name: 'limit',
          in: 'query',
          required: false,
          schema: { type: 'integer', minimum: 1, maximum: 10000, default: 1000 },
          description: 'json only',
        },
        { name: 'cursor', in: 'query', required: false, schema: { type: 'string' }, description: 'json only' },
      ],
      responses: {
        '200': {
          description: 'The track',
          content: {
            'application/json': { schema: pageOf(ref('event')) },
            'application/geo+json': { schema: { type: 'object' } },
            'application/gpx+xml': { schema: { type: 'string' } },
            'text/csv': { schema: { type: 'string', description: 'time,lat,lon,speed_kmh,heading,event_id' } },
            'application/x-ndjson': { schema: { type: 'string', description: 'one event a line' } },
          },
        },
        '400': { description: 'A bad UUID, time, format or a window longer than allowed', content: json(ref('clientError')) },
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/vehicles/positions'] = {
    get: {
      operationId: 'getLatestPositions',
      summary: "Extension: the newest position of each of the tenant's vehicles",
      description: 'Kept up to date as location events arrive (the newest by event time); an older event never moves a vehicle back.',
      tags: ['Vehicle', 'Extensions'],
      parameters: [
        { name: 'bbox', in: 'query', required: false, schema: { type: 'string' }, description: 'minLon,minLat,maxLon,maxLat' },
        {
          name: 'staleAfter',
          in: 'query',
          required: false,
          schema: { type: 'string' },
          description: 'leave out positions older than this: 90s, 15m, 2h, 1d',
        },
      ],
      responses: {
        '200': { description: 'The positions, by vehicle id', content: json(pageOf(ref('position'))) },
        '400': { description: 'A bad bbox or staleAfter', content: json(ref('clientError')) },
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
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
        change: {
          type: 'object',
          required: ['cursor', 'op', 'kind', 'id'],
          properties: {
            cursor: { type: 'string' },
            op: { type: 'string', enum: ['put', 'delete'] },
            kind: { type: 'string', enum: KINDS.map((k) => k.segment) },
            id: { type: 'string', format: 'uuid' },
            lifecycle: ref('lifecycle'),
            document: { type: 'object', description: 'the document put (a put; absent if deleted since, for a version read when asked)' },
          },
        },
        position: {
          type: 'object',
          required: ['vehicle', 'time', 'lat', 'lon', 'eventId'],
          properties: {
            vehicle: { type: 'string', format: 'uuid' },
            time: { type: 'string', format: 'date-time' },
            lat: { type: 'number' },
            lon: { type: 'number' },
            speedKmh: { type: 'number' },
            heading: { type: 'number' },
            eventId: { type: 'string', format: 'uuid' },
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
