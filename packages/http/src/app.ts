/**
 * The HTTP plumbing every role shares: JSON bodies, bearer authentication, one error format,
 * 404/405/413/415 answers, /healthz and /readyz. The ingress and query services add their routes.
 * Slow or greedy clients are cut off (the connection limits), and every 4xx, whether the service,
 * the router or Node's HTTP parser gives it, is the model's error array.
 */
import { hash } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, {
  LogController,
  type ConnectionError,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import {
  AdapterError,
  DEFAULT_CONNECTION_LIMITS,
  OtmServiceError,
  StorageRefused,
  storageAnswer,
  unavailable,
  ThrottledLog,
  partsDown,
  TokenVerifier,
  allows,
  invalidDocument,
  parseJsonBody,
  rateLimitFailures,
  rateLimited,
  registry,
  tooManyRequests,
  type RateBucket,
  type RateLimit,
  type RateLimiter,
  type ConnectionLimits,
  type ErrorItem,
  type Health,
  type Logger,
  type Principal,
  type Scope,
} from '@otm/core';
import type { BearerAuthenticator } from './auth.js';
import { openApiDocument } from './openapi.js';
import { clip, contentCodings, jsonMediaType } from './params.js';

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Takes `cost` more from the quotas of the request's credential and tenant (a bulk request's
     * documents beyond the one its arrival took): sets the RateLimit-* headers on `reply`, or throws
     * the 429. Nothing when no quota is set.
     */
    chargeQuota(req: FastifyRequest, reply: FastifyReply, cost: number, documents?: number): Promise<void>;
  }
  interface FastifyRequest {
    principal: Principal | undefined;
    /** A JSON body as it came (bytes, and the text decoded from them), beside its parsed value in `body`. */
    sentBody: { readonly bytes: Buffer; readonly text: string } | undefined;
  }
  interface FastifyContextConfig {
    /** The scope an `/api/v5` route needs; routes without it need no authentication. */
    scope?: Scope;
    /**
     * The kind a route is about when its path has no `:kind` parameter (e.g. `vehicles` for a
     * track): a per-kind scope (`read:vehicles`) is enough for it. Routes about no one kind need the plain scope.
     */
    kind?: string;
    /**
     * The content codings (lower case, e.g. `['gzip']`) the route decodes itself. A request with
     * any other `Content-Encoding` than these or `identity` gets 415 before its body is read.
     */
    contentEncodings?: readonly string[];
    /**
     * A route that a browser's `EventSource` opens (it cannot send headers; GET /api/v5/stream):
     * the principal of a short-lived `?ticket=`, which stands in for the Authorization header when
     * that is absent (undefined: not a valid ticket, 401). A token in the URL (`?token=`,
     * `?access_token=`) is refused with 400 there, before authentication.
     */
    ticket?: (ticket: string) => Principal | undefined;
    /** A POST that reads no body: an empty one is fine, whatever its Content-Type. */
    bodyless?: boolean;
  }
}

export interface HttpAppOptions {
  logger: Logger;
  verifier: TokenVerifier;
  /** JWTs, API keys: tried in order after the static tokens, by the first that accepts a token's shape. */
  authenticators?: readonly BearerAuthenticator[];
  bodyLimit: number;
  maxDepth: number;
  /** Whether every dependency answers; /readyz reports it. */
  readiness: () => Promise<Record<string, boolean>>;
  /**
   * The process's consumers, background loops and stores' write state (core/health.ts): /readyz is
   * 503 while one is down; /healthz once a loop has been down `stallSeconds` (OTM_STALL_SECONDS).
   */
  health?: Health;
  /** Seconds a loop may stay down before /healthz answers 503 (default 120). */
  stallSeconds?: number;
  /** Timeouts and the cap on connections; each one not given is the configuration's default. */
  connections?: Partial<ConnectionLimits>;
  /** Request-rate quotas (OTM_RATE_LIMIT, OTM_TENANT_RATE_LIMIT); none when both limits are unset. */
  quotas?: Quotas;
}

/** The quotas of the authenticated routes, and the limiter that counts them (in-process, or Redis). */
export interface Quotas {
  /** Per credential (Principal.quotaKey, else Principal.id). */
  readonly perCredential?: RateLimit;
  /** Per tenant, all its credentials together. */
  readonly perTenant?: RateLimit;
  readonly limiter: RateLimiter;
}

/** The content type of every JSON answer. */
export const JSON_TYPE = 'application/json; charset=utf-8';

/** The item type of a 4xx answer that has no more precise one (400s use the model's own types). */
const TYPE_OF_STATUS: Record<number, ErrorItem['type']> = {
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
const INTERNAL: ErrorItem = {
  type: 'internal',
  message: 'the service failed to answer this request (a fault of the service, logged); try again',
};

function send(reply: FastifyReply, status: number, items: ErrorItem[], headers: Record<string, string> = {}) {
  return reply.code(status).headers(headers).type(JSON_TYPE).send(items);
}

/** A whole HTTP/1.1 answer with the model's error array, for a socket no response object stands for; the connection then closes. */
function rawAnswer(status: number, item: ErrorItem): string {
  const body = JSON.stringify([item]);
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\nContent-Type: ${JSON_TYPE}\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

/** The answer to a request Node's HTTP parser refused, or that did not arrive in time. */
function clientErrorAnswer(err: ConnectionError & { reason?: string }, limits: ConnectionLimits): [number, ErrorItem] {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [
        408,
        {
          type: 'requestTimeout',
          message: `the request did not arrive in time: its headers must come within ${limits.headersTimeoutMs} ms and the whole request within ${limits.requestTimeoutMs} ms`,
        },
      ];
    case 'HPE_HEADER_OVERFLOW':
      return [
        431,
        { type: 'headersTooLarge', message: `the request line and headers are larger than the limit of ${http.maxHeaderSize} bytes` },
      ];
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return [413, { type: 'payloadTooLarge', message: 'the chunk extensions of the body are too large' }];
    case 'HPE_PAUSED_H2_UPGRADE':
      return [400, { type: 'invalidJson', message: 'the service speaks HTTP/1.1 only' }];
    default: {
      const reason =
        typeof err.reason === 'string' && err.reason !== '' ? ` (${clip(err.reason.charAt(0).toLowerCase() + err.reason.slice(1))})` : '';
      return [400, { type: 'invalidJson', message: `the request is not valid HTTP/1.1${reason}` }];
    }
  }
}

/** Transfer codings the service reads: Node's parser decodes `chunked`; `identity` changes nothing. */
function readableTransferCodings(value: string): boolean {
  if (value === 'chunked') return true;
  return value.split(',').every((c) => {
    const coding = c.trim().toLowerCase();
    return coding === 'chunked' || coding === 'identity';
  });
}

/**
 * The refusal of a request whose body the service cannot read as sent: a transfer coding other
 * than chunked, a content coding the route does not decode, a JSON body in another charset than
 * UTF-8; or of an HTTP/1.1 request without Host. Undefined when none applies.
 */
function framingRefusal(req: FastifyRequest): [number, ErrorItem] | undefined {
  const headers = req.headers;
  const te = headers['transfer-encoding'];
  if (te !== undefined && !readableTransferCodings(te)) {
    return [
      415,
      {
        type: 'unsupportedMediaType',
        message: `Transfer-Encoding '${clip(te)}' is not supported: send the body as it is, with a Content-Length or chunked`,
      },
    ];
  }
  const ce = headers['content-encoding'];
  if (ce !== undefined) {
    const codings = contentCodings(ce);
    const accepted = req.routeOptions.config?.contentEncodings ?? [];
    if (codings.length > 1 || (codings.length === 1 && !accepted.includes(codings[0]!))) {
      const allowed = accepted.length === 0 ? 'send the body without a content coding' : `use ${accepted.join(' or ')}, or none`;
      return [415, { type: 'unsupportedMediaType', message: `Content-Encoding '${clip(ce)}' is not supported here: ${allowed}` }];
    }
  }
  const ct = headers['content-type'];
  if (ct !== undefined && req.method !== 'GET' && req.method !== 'HEAD' && jsonMediaType(ct) === 'unsupported-charset') {
    return [415, { type: 'unsupportedMediaType', message: `the body must be UTF-8 (charset=utf-8, or no charset), got '${clip(ct)}'` }];
  }
  if (headers.host === undefined && req.raw.httpVersion === '1.1') {
    return [400, { type: 'invalidJson', message: 'an HTTP/1.1 request needs a Host header' }];
  }
  return undefined;
}

/** The message of a framework error in plain words: its own (cut short) when it names no framework, else the status's. */
function plainMessage(err: FastifyError, status: number): string {
  const own = typeof err.message === 'string' ? err.message : '';
  if (own !== '' && !/fastify|FST_/i.test(own)) return clip(own);
  return `the request cannot be served: ${(http.STATUS_CODES[status] ?? 'client error').toLowerCase()}`;
}

/** Strict UTF-8: a body that is not UTF-8 is refused, never read with replacement characters. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** How often Node looks for requests past their headers or request timeout: a fraction of the shorter one, at most a second. */
const checkingInterval = (limits: ConnectionLimits): number =>
  Math.max(50, Math.min(1000, Math.floor(Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 4)));

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

/** Longest path segment (a kind, an id) the router takes; a longer one is a 414. */
const MAX_PARAM_LENGTH = 200;

/** The kind a request is about: its `:kind` path parameter, or its route's `kind`; undefined for none. */
function kindOf(req: FastifyRequest): string | undefined {
  const k = (req.params as { kind?: unknown } | undefined)?.kind;
  return typeof k === 'string' ? k : req.routeOptions.config?.kind;
}

/** Whether two strings are equal, looking at every character of equal-length strings (no early exit). */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

export function createHttpApp(opts: HttpAppOptions): FastifyInstance {
  const limits: ConnectionLimits = { ...DEFAULT_CONNECTION_LIMITS, ...opts.connections };
  const app: FastifyInstance = Fastify({
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- needed: it makes fastify's logger type parameter the base one
    loggerInstance: opts.logger as FastifyBaseLogger,
    bodyLimit: opts.bodyLimit,
    logController: new QuietRequestLog(),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: MAX_PARAM_LENGTH },
    // Node counts both timeouts from the start of a request (of the connection, for its first one),
    // however the client spreads its bytes, and looks for requests past them every
    // `connectionsCheckingInterval`: kept short, so that a slow client is cut off soon after. A
    // kept-alive connection waiting for its next request is in no request: neither timeout counts
    // its wait, nor does the idle timeout (`connectionTimeout`, the socket's timeout), which Node
    // replaces by `keepAliveTimeout` plus 1 s once an answer is written, until the next request's
    // headers arrive. So only the keep-alive timeout closes an idle kept-alive connection, and a
    // proxy in front must close its idle connections first (deploy/nginx/otm.conf).
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    connectionTimeout: limits.idleTimeoutMs,
    http: {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      connectionsCheckingInterval: checkingInterval(limits),
      // Node answers a missing Host with an empty 400; the onRequest hook below answers it instead.
      requireHostHeader: false,
    },
    // Requests Node's parser refuses, or that time out: the model's error array, then the connection closes.
    clientErrorHandler: (err: ConnectionError, socket: Socket) => {
      if (err.code === 'ECONNRESET' || socket.destroyed) return;
      app.log.debug({ err }, 'client error');
      // As Node does: no answer when one has begun on this connection already.
      const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
      if (socket.writable && (inFlight == null || !inFlight.headersSent)) {
        const [status, item] = clientErrorAnswer(err, limits);
        socket.write(rawAnswer(status, item));
      }
      socket.destroy(err);
    },
    // Requests the router refuses before any route or hook: a malformed or too long path. A
    // callback whose value nobody reads: the reply (a thenable) is sent, not returned.
    frameworkErrors: (err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
      if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') {
        send(reply, 414, [{ type: 'uriTooLong', message: `a segment of the path is longer than ${MAX_PARAM_LENGTH} characters` }]);
        return;
      }
      if (err.code === 'FST_ERR_BAD_URL') {
        send(reply, 400, [
          { type: 'invalidJson', message: `the path holds a malformed percent-encoding: '${clip(req.url.split('?')[0]!)}'` },
        ]);
        return;
      }
      const status = typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
      if (status === 500) {
        req.log.error({ err }, 'request failed');
        send(reply, 500, [INTERNAL]);
        return;
      }
      send(reply, status, [{ type: TYPE_OF_STATUS[status] ?? 'invalidJson', message: plainMessage(err, status) } as ErrorItem]);
    },
  });

  const server = app.server;
  server.maxConnections = limits.maxConnections;
  // Nothing moved on a connection for OTM_IDLE_TIMEOUT_MS: close it, unless the whole request came
  // and its answer has not begun (the service, not the client, is taking its time).
  server.on('timeout', (socket: Socket) => {
    const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (res != null && res.req.complete && !res.headersSent) return;
    socket.destroy();
  });
  // `Expect` other than 100-continue (which Node answers itself).
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const body = JSON.stringify([
      { type: 'expectationFailed', message: `the service meets only 'Expect: 100-continue', got '${clip(String(req.headers.expect))}'` },
    ] satisfies ErrorItem[]);
    res.writeHead(417, { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(body), connection: 'close' }).end(body);
  });

  app.decorateRequest('principal', undefined);
  app.decorateRequest('sentBody', undefined);

  // Only JSON is accepted, with or without parameters (a charset other than UTF-8 is refused by
  // the onRequest hook below); any other content type, NDJSON too, gets the framework's 415, mapped
  // below. The bulk route has parsers of its own, NDJSON among them.
  app.removeAllContentTypeParsers();
  // The body's bytes and text stay with the request (`sentBody`): the ingress may store a document
  // as the bytes it was sent as (services/ingress/src/item-bytes.ts). A leading byte order mark is
  // dropped from both.
  app.addContentTypeParser(
    /^application\/([a-z0-9.-]+\+)?json(;|$)/i,
    { parseAs: 'buffer', bodyLimit: opts.bodyLimit },
    (req, body, done) => {
      let bytes = body as Buffer;
      // A GET or DELETE sent with a JSON content type but no body has nothing to parse.
      if (bytes.length === 0 && ((req.method !== 'PUT' && req.method !== 'POST') || req.routeOptions.config?.bodyless === true)) {
        return done(null, undefined);
      }
      if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) bytes = bytes.subarray(3);
      let text: string;
      try {
        text = utf8.decode(bytes);
      } catch {
        return done(invalidDocument([{ type: 'invalidJson', message: 'the body is not valid UTF-8' }]), undefined);
      }
      try {
        const value = parseJsonBody(text, opts.maxDepth);
        req.sentBody = { bytes, text };
        done(null, value);
      } catch (e) {
        done(e as Error, undefined);
      }
    },
  );

  // Callback style (not async): no promise per request on the hot path. Most requests carry none
  // of the headers looked at, or only a plain JSON content type.
  app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const h = req.headers;
    if (h['transfer-encoding'] === undefined && h['content-encoding'] === undefined && h.host !== undefined) {
      const ct = h['content-type'];
      if (ct === undefined || ct === 'application/json') return done();
    }
    const refusal = framingRefusal(req);
    if (refusal === undefined) return done();
    send(reply, refusal[0], [refusal[1]]);
  });

  // The principal of the Authorization header a connection sent last. Clients keep a connection
  // open and send the same header on every request; hashing and comparing the token each time was
  // ~5 % of a GET's CPU. A header is only ever compared with what the same connection sent before
  // (never with a configured token), only a header that verified is remembered, and the comparison
  // does not stop at the first difference: a proxy may carry several clients' requests over one
  // connection, and one of them must not learn another's token from the time a request takes.
  const lastAuth = new WeakMap<object, { readonly header: string; readonly principal: Principal }>();
  const authenticators = opts.authenticators ?? [];

  /** The one place scopes are checked (tickets aside): the route's scope, for the kind the request is about. */
  const authorized = (req: FastifyRequest, reply: FastifyReply, done: () => void, principal: Principal, scope: Scope): void => {
    if (!allows(principal.scopes, scope, kindOf(req))) {
      const kind = kindOf(req);
      send(
        reply,
        403,
        [{ type: 'forbidden', message: `this token lacks the '${scope}' scope${kind === undefined ? '' : ` (or '${scope}:${kind}')`}` }],
        {
          'www-authenticate': `Bearer realm="otm", error="insufficient_scope", scope="${scope}"`,
        },
      );
      return;
    }
    req.principal = principal;
    done();
  };

  // Callback style (not async): no promise per request on the hot path.
  app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const scope = req.routeOptions.config?.scope;
    if (scope === undefined) return done();
    const header = req.headers.authorization;
    const ticket = req.routeOptions.config?.ticket;
    if (ticket !== undefined) {
      const q = (req.query ?? {}) as Record<string, unknown>;
      const inUrl = ['token', 'access_token'].find((name) => q[name] !== undefined);
      if (inUrl !== undefined) {
        send(reply, 400, [
          {
            type: 'invalidField',
            field: inUrl,
            message:
              'a token never goes in a URL (URLs are logged): send it in the Authorization header, or get a stream ticket from POST /api/v5/stream/tickets and pass ?ticket=',
          },
        ]);
        return;
      }
      if (header === undefined && q.ticket !== undefined) {
        const principal = typeof q.ticket === 'string' ? ticket(q.ticket) : undefined;
        if (principal === undefined) {
          send(reply, 401, [{ type: 'unauthorized', message: 'the stream ticket is not valid or has expired: get a new one' }], {
            'www-authenticate': 'Bearer realm="otm", error="invalid_token"',
          });
          return;
        }
        if (!allows(principal.scopes, scope, kindOf(req))) {
          send(reply, 403, [{ type: 'forbidden', message: `this ticket lacks the '${scope}' scope` }]);
          return;
        }
        req.principal = principal;
        return done();
      }
    }
    const last = lastAuth.get(req.socket);
    let principal: Principal | undefined;
    let m: RegExpExecArray | null = null;
    if (last !== undefined && header !== undefined && sameText(header, last.header)) principal = last.principal;
    else {
      m = header === undefined ? null : BEARER_RE.exec(header);
      principal = m?.[1] === undefined ? undefined : opts.verifier.verify(m[1]);
      // Only static tokens are remembered: a JWT expires and an API key may be revoked.
      if (principal !== undefined && req.socket !== undefined) lastAuth.set(req.socket, { header: header!, principal });
    }
    const token = m?.[1];
    if (principal === undefined && token !== undefined) {
      const other = authenticators.find((a) => a.accepts(token));
      if (other !== undefined) {
        other.verify(token).then(
          (outcome) => {
            if ('principal' in outcome) return authorized(req, reply, done, outcome.principal, scope);
            if (outcome.status === 503)
              return void send(reply, 503, [{ type: 'unavailable', message: outcome.message }], { 'retry-after': '5' });
            send(reply, 401, [{ type: 'unauthorized', message: outcome.message }], {
              'www-authenticate': 'Bearer realm="otm", error="invalid_token"',
            });
          },
          (err: unknown) => {
            req.log.error({ err }, 'authentication failed');
            send(reply, 503, [{ type: 'unavailable', message: 'the bearer token cannot be checked for now: try again shortly' }], {
              'retry-after': '5',
            });
          },
        );
        return;
      }
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
    authorized(req, reply, done, principal, scope);
  });

  installQuotas(app, opts.quotas, opts.logger);

  app.setNotFoundHandler((req, reply) =>
    send(reply, 404, [{ type: 'notFound', message: `no resource at ${req.method} ${clip(req.url.split('?')[0]!)}` }]),
  );

  // A store that is down fails every request that needs it: one line a while, not a stack a request.
  const unavailableLog = new ThrottledLog(10_000);
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
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
        if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
          const ct = req.headers['content-type'];
          const message =
            jsonMediaType(ct) === 'ndjson'
              ? 'NDJSON is taken by the bulk route (POST /api/v5/bulk/<kind>) only: send one JSON document (Content-Type: application/json)'
              : `the body must be JSON (Content-Type: application/json), got '${ct === undefined ? 'none' : clip(ct)}'`;
          return send(reply, 415, [{ type: 'unsupportedMediaType', message }]);
        }
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

  // Liveness: 503 once a loop has been down longer than the stall bound (a restart is the cure).
  const stallSeconds = opts.stallSeconds ?? 120;
  app.get('/healthz', async (_req, reply) => {
    const stalled = opts.health?.stalled(stallSeconds) ?? [];
    if (stalled.length === 0) return { status: 'ok' };
    return reply.code(503).send({ status: 'stalled', stallSeconds, down: stalled });
  });
  // This service's OpenAPI description (public, like the model's own).
  let openapi: string | undefined;
  app.get('/api/v5/openapi.json', async (_req, reply) => reply.type(JSON_TYPE).send((openapi ??= JSON.stringify(openApiDocument()))));
  // Prometheus metrics of this process (no token: serve it on an internal network only).
  app.get('/metrics', async (_req, reply) => {
    if (opts.health) {
      const down = opts.health.down();
      for (const kind of ['loop', 'store'] as const) partsDown.set({ kind }, down.filter((p) => p.kind === kind).length);
    }
    return reply.type(registry.contentType).send(await registry.metrics());
  });
  app.get('/readyz', async (_req, reply) => {
    let checks: Record<string, boolean>;
    try {
      checks = await opts.readiness();
    } catch {
      checks = { dependencies: false };
    }
    // Every part down is a check of its own, named for the operator; `down` says why and since when.
    const down = opts.health?.down() ?? [];
    for (const part of down) checks[part.name] = false;
    const ready = Object.values(checks).every(Boolean);
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'unavailable', checks, ...(down.length > 0 ? { down } : {}) });
  });

  return app;
}

/** The message of an error's cause, for a log line (no stack). */
const causeText = (cause: unknown): string | undefined =>
  cause === undefined ? undefined : cause instanceof Error ? cause.message : typeof cause === 'string' ? cause : 'unknown cause';

/** What the quota of a credential counts by: never the credential, a hash of what identifies it. */
const credentialKey = (p: Principal): string | undefined => {
  const id = p.quotaKey ?? p.id;
  return id === undefined ? undefined : hash('sha256', id, 'hex').slice(0, 32);
};

/**
 * The quotas: every authenticated route (the ones with a `scope`; never /healthz, /readyz,
 * /metrics, openapi.json, the docs or the pages) takes 1 from the credential's and the tenant's
 * quota once the request is authenticated; a bulk request takes its other documents when it has
 * counted them (`chargeQuota`). Answers carry the RateLimit-* headers of the quota with the least
 * left; a refused request gets 429 `tooManyRequests` with Retry-After. When the limiter fails (Redis
 * down or slow) the request goes through: quotas fail open, counted in otm_rate_limit_failures_total
 * and logged at most once a minute.
 */
function installQuotas(app: FastifyInstance, quotas: Quotas | undefined, logger: Logger): void {
  const { perCredential, perTenant } = quotas ?? {};
  if (quotas === undefined || (perCredential === undefined && perTenant === undefined)) {
    app.decorate('chargeQuota', () => Promise.resolve());
    return;
  }
  let warnedAt = -Infinity;
  const charge = async (req: FastifyRequest, reply: FastifyReply, cost: number, documents = cost): Promise<void> => {
    const p = req.principal;
    if (p === undefined || cost <= 0) return;
    const buckets: RateBucket[] = [];
    const names: string[] = [];
    const cred = perCredential === undefined ? undefined : credentialKey(p);
    if (cred !== undefined) {
      buckets.push({ key: `${p.tenant}\0${cred}`, limit: perCredential! });
      names.push('credential');
    }
    if (perTenant !== undefined) {
      buckets.push({ key: p.tenant, limit: perTenant });
      names.push('tenant');
    }
    if (buckets.length === 0) return;
    let d;
    try {
      d = await quotas.limiter.take(buckets, cost);
    } catch (err) {
      rateLimitFailures.inc();
      const now = Date.now();
      if (now - warnedAt >= 60_000) {
        warnedAt = now;
        logger.warn({ err }, 'the quota check failed: requests go through unchecked until it works again');
      }
      return;
    }
    const limit = buckets[d.index]!.limit;
    const window = Math.ceil(limit.periodMs / 1000);
    const headers: Record<string, string> = {
      'ratelimit-limit': String(limit.count),
      'ratelimit-remaining': String(d.remaining),
      'ratelimit-reset': String(Math.ceil(d.resetMs / 1000)),
      'ratelimit-policy': `${limit.count};w=${window}`,
    };
    if (d.allowed) {
      reply.headers(headers);
      return;
    }
    const which = names[d.index]!;
    rateLimited.inc({ limit: which });
    const quota = `${which === 'tenant' ? "the tenant's quota (OTM_TENANT_RATE_LIMIT)" : "this credential's quota (OTM_RATE_LIMIT)"} of ${limit.count} a ${window === 60 ? 'minute' : window === 1 ? 'second' : `${window} s`}`;
    if (d.retryAfterMs === Infinity || documents > limit.count) {
      // A bulk request of more documents than one period's worth: no wait would let it through.
      headers['retry-after'] = String(window);
      throw tooManyRequests(
        `this request counts ${documents} documents, more than ${quota} lets through at once: send smaller bulk requests`,
        headers,
      );
    }
    headers['retry-after'] = String(Math.max(1, Math.ceil(d.retryAfterMs / 1000)));
    throw tooManyRequests(`more requests than ${quota}: try again in ${headers['retry-after']} s`, headers);
  };
  app.decorate('chargeQuota', charge);
  // After the authentication hook (hooks run in the order they were added).
  app.addHook('onRequest', async (req, reply) => {
    if (req.routeOptions.config?.scope === undefined) return;
    await charge(req, reply, 1);
  });
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
    method: others,
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
