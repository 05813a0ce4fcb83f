/**
 * Error answers: every error, whoever raises it (a route, a store, fastify's body parsing or
 * schema validation), answered as the model's error array (`[{type, message, field?}]`) in plain
 * words that name no framework. A plugin of the root (fastify-plugin): its handler is every
 * route's, and a route's own handler (the bulk route's) passes on what it does not answer.
 */
import http from 'node:http';
import type { ErrorObject } from 'ajv';
import type { FastifyError, FastifyInstance, FastifyReply, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { AdapterError, OtmServiceError, StorageRefused, ThrottledLog, storageAnswer, unavailable, type ErrorItem } from '@otm/core';
import { badRequest } from './answers.js';
import { clip, jsonMediaType } from './params.js';
import { schemaRefusal } from './validation.js';

/** The content type of every JSON answer. */
export const JSON_TYPE = 'application/json; charset=utf-8';

/** The item type of a 4xx answer that has no more precise one (400s use the model's own types). */
export const TYPE_OF_STATUS: Record<number, ErrorItem['type']> = {
  401: 'unauthorized',
  403: 'forbidden',
  404: 'notFound',
  405: 'methodNotAllowed',
  408: 'requestTimeout',
  413: 'payloadTooLarge',
  414: 'uriTooLong',
  415: 'unsupportedMediaType',
  417: 'expectationFailed',
  431: 'headersTooLarge',
};

/**
 * The item of every 500: the model's error array like every other error answer (the model's own
 * `serverError` is a bare string, which no client can tell apart from a document), naming no
 * internals; the log has the failure.
 */
export const INTERNAL: ErrorItem = {
  type: 'internal',
  message: 'the service failed to answer this request (a fault of the service, logged); try again',
};

/** Sends an error answer: `items` with `status` and `headers`. */
export function send(reply: FastifyReply, status: number, items: ErrorItem[], headers: Record<string, string> = {}) {
  return reply.code(status).headers(headers).type(JSON_TYPE).send(items);
}

/** The message of a framework error in plain words: its own (cut short) when it names no framework, else the status's. */
export function plainMessage(err: FastifyError, status: number): string {
  const own = typeof err.message === 'string' ? err.message : '';
  if (own !== '' && !/fastify|FST_/i.test(own)) return clip(own);
  return `the request cannot be served: ${(http.STATUS_CODES[status] ?? 'client error').toLowerCase()}`;
}

/** The message of an error's cause, for a log line (no stack). */
const causeText = (cause: unknown): string | undefined =>
  cause === undefined ? undefined : cause instanceof Error ? cause.message : typeof cause === 'string' ? cause : 'unknown cause';

const PARAMETER_400 = 'A path or query parameter that is not valid, or a query parameter the route does not take, named in `field`';

/** A schema validation failure as fastify raises it. */
type ValidationFailure = FastifyError & { validation: ErrorObject[]; validationContext?: string };

export interface ErrorAnswerOptions {
  /** The single-document body limit (OTM_BODY_LIMIT), named by the 413. */
  readonly bodyLimit: number;
}

/** The error handler of the app (see above). */
export const errorAnswers = fp<ErrorAnswerOptions>(
  // eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
  async (app: FastifyInstance, opts) => {
    // A store that is down fails every request that needs it: one line a while, not a stack a request.
    const unavailableLog = new ThrottledLog(10_000);
    // A route whose parameters have a schema may refuse them: its 400, unless it declares its own.
    app.addHook('onRoute', (route: RouteOptions) => {
      const schema = route.schema;
      if (schema === undefined || (schema.querystring === undefined && schema.params === undefined)) return;
      const own = (schema.response ?? {}) as Record<string, unknown>;
      if (!('400' in own)) route.schema = { ...schema, response: { ...own, '400': badRequest(PARAMETER_400) } };
    });
    app.setErrorHandler((thrown: FastifyError | OtmServiceError | AdapterError, req, reply) => {
      // A store's failure that reached the edge as it was: a refusal for lack of room is a 503 naming
      // it (core/storage.ts), any other failure a retry can help a 503, the rest a fault (500).
      let err: FastifyError | OtmServiceError;
      if (thrown instanceof StorageRefused) err = storageAnswer(thrown);
      else if (thrown instanceof AdapterError) {
        if (!thrown.retryable) {
          req.log.error({ err: thrown }, 'request failed');
          return send(reply, 500, [INTERNAL]);
        }
        err = unavailable(`the ${thrown.adapter} store cannot take this request now: ${thrown.message}`, 5, thrown);
      } else if ((thrown as Partial<ValidationFailure>).validation !== undefined) {
        const { validation, validationContext: context = 'request' } = thrown as ValidationFailure;
        // A path that another route serves as it is, not as this route's parameter (DELETE
        // /api/v5/vehicles/positions): the methods that path has (methods.ts).
        if (context === 'params') {
          const allowed = app.declaredMethods(req.url.split('?')[0]!, true);
          if (allowed.length > 0) return app.methodNotAllowed(req, reply, allowed);
        }
        const schema = (req.routeOptions.schema as Record<string, unknown> | undefined)?.[
          context === 'querystring' ? 'querystring' : context
        ];
        err = schemaRefusal(validation, context, schema as { properties?: Record<string, unknown> } | undefined, req.method, req.url);
      } else err = thrown;
      if (err instanceof OtmServiceError) {
        if (err.status >= 500 && err.retryable) {
          const { log, skipped } = unavailableLog.take(`${err.code} ${req.routeOptions.url ?? ''}`);
          if (log)
            req.log.warn({ code: err.code, err: err.message, cause: causeText(err.cause), alsoFailedSince: skipped }, 'request failed');
        } else if (err.status >= 500) req.log.error({ err, code: err.code }, 'request failed');
        if (err.status === 500) return send(reply, 500, [INTERNAL]);
        return send(reply, err.status, err.items, err.headers);
      }
      switch (err.code) {
        case 'FST_ERR_CTP_INVALID_MEDIA_TYPE': {
          const ct = req.headers['content-type'];
          const message =
            jsonMediaType(ct) === 'ndjson'
              ? 'NDJSON is taken by the bulk route (POST /api/v5/bulk/<kind>) only: send one JSON document (Content-Type: application/json)'
              : `the body must be JSON (Content-Type: application/json), got '${ct === undefined ? 'none' : clip(ct)}'`;
          return send(reply, 415, [{ type: 'unsupportedMediaType', message }]);
        }
        case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
          return send(reply, 400, [{ type: 'invalidJson', message: 'the Content-Length does not match the body' }]);
        case 'FST_ERR_CTP_BODY_TOO_LARGE':
          return send(reply, 413, [{ type: 'payloadTooLarge', message: `the body is larger than the limit of ${opts.bodyLimit} bytes` }]);
        case 'FST_ERR_CTP_EMPTY_JSON_BODY':
          return send(reply, 400, [{ type: 'invalidJson', message: 'the request body is empty; a JSON document is expected' }]);
        default:
          break;
      }
      if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
        const status = err.statusCode;
        return send(reply, status, [{ type: TYPE_OF_STATUS[status] ?? 'invalidJson', message: plainMessage(err, status) } as ErrorItem]);
      }
      req.log.error({ err }, 'request failed');
      return send(reply, 500, [INTERNAL]);
    });
  },
  { name: 'otm-error-answers', dependencies: ['otm-methods'] },
);
