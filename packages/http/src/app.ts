/**
 * The HTTP plumbing every role shares, as fastify plugins each in a file of its own: paths and
 * methods (404, 405 with Allow, 414; methods.ts), error answers (errors.ts), how requests arrive
 * and bodies are read (framing.ts), authentication (authentication.ts), quotas (quotas.ts), the
 * OpenAPI document (openapi.ts) and the operational endpoints (operations.ts). The roles add their
 * route groups, each a plugin that declares its routes' parameters and answers as schemas.
 * Slow or greedy clients are cut off (the connection limits), and every 4xx, whether the service,
 * the router or Node's HTTP parser gives it, is the model's error array.
 */
import Fastify, {
  LogController,
  type ConnectionError,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Socket } from 'node:net';
import type { ServerResponse } from 'node:http';
import { DEFAULT_CONNECTION_LIMITS, type ConnectionLimits, type ErrorItem, type Health, type Logger, type TokenVerifier } from '@otm/core';
import type { BearerAuthenticator } from './auth.js';
import { authentication } from './authentication.js';
import { INTERNAL, TYPE_OF_STATUS, errorAnswers, plainMessage, send } from './errors.js';
import { clientErrorAnswer, framing, rawAnswer } from './framing.js';
import { MAX_PARAM_LENGTH, methods } from './methods.js';
import { openApi } from './openapi.js';
import { operations } from './operations.js';
import { clip } from './params.js';
import { quotas, type Quotas } from './quotas.js';
import { serializerCompiler, validatorCompiler } from './validation.js';

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

/**
 * The app of one process, its plugins registered (they load when the app is ready or listens):
 * the roles register their route groups on it.
 */
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

  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  // In this order: each plugin's hooks run after those of the plugins before it, and the OpenAPI
  // document sees every route added after it.
  void app.register(methods);
  void app.register(errorAnswers, { bodyLimit: opts.bodyLimit });
  void app.register(framing, { limits, bodyLimit: opts.bodyLimit, maxDepth: opts.maxDepth });
  void app.register(authentication, { verifier: opts.verifier, ...(opts.authenticators ? { authenticators: opts.authenticators } : {}) });
  void app.register(quotas, { quotas: opts.quotas, logger: opts.logger });
  void app.register(openApi);
  void app.register(operations, {
    readiness: opts.readiness,
    ...(opts.health === undefined ? {} : { health: opts.health }),
    ...(opts.stallSeconds === undefined ? {} : { stallSeconds: opts.stallSeconds }),
  });
  return app;
}
