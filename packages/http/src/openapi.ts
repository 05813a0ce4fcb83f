/**
 * The service's own OpenAPI 3.1 description, served at GET /api/v5/openapi.json: made by
 * @fastify/swagger from the routes this process serves (each declares its parameters, body and
 * answers as schemas, answers.ts), with as components the model's schemas (prose removed, as
 * extracted into @otm/model; each `oneOf` exclusive, served-schemas.ts), the error array, and the
 * schemas the route groups add (`addComponentSchemas`). Routes name components by
 * `#/components/schemas/<name>`.
 *
 * The shape of the model's schemas (MODEL.schemas; 194 as served, with ours) is one recursive web.
 * A vehicle has `contextEvents` (events), an event names vehicles, trips, actions, locations,
 * actors, ...: 114 schemas reach one another, 180 are reachable from any kind's. The paths through
 * `$ref`s from `vehicle` that never repeat a schema number 20 of one `$ref`, 25 of two, then 155,
 * 198, 932, 1293, 6561 of seven, ... more than 50 million in all. That is valid OpenAPI 3.1 and
 * what the model says, but a tool that inlines every `$ref` along every such path, as Swagger UI's
 * 3.1 resolver does when an operation is opened, does not finish. The docs page resolves it another
 * way (services/web/src/docs/bounded-refs.ts), and the requests and answers that carry the kinds'
 * documents have an `example` (examples.ts), which Swagger UI shows and sends rather than a sample
 * it would generate from the schema.
 */
import swagger from '@fastify/swagger';
import type { FastifyInstance, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { ANSWER_TYPES } from '@otm/core';
import { JSON_TYPE } from './errors.js';
import { servedModelSchemas } from './served-schemas.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Adds schemas to the OpenAPI document's components, for routes to name (`#/components/schemas/<name>`). */
    addComponentSchemas(schemas: Readonly<Record<string, unknown>>): void;
  }
}

/** The error array: the items of every error answer but a 400's (the model's own clientError). */
const ERROR_ITEMS = {
  type: 'array',
  items: {
    type: 'object',
    required: ['type', 'message'],
    properties: { type: { type: 'string', enum: [...ANSWER_TYPES] }, message: { type: 'string' } },
  },
};

const INFO = {
  title: 'OTM trip data exchange service',
  version: '5.9',
  description: 'The Open Trip Model 5.9 interface, with the answers this service gives where the model is silent.',
};

const SECURITY_SCHEMES = {
  BearerToken: {
    type: 'http',
    scheme: 'bearer',
    description:
      'A token of OTM_TOKENS, an API key (otm keys create) or a JWT of the identity provider (OTM_JWT_*); each gives a tenant and scopes (read, write, read:<kind>, write:<kind>): docs/auth.md',
  },
  StreamTicket: { type: 'apiKey', in: 'query', name: 'ticket', description: 'from POST /api/v5/stream/tickets; GET /api/v5/stream only' },
};

/** The order of a path's operations in the document. */
const OPERATION_ORDER = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head', 'trace'];

type Operations = Record<string, { requestBody?: { content?: Record<string, { example?: unknown }> } }>;
interface Document {
  paths: Record<string, Operations>;
  components: { schemas: Record<string, unknown> };
}

/** A route URL as an OpenAPI path: `:UUID` as `{UUID}`. */
const openApiPath = (url: string): string => url.replace(/:(\w+)/g, '{$1}');

export const openApi = fp(
  async (app: FastifyInstance) => {
    const components: Record<string, unknown> = { ...servedModelSchemas(), errorItems: ERROR_ITEMS };
    app.decorate('addComponentSchemas', (schemas: Readonly<Record<string, unknown>>) => {
      for (const [name, schema] of Object.entries(schemas)) {
        if (Object.hasOwn(components, name) && components[name] !== schema) throw new Error(`openapi: two schemas named ${name}`);
        components[name] = schema;
      }
    });
    // @fastify/swagger leaves out the example of a request body's media type: kept here by route.
    const bodyExamples = new Map<string, unknown>();
    app.addHook('onRoute', (route: RouteOptions) => {
      const content = (route.schema?.body as { content?: Record<string, { example?: unknown }> } | null | undefined)?.content;
      if (content === undefined) return;
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      for (const [type, media] of Object.entries(content)) {
        if (media.example === undefined) continue;
        for (const m of methods) bodyExamples.set(`${m.toLowerCase()} ${openApiPath(route.url)} ${type}`, media.example);
      }
    });

    const complete = ({ openapiObject }: { openapiObject: Partial<Document> }): Document => {
      const doc = openapiObject as Document;
      const paths: Record<string, Operations> = {};
      for (const [path, item] of Object.entries(doc.paths)) {
        const ordered: Operations = {};
        for (const method of Object.keys(item).sort((a, b) => OPERATION_ORDER.indexOf(a) - OPERATION_ORDER.indexOf(b))) {
          const op = item[method]!;
          ordered[method] = op;
          for (const [type, media] of Object.entries(op.requestBody?.content ?? {})) {
            const example = bodyExamples.get(`${method} ${path} ${type}`);
            if (example !== undefined) media.example = example;
          }
        }
        paths[path] = ordered;
      }
      return { ...doc, paths, components: { ...doc.components, schemas: components } };
    };

    await app.register(swagger, {
      openapi: { openapi: '3.1.0', info: INFO, components: { securitySchemes: SECURITY_SCHEMES as never } },
      convertConstToEnum: false,
      transformObject: complete as never,
    });

    // Public, like the model's own description; made once, on the first request.
    let text: string | undefined;
    app.get(
      '/api/v5/openapi.json',
      {
        schema: {
          operationId: 'openApiDocument',
          summary: 'Extension: this description (OpenAPI 3.1); no token needed',
          tags: ['Operations'],
          response: { '200': { description: 'This document', content: { 'application/json': { schema: { type: 'object' } } } } },
        },
      },
      async (_req, reply) => reply.type(JSON_TYPE).send((text ??= JSON.stringify(app.swagger()))),
    );
  },
  { name: 'otm-openapi' },
);
