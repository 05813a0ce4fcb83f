/**
 * The service's own OpenAPI 3.1 description: the model's schemas (prose removed, as extracted
 * into @otm/model; each `oneOf` exclusive, served-schemas.ts) and paths, plus what the model leaves open and this service decided: the
 * answers for 401, 403, 404, 405, 408, 413, 414, 415, 429, 431 and 503, the `?lifecycle=` query, the bulk extension
 * and the operational endpoints. Served at GET /api/v5/openapi.json.
 */
import { ANSWER_TYPES, LIST_FILTERS } from '@otm/core';
import { KINDS, MODEL, type KindSegment } from '@otm/model';
import { servedModelSchemas } from './served-schemas.js';

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown, example?: unknown) => ({ 'application/json': example === undefined ? { schema } : { schema, example } });

/*
 * The shape of this document: the model's schemas (MODEL.schemas; 194 as served, with ours) form one
 * recursive web. A vehicle has `contextEvents` (events), an event names vehicles, trips, actions,
 * locations, actors, ...: 114 schemas reach one another, 180 are reachable from any kind's. The
 * paths through `$ref`s from `vehicle` that never repeat a schema number 20 of one `$ref`, 25 of
 * two, then 155, 198, 932, 1293, 6561 of seven, ... more than 50 million in all. That is valid
 * OpenAPI 3.1 and what the model says, but a tool that inlines every `$ref` along every such path,
 * as Swagger UI's 3.1 resolver does when an operation is opened, does not finish: opening
 * GET /api/v5/vehicles/{UUID} kept the docs page busy for minutes. The docs page resolves it
 * another way (services/web/src/docs/bounded-refs.ts), and the requests and answers that carry the kinds'
 * documents have an `example` (one valid document of each kind, below;
 * services/otm/test/openapi.test.ts checks them with the model's validator), which Swagger UI
 * shows and sends rather than a sample it would generate from the schema.
 */
const EXAMPLE_IDS = {
  vehicle: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a01',
  route: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a02',
  sensor: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a03',
  location: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a04',
  actor: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a05',
  consignment: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a06',
  trip: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a07',
  event: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a08',
  action: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a09',
  goods: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0a',
  document: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0b',
  transportOrder: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0c',
  constraint: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0d',
  secondStop: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0e',
  secondLocation: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0f',
} as const;
const point = (lat: number, lon: number) => ({ type: 'latLonPointGeoReference', lat, lon });
const refTo = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
/** The trip's first stop, also the example of an action. */
const stopExample = {
  actionType: 'stop',
  id: EXAMPLE_IDS.action,
  lifecycle: 'planned',
  sequenceNr: 1,
  location: refTo('location', EXAMPLE_IDS.location),
  startTime: '2026-11-23T06:00:00Z',
  endTime: '2026-11-23T06:30:00Z',
};
const goodsExample = {
  entityType: 'goods',
  type: 'items',
  id: EXAMPLE_IDS.goods,
  description: 'Tiles, 60x60',
  quantity: 12,
  grossWeight: { value: 9600, unit: 'kg' },
};

/** One document of each kind, valid per the model: the examples of the docs page. */
const KIND_EXAMPLES: Readonly<Record<KindSegment, Record<string, unknown>>> = {
  vehicles: {
    entityType: 'vehicle',
    id: EXAMPLE_IDS.vehicle,
    name: 'Truck 17',
    vehicleType: 'tractor',
    licensePlate: 'BX-123-Z',
    fuels: [{ fuelType: 'diesel', averageConsumption: { value: 28.5, unit: 'l' } }],
    emptyWeight: { value: 7800, unit: 'kg' },
  },
  routes: {
    entityType: 'route',
    id: EXAMPLE_IDS.route,
    name: 'A28',
    geoReference: {
      type: 'latLonArrayGeoReference',
      points: [
        { lat: 52.09, lon: 5.12 },
        { lat: 52.51, lon: 6.09 },
      ],
    },
  },
  sensors: { entityType: 'sensor', id: EXAMPLE_IDS.sensor, name: 'Reefer temperature', sensorType: 'temperature' },
  locations: {
    entityType: 'location',
    id: EXAMPLE_IDS.location,
    name: 'Depot Utrecht',
    type: 'warehouse',
    geoReference: point(52.09, 5.12),
  },
  actors: { entityType: 'actor', id: EXAMPLE_IDS.actor, type: 'company', name: 'Fast Freight BV' },
  consignments: {
    entityType: 'consignment',
    id: EXAMPLE_IDS.consignment,
    name: 'Order 4711',
    status: 'confirmed',
    goods: [{ associationType: 'inline', entity: goodsExample }],
  },
  trips: {
    entityType: 'trip',
    id: EXAMPLE_IDS.trip,
    name: 'Utrecht - Zwolle',
    status: 'confirmed',
    vehicle: refTo('vehicle', EXAMPLE_IDS.vehicle),
    actions: [
      {
        associationType: 'inline',
        entity: stopExample,
      },
      {
        associationType: 'inline',
        entity: {
          actionType: 'stop',
          id: EXAMPLE_IDS.secondStop,
          lifecycle: 'planned',
          sequenceNr: 2,
          location: {
            associationType: 'inline',
            entity: { entityType: 'location', id: EXAMPLE_IDS.secondLocation, name: 'Customer Zwolle', geoReference: point(52.51, 6.09) },
          },
          startTime: '2026-11-23T08:00:00Z',
        },
      },
    ],
  },
  events: {
    eventType: 'locationUpdateEvent',
    id: EXAMPLE_IDS.event,
    lifecycle: 'actual',
    creationDate: '2026-11-23T06:41:12Z',
    geoReference: point(52.2, 5.4),
    vehicle: refTo('vehicle', EXAMPLE_IDS.vehicle),
  },
  actions: stopExample,
  goods: goodsExample,
  documents: {
    entityType: 'document',
    id: EXAMPLE_IDS.document,
    name: 'Proof of delivery',
    mimeType: 'application/pdf',
    content: { contentType: 'link', uri: 'https://files.example/pod/4711.pdf' },
  },
  transportOrders: {
    entityType: 'transportOrder',
    id: EXAMPLE_IDS.transportOrder,
    name: 'Transport order 4711',
    consignments: [refTo('consignment', EXAMPLE_IDS.consignment)],
  },
  constraints: {
    entityType: 'constraint',
    id: EXAMPLE_IDS.constraint,
    value: { type: 'timeWindowConstraint', startTime: '2026-11-23T06:00:00Z', endTime: '2026-11-23T10:00:00Z' },
  },
};
const errorAnswer = (description: string) => ({ description, content: json(ref('errorItems')) });

const intHeader = (description: string) => ({ description, schema: { type: 'integer', minimum: 0 } });

/** The RateLimit-* headers (IETF draft) every answer of an authenticated route carries while a quota is set. */
const RATE_LIMIT_HEADERS = {
  'RateLimit-Limit': intHeader('The quota reported (the one with the least left): requests, or bulk documents, a window'),
  'RateLimit-Remaining': intHeader('What that quota has left'),
  'RateLimit-Reset': intHeader('Seconds until that quota is whole again'),
  'RateLimit-Policy': { description: 'The quota as `<count>;w=<window seconds>`', schema: { type: 'string' } },
};

/** The 429 of the quotas (OTM_RATE_LIMIT, OTM_TENANT_RATE_LIMIT). */
const tooManyRequests = (description: string) => ({
  ...errorAnswer(description),
  headers: { 'Retry-After': intHeader('Seconds to wait before trying again'), ...RATE_LIMIT_HEADERS },
});
const QUOTA_429 =
  "More requests (a bulk document counting one) than the credential's quota (OTM_RATE_LIMIT) or the tenant's (OTM_TENANT_RATE_LIMIT) allow: `tooManyRequests`, with Retry-After and RateLimit-*";

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

/** Why any operation may answer 503 before it starts: its credential cannot be checked for now. */
const CREDENTIAL_UNCHECKED = 'the credential cannot be checked for now: the JWKS (OTM_JWT_JWKS) or the API key store does not answer';
const capitalFirst = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);

export function openApiDocument(): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  const common = {
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
    '503': errorAnswer(`${capitalFirst(CREDENTIAL_UNCHECKED)} (with Retry-After)`),
  };
  for (const k of KINDS) {
    const name = capital(k.entityType);
    const example = KIND_EXAMPLES[k.segment];
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
          '200': {
            description: 'A page, and the path of the next one (null on the last page)',
            content: json(pageOf(ref(k.schema)), { items: [example], next: null }),
          },
          '400': { description: 'An unknown query parameter or a bad value, named in `field`', content: json(ref('clientError')) },
          ...common,
        },
        security: [{ BearerToken: [] }],
      },
      put: {
        operationId: MODEL.kinds[k.segment]?.operationId ?? `create${name}`,
        summary: `Add (or replace) a ${k.label.toLowerCase()}; the id is generated when absent`,
        tags: [k.label],
        requestBody: { required: true, content: json(ref(k.schema), example) },
        responses: {
          '200': {
            description:
              'The entity as stored (Location header: its path). A telemetry event sent as plain JSON (see the bulk extension) is stored and answered as the bytes sent; any other document as its re-encoded JSON.',
            content: json(ref(k.schema), example),
          },
          '400': { description: 'Malformed JSON or a document that does not follow the model', content: json(ref('clientError')) },
          ...common,
          '405': errorAnswer('Another method than PUT (with Allow)'),
          '413': errorAnswer('A body larger than OTM_BODY_LIMIT'),
          '415': errorAnswer(
            'A body that is not application/json in UTF-8 (a charset parameter may say utf-8), or sent with a Content-Encoding or a Transfer-Encoding other than chunked',
          ),
          '503': errorAnswer(
            `The bus cannot take the write now, or a store refuses writes for lack of room (type insufficientStorage); with Retry-After; nothing was stored; or ${CREDENTIAL_UNCHECKED}`,
          ),
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
          '200': { description: 'The entity (its latest lifecycle unless asked)', content: json(ref(k.schema), example) },
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
          '503': errorAnswer(
            `The bus cannot take the delete now, or a store refuses writes for lack of room (type insufficientStorage); with Retry-After; or ${CREDENTIAL_UNCHECKED}`,
          ),
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
            'application/json': { schema: { type: 'array', items: ref(k.schema) }, example: [example] },
            'application/x-ndjson': { schema: { type: 'string', description: 'one document per line' } },
          },
        },
        responses: {
          '200': { description: 'Per item: its id, or the model error items for it', content: json(ref('bulkResult')) },
          '400': { description: 'A body that is neither a JSON array nor NDJSON', content: json(ref('clientError')) },
          ...common,
          '413': errorAnswer('More than OTM_BULK_LIMIT bytes (as sent, or once decompressed) or OTM_BULK_MAX_ITEMS documents'),
          '415': errorAnswer('A body that is neither JSON nor NDJSON in UTF-8, or compressed otherwise than with gzip'),
          '503': {
            description:
              `The bus cannot take the writes now (with Retry-After; nothing was stored; the error array); or ${CREDENTIAL_UNCHECKED}; ` +
              'or a store refused some of the documents for lack of room: the per-item answer (as 200), with Retry-After, in which every ' +
              'document not stored has an error item of type insufficientStorage (every document of an atomic request); sending them, or the whole request, again is safe',
            content: json({ anyOf: [ref('errorItems'), ref('bulkResult')] }),
          },
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
        'A put carries the document written (or, for telemetry events in the distributed deployment, and in the embedded one for an event whose part of the log was compacted since, the version as stored when read).',
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
            'application/json': { schema: pageOf(ref('event')), example: { items: [KIND_EXAMPLES.events], next: null } },
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
  paths['/api/v5/stream'] = {
    get: {
      operationId: 'streamChanges',
      summary: "Extension: the tenant's changes as they happen, as Server-Sent Events",
      description:
        'One event per change of the feed (GET /api/v5/changes): `id:` its cursor, `event: put` or `delete`, `data:` the item /changes answers. ' +
        'A comment at least every 15 s. Starts at the end of the feed (only new changes), or after `Last-Event-ID` (header; else `lastEventId`), ' +
        'within OTM_FEED_RETENTION, with nothing missed. `snapshot=positions` first sends the latest positions of the matching vehicles ' +
        '(event `position`, no id). Authenticate with the Authorization header, or with `ticket` from POST /api/v5/stream/tickets; never a token in the URL. ' +
        'Filters combine: `vehicle` takes the vehicle itself, trips with it as their vehicle and events linked to it; `trip` the trip itself and events linked to it ' +
        '(a delete, having no document left, only when it deletes that vehicle or trip).',
      tags: ['Extensions'],
      parameters: [
        {
          name: 'kinds',
          in: 'query',
          required: false,
          schema: { type: 'string' },
          description: 'comma-separated kinds, e.g. trips,events',
        },
        { name: 'vehicle', in: 'query', required: false, schema: { type: 'string' }, description: 'the id of a vehicle' },
        { name: 'trip', in: 'query', required: false, schema: { type: 'string' }, description: 'the id of a trip' },
        { name: 'snapshot', in: 'query', required: false, schema: { type: 'string', enum: ['positions'] } },
        {
          name: 'Last-Event-ID',
          in: 'header',
          required: false,
          schema: { type: 'string' },
          description: 'the id of the last event received: resume after it',
        },
        {
          name: 'lastEventId',
          in: 'query',
          required: false,
          schema: { type: 'string' },
          description: 'as Last-Event-ID, for clients that cannot set it (the header wins)',
        },
        {
          name: 'ticket',
          in: 'query',
          required: false,
          schema: { type: 'string' },
          description: 'a stream ticket, instead of the Authorization header',
        },
      ],
      responses: {
        '200': {
          description: 'The stream, until the client or the service closes it',
          content: {
            'text/event-stream': {
              schema: { type: 'string', description: 'events whose data is a change (see the `change` schema) or a position' },
            },
          },
        },
        '400': {
          description:
            'An unknown parameter, a bad value, a Last-Event-ID that is not a cursor of the feed, or a token in the URL (`token`, `access_token`), named in `field`',
          content: json(ref('clientError')),
        },
        '410': errorAnswer('The Last-Event-ID is older than the feed keeps (OTM_FEED_RETENTION): start again without one'),
        ...common,
        '429': tooManyRequests(
          `The token has OTM_STREAMS_PER_TOKEN streams open (in every process, with Redis) (\`tooManyStreams\`, with Retry-After); or ${QUOTA_429}`,
        ),
        '401': errorAnswer(
          'No bearer token and no ticket, or an unknown token, or a ticket not valid or expired (with WWW-Authenticate: Bearer)',
        ),
      },
      security: [{ BearerToken: [] }, { StreamTicket: [] }],
    },
  };
  paths['/api/v5/stream/tickets'] = {
    post: {
      operationId: 'createStreamTicket',
      summary: 'Extension: a short-lived ticket for GET /api/v5/stream?ticket=, for clients that cannot send headers (EventSource)',
      description:
        'Good for 60 seconds, for GET /api/v5/stream only, with the tenant and scopes of the token; counts as the token against OTM_STREAMS_PER_TOKEN. ' +
        'A stream opened with it stays open after it expires; to resume, get a new one.',
      tags: ['Extensions'],
      responses: {
        '200': {
          description: 'The ticket',
          content: json({
            type: 'object',
            required: ['ticket', 'expiresAt'],
            properties: { ticket: { type: 'string' }, expiresAt: { type: 'string', format: 'date-time' } },
          }),
        },
        '400': { description: 'A query parameter', content: json(ref('clientError')) },
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/validate/{kind}'] = {
    post: {
      operationId: 'validateDocument',
      summary:
        'Extension: check a document as a PUT of it would be checked, without storing it (update and association events: not against stored entities)',
      tags: ['Extensions'],
      parameters: [{ name: 'kind', in: 'path', required: true, schema: { type: 'string', enum: KINDS.map((k) => k.segment) } }],
      requestBody: { required: true, content: json({ type: 'object' }) },
      responses: {
        '200': {
          description: 'The document follows the model',
          content: json({ type: 'object', required: ['valid'], properties: { valid: { const: true } } }),
        },
        '400': {
          description: 'Malformed JSON or a document that does not follow the model: the same items a PUT gives',
          content: json(ref('clientError')),
        },
        '404': errorAnswer('An unknown kind'),
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  // Webhooks (services/dispatcher): subscriptions and their deliveries.
  const subscriptionId = { name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } };
  const subscriptionAnswer = (description: string) => ({ description, content: json(ref('subscription')) });
  const noSubscription = errorAnswer('No such subscription for this tenant');
  paths['/api/v5/subscriptions'] = {
    post: {
      operationId: 'createSubscription',
      summary: "Extension: a webhook: the tenant's changes POSTed to a URL, in signed batches",
      description:
        'Deliveries are JSON POSTs of `{"deliveryId", "subscription", "changes": [items as GET /api/v5/changes answers them]}`, at most ' +
        'OTM_WEBHOOK_BATCH changes (or what arrived within 1 s), in feed order, signed with `OTM-Signature: t=<unix seconds>,v1=<hex ' +
        'HMAC-SHA256 of "<t>.<body>" with the secret>`, at least once (deduplicate by cursor). A 2xx answer delivers; anything else (3xx ' +
        'included: redirects are not followed) is retried with exponential backoff for 24 h, then the subscription is paused. ' +
        'The URL must be http(s), at most 2048 characters, without credentials; loopback, private, link-local, CGNAT, multicast and ' +
        'metadata addresses are refused (at creation for a literal address, at every connection for a name) unless OTM_WEBHOOK_ALLOW lists them. ' +
        'Starts at the current end of the feed, or after `from`. The answer shows the secret (made when not given); later ones mask it.',
      tags: ['Webhooks', 'Extensions'],
      requestBody: { required: true, content: json(ref('subscriptionRequest')) },
      responses: {
        '201': subscriptionAnswer('The subscription, with its secret in full (Location: its path)'),
        '400': { description: 'A bad or unknown member, named in `field`; a URL that is refused', content: json(ref('clientError')) },
        '409': errorAnswer('The tenant has the most subscriptions allowed (100)'),
        '410': errorAnswer('`from` is older than the feed keeps'),
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
    get: {
      operationId: 'listSubscriptions',
      summary: "Extension: the tenant's webhook subscriptions, oldest first (secrets masked)",
      tags: ['Webhooks', 'Extensions'],
      responses: {
        '200': {
          description: 'Every subscription of the tenant',
          content: json({ type: 'object', required: ['items'], properties: { items: { type: 'array', items: ref('subscription') } } }),
        },
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/subscriptions/{id}'] = {
    get: {
      operationId: 'getSubscription',
      summary: 'Extension: a webhook subscription: its state, why it was paused, its cursor (secret masked)',
      tags: ['Webhooks', 'Extensions'],
      parameters: [subscriptionId],
      responses: {
        '200': subscriptionAnswer('The subscription'),
        '400': { description: 'A malformed id', content: json(ref('clientError')) },
        '404': noSubscription,
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
    delete: {
      operationId: 'deleteSubscription',
      summary: 'Extension: stop and remove a webhook subscription with its deliveries',
      tags: ['Webhooks', 'Extensions'],
      parameters: [subscriptionId],
      responses: {
        '204': { description: 'Removed' },
        '400': { description: 'A malformed id', content: json(ref('clientError')) },
        '404': noSubscription,
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/subscriptions/{id}/deliveries'] = {
    get: {
      operationId: 'listSubscriptionDeliveries',
      summary: "Extension: a webhook subscription's recent delivery attempts, newest first (the last 100)",
      tags: ['Webhooks', 'Extensions'],
      parameters: [
        subscriptionId,
        { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 100, default: 100 } },
      ],
      responses: {
        '200': {
          description: 'The attempts',
          content: json({ type: 'object', required: ['items'], properties: { items: { type: 'array', items: ref('deliveryAttempt') } } }),
        },
        '400': { description: 'A malformed id or limit', content: json(ref('clientError')) },
        '404': noSubscription,
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/subscriptions/{id}/replay'] = {
    post: {
      operationId: 'replaySubscription',
      summary: 'Extension: deliver again the changes after a feed cursor (the subscription goes back to it)',
      description: 'A paused subscription stays paused: resume it to deliver.',
      tags: ['Webhooks', 'Extensions'],
      parameters: [
        subscriptionId,
        {
          name: 'cursor',
          in: 'query',
          required: true,
          schema: { type: 'string' },
          description: "a cursor of GET /api/v5/changes (an item's or a `next`)",
        },
      ],
      responses: {
        '200': subscriptionAnswer('The subscription, at its new cursor'),
        '400': { description: 'A missing cursor, or one that is not of this feed', content: json(ref('clientError')) },
        '404': noSubscription,
        '410': errorAnswer('The cursor is older than the feed keeps (OTM_FEED_RETENTION)'),
        ...common,
      },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/subscriptions/{id}/resume'] = {
    post: {
      operationId: 'resumeSubscription',
      summary: 'Extension: a paused webhook subscription goes on where it stopped (its cursor)',
      tags: ['Webhooks', 'Extensions'],
      parameters: [subscriptionId],
      responses: { '200': subscriptionAnswer('The subscription, active'), '404': noSubscription, ...common },
      security: [{ BearerToken: [] }],
    },
  };
  paths['/api/v5/docs'] = {
    get: {
      operationId: 'apiDocs',
      summary: 'Extension: this description in Swagger UI (an HTML page); no token needed to load it',
      tags: ['Operations'],
      responses: { '200': { description: 'The page', content: { 'text/html': {} } } },
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
      securitySchemes: {
        BearerToken: {
          type: 'http',
          scheme: 'bearer',
          description:
            'A token of OTM_TOKENS, an API key (otm keys create) or a JWT of the identity provider (OTM_JWT_*); each gives a tenant and scopes (read, write, read:<kind>, write:<kind>): docs/auth.md',
        },
        StreamTicket: {
          type: 'apiKey',
          in: 'query',
          name: 'ticket',
          description: 'from POST /api/v5/stream/tickets; GET /api/v5/stream only',
        },
      },
      schemas: {
        ...servedModelSchemas(),
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
            document: {
              type: 'object',
              description: 'the document put (a put; absent if deleted since, for a version read when the change is read)',
            },
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
        subscriptionRequest: {
          type: 'object',
          required: ['url'],
          additionalProperties: false,
          properties: {
            url: { type: 'string', format: 'uri', maxLength: 2048, description: 'http or https, without credentials' },
            kinds: {
              type: 'array',
              minItems: 1,
              items: { type: 'string', enum: KINDS.map((k) => k.segment) },
              description: 'absent: every kind',
            },
            filter: ref('subscriptionFilter'),
            secret: { type: 'string', minLength: 16, maxLength: 256, description: 'absent: 32 random bytes in hex are made' },
            from: { type: 'string', description: 'a feed cursor: deliver the changes after it (absent: only changes from now on)' },
          },
        },
        subscriptionFilter: {
          type: 'object',
          additionalProperties: false,
          properties: {
            vehicle: { type: 'string', description: 'the vehicle, and the documents naming it as their vehicle (trips, events, ...)' },
            trip: { type: 'string', description: 'the trip, and the events linked to it' },
            eventType: { type: 'string', description: 'events of this type only' },
          },
        },
        subscription: {
          type: 'object',
          required: ['id', 'url', 'kinds', 'filter', 'secret', 'state', 'createdAt'],
          properties: {
            id: { type: 'string', format: 'uuid' },
            url: { type: 'string' },
            kinds: { type: ['array', 'null'], items: { type: 'string' }, description: 'null: every kind' },
            filter: ref('subscriptionFilter'),
            secret: { type: 'string', description: 'in full when just made, else `****` and its last 4 characters' },
            state: { type: 'string', enum: ['active', 'paused'] },
            reason: { type: 'string', description: 'why it was paused' },
            cursor: { type: 'string', description: 'the feed cursor of the last change delivered or passed over' },
            failingSince: { type: 'string', format: 'date-time', description: 'while a batch is being retried: its first failure' },
            createdAt: { type: 'string', format: 'date-time' },
          },
        },
        deliveryAttempt: {
          type: 'object',
          required: ['id', 'at', 'attempt', 'changes', 'firstCursor', 'lastCursor', 'outcome', 'durationMs'],
          properties: {
            id: { type: 'string', description: 'the batch (the OTM-Delivery header)' },
            at: { type: 'string', format: 'date-time' },
            attempt: { type: 'integer', minimum: 1 },
            changes: { type: 'integer' },
            firstCursor: { type: 'string' },
            lastCursor: { type: 'string' },
            outcome: { type: 'string', enum: ['delivered', 'failed', 'refused'] },
            status: { type: 'integer', description: 'the HTTP status answered' },
            error: { type: 'string', description: 'what went wrong' },
            durationMs: { type: 'integer' },
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
                properties: {
                  index: { type: 'integer' },
                  id: { type: 'string' },
                  // The model's items of an invalid document; one insufficientStorage item for a document a store refused.
                  errors: { anyOf: [ref('clientError'), ref('errorItems')] },
                },
              },
            },
          },
        },
      },
    },
  };
}
