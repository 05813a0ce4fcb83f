/**
 * The HTTP plumbing every role shares: JSON bodies, bearer authentication, one error format,
 * 404/405/413/415 answers, /healthz and /readyz. The ingress and query services add their routes.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { OtmServiceError, TokenVerifier, parseJsonBody, registry, type ErrorItem, type Logger, type Principal, type Scope } from '@otm/core';
import { openApiDocument } from './openapi.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | undefined;
    /** A JSON body as it came (bytes, and the text decoded from them), beside its parsed value in `body`. */
    sentBody: { readonly bytes: Buffer; readonly text: string } | undefined;
  }
  interface FastifyContextConfig {
    /** The scope an `/api/v5` route needs; routes without it need no authentication. */
    scope?: Scope;
  }
}

export interface HttpAppOptions {
  logger: Logger;
  verifier: TokenVerifier;
  bodyLimit: number;
  maxDepth: number;
  /** Whether every dependency answers; /readyz reports it. */
  readiness: () => Promise<Record<string, boolean>>;
}

/** The content type of every JSON answer. */
export const JSON_TYPE = 'application/json; charset=utf-8';

function send(reply: FastifyReply, status: number, items: ErrorItem[], headers: Record<string, string> = {}) {
  return reply.code(status).headers(headers).type(JSON_TYPE).send(items);
}

/**
 * Per-request log lines at debug level: at high ingest rates one info line per request would cost
 * more than the request. Failures are logged by the error handler.
 */
class QuietRequestLog extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    request.log.debug({ req: request }, 'incoming request');
  }
  override requestCompleted(_error: unknown, request: FastifyRequest, reply: FastifyReply): void {
    request.log.debug({ res: reply, responseTime: reply.elapsedTime }, 'request completed');
  }
}

const BEARER_RE = /^Bearer +([\x21-\x7e]+) *$/i;

/** Whether two strings are equal, looking at every character of equal-length strings (no early exit). */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

export function createHttpApp(opts: HttpAppOptions): FastifyInstance {
  const app: FastifyInstance = Fastify({
    loggerInstance: opts.logger as FastifyBaseLogger,
    bodyLimit: opts.bodyLimit,
    logController: new QuietRequestLog(),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: 200 },
  });

  app.decorateRequest('principal', undefined);
  app.decorateRequest('sentBody', undefined);

  // Only JSON is accepted; any other content type gets fastify's 415, mapped below.
  app.removeAllContentTypeParsers();
  // The body's bytes and text stay with the request (`sentBody`): the ingress may store a document
  // as the bytes it was sent as (services/ingress/src/item-bytes.ts).
  app.addContentTypeParser(
    /^application\/([a-z0-9.-]+\+)?json$/i,
    { parseAs: 'buffer', bodyLimit: opts.bodyLimit },
    (req, body, done) => {
      const bytes = body as Buffer;
      // A GET or DELETE sent with a JSON content type but no body has nothing to parse.
      if (bytes.length === 0 && req.method !== 'PUT' && req.method !== 'POST') return done(null, undefined);
      const text = bytes.toString('utf8');
      try {
        const value = parseJsonBody(text, opts.maxDepth);
        req.sentBody = { bytes, text };
        done(null, value);
      } catch (e) {
        done(e as Error, undefined);
      }
    },
  );

  // NDJSON (one document per line) for bulk requests: kept as text, split and parsed per line by the route.
  app.addContentTypeParser(/^application\/(x-)?ndjson$/i, { parseAs: 'string' }, (_req, body, done) => {
    done(null, { ndjson: body as unknown as string });
  });

  // The principal of the Authorization header a connection sent last. Clients keep a connection
  // open and send the same header on every request; hashing and comparing the token each time was
  // ~5 % of a GET's CPU. A header is only ever compared with what the same connection sent before
  // (never with a configured token), only a header that verified is remembered, and the comparison
  // does not stop at the first difference: a proxy may carry several clients' requests over one
  // connection, and one of them must not learn another's token from the time a request takes.
  const lastAuth = new WeakMap<object, { readonly header: string; readonly principal: Principal }>();

  // Callback style (not async): no promise per request on the hot path.
  app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const scope = req.routeOptions.config?.scope;
    if (scope === undefined) return done();
    const header = req.headers.authorization;
    const last = lastAuth.get(req.socket);
    let principal: Principal | undefined;
    let m: RegExpExecArray | null = null;
    if (last !== undefined && header !== undefined && sameText(header, last.header)) principal = last.principal;
    else {
      m = header === undefined ? null : BEARER_RE.exec(header);
      principal = m?.[1] === undefined ? undefined : opts.verifier.verify(m[1]);
      if (principal !== undefined && req.socket !== undefined) lastAuth.set(req.socket, { header: header!, principal });
    }
    if (principal === undefined) {
      const message =
        header === undefined
          ? 'this operation needs an Authorization: Bearer <token> header'
          : m === null
            ? 'the Authorization header must be: Bearer <token>'
            : 'the bearer token is not valid';
      const challenge = header === undefined ? 'Bearer realm="otm"' : 'Bearer realm="otm", error="invalid_token"';
      send(reply, 401, [{ type: 'unauthorized', message }], { 'www-authenticate': challenge });
      return;
    }
    if (!principal.scopes.has(scope)) {
      send(reply, 403, [{ type: 'forbidden', message: `this token lacks the '${scope}' scope` }], {
        'www-authenticate': `Bearer realm="otm", error="insufficient_scope", scope="${scope}"`,
      });
      return;
    }
    req.principal = principal;
    done();
  });

  app.setNotFoundHandler((req, reply) =>
    send(reply, 404, [{ type: 'notFound', message: `no resource at ${req.method} ${req.url.split('?')[0]}` }]),
  );

  app.setErrorHandler((err: FastifyError | OtmServiceError, req, reply) => {
    if (err instanceof OtmServiceError) {
      if (err.status >= 500) req.log.error({ err, code: err.code }, 'request failed');
      if (err.status === 500) return reply.code(500).type(JSON_TYPE).send(JSON.stringify('internal error'));
      return send(reply, err.status, err.items, err.headers);
    }
    switch (err.code) {
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
        if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
          return send(reply, 415, [
            {
              type: 'unsupportedMediaType',
              message: `the body must be JSON (Content-Type: application/json), got '${req.headers['content-type'] ?? 'none'}'`,
            },
          ]);
        }
        return send(reply, 400, [{ type: 'invalidJson', message: 'the Content-Length does not match the body' }]);
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return send(reply, 413, [
          { type: 'payloadTooLarge', message: `the body is larger than the limit of ${opts.bodyLimit} bytes` },
        ]);
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return send(reply, 400, [{ type: 'invalidJson', message: 'the request body is empty; a JSON document is expected' }]);
      default:
        break;
    }
    if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
      return send(reply, err.statusCode, [{ type: 'invalidJson', message: err.message }]);
    }
    req.log.error({ err }, 'request failed');
    return reply.code(500).type(JSON_TYPE).send(JSON.stringify('internal error'));
  });

  app.get('/healthz', async () => ({ status: 'ok' }));
  // This service's OpenAPI description (public, like the model's own).
  let openapi: string | undefined;
  app.get('/api/v5/openapi.json', async (_req, reply) =>
    reply.type(JSON_TYPE).send((openapi ??= JSON.stringify(openApiDocument()))),
  );
  // Prometheus metrics of this process (no token: serve it on an internal network only).
  app.get('/metrics', async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  app.get('/readyz', async (_req, reply) => {
    let checks: Record<string, boolean>;
    try {
      checks = await opts.readiness();
    } catch {
      checks = { dependencies: false };
    }
    const ready = Object.values(checks).every(Boolean);
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'unavailable', checks });
  });

  return app;
}

/**
 * Answers 405 for every method of a path that this process does not serve. `Allow` lists the
 * methods the API has for the path (`allowed`), whichever process serves them: a distributed
 * role that gets a method another role serves says so.
 */
export function methodNotAllowed(app: FastifyInstance, url: string, allowed: readonly string[], served: readonly string[] = allowed): void {
  const all = ['GET', 'HEAD', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS'];
  const others = all.filter((m) => !served.includes(m));
  if (others.length === 0) return;
  app.route({
    method: others as never,
    url,
    handler: async (req, reply) =>
      send(
        reply,
        405,
        [
          {
            type: 'methodNotAllowed',
            message: allowed.includes(req.method)
              ? `${req.method} is served by another process of this service (GET by the query service, writes by the ingress)`
              : `${req.method} is not allowed here; use ${allowed.join(', ')}`,
          },
        ],
        { allow: allowed.join(', ') },
      ),
  });
}
