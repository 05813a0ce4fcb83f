/**
 * Authentication: a route with a `scope` (config) needs a bearer credential (a token of
 * OTM_TOKENS, an API key, a JWT) that grants that scope for the kind the request is about; the
 * principal it gives is `req.principal`. The one place scopes are checked (tickets aside). A plugin
 * of the root (fastify-plugin), whose hook runs for every route; it also declares, for the OpenAPI
 * document, the security and the answers (401, 403, ..., answers.ts) of each route with a scope.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { allows, type Principal, type Scope, type TokenVerifier } from '@otm/core';
import { AUTHENTICATED_ANSWERS } from './answers.js';
import type { BearerAuthenticator } from './auth.js';
import { send } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | undefined;
  }
  interface FastifyContextConfig {
    /** The scope an `/api/v5` route needs; routes without it need no authentication. */
    scope?: Scope;
    /**
     * The kind a route is about when its path names it but has no parameter for it (e.g. `vehicles`
     * for a track, `trips` for PUT /api/v5/trips): a per-kind scope (`read:vehicles`) is enough for it.
     * Routes about no one kind need the plain scope.
     */
    kind?: string;
    /**
     * A route that a browser's `EventSource` opens (it cannot send headers; GET /api/v5/stream):
     * the principal of a short-lived `?ticket=`, which stands in for the Authorization header when
     * that is absent (undefined: not a valid ticket, 401). A token in the URL (`?token=`,
     * `?access_token=`) is refused with 400 there, before authentication.
     */
    ticket?: (ticket: string) => Principal | undefined;
  }
}

export interface AuthenticationOptions {
  readonly verifier: TokenVerifier;
  /** JWTs, API keys: tried in order after the static tokens, by the first that accepts a token's shape. */
  readonly authenticators?: readonly BearerAuthenticator[];
}

const BEARER_RE = /^Bearer +([\x21-\x7e]+) *$/i;

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

/** A scoped route's schema with its security and the answers of authentication, quotas and limits it does not declare itself. */
function describeAuthenticated(route: RouteOptions): void {
  const schema = route.schema ?? {};
  const own = (schema.response ?? {}) as Record<string, unknown>;
  const response: Record<string, unknown> = { ...own };
  for (const [status, answer] of Object.entries(AUTHENTICATED_ANSWERS)) if (!(status in own)) response[status] = answer;
  route.schema = { ...schema, response, security: schema.security ?? [{ BearerToken: [] }] };
}

export const authentication = fp<AuthenticationOptions>(
  // eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
  async (app: FastifyInstance, opts) => {
    app.decorateRequest('principal', undefined);
    app.addHook('onRoute', (route: RouteOptions) => {
      if (route.config?.scope !== undefined) describeAuthenticated(route);
    });

    // The principal of the Authorization header a connection sent last. Clients keep a connection
    // open and send the same header on every request; hashing and comparing the token each time was
    // ~5 % of a GET's CPU. A header is only ever compared with what the same connection sent before
    // (never with a configured token), only a header that verified is remembered, and the comparison
    // does not stop at the first difference: a proxy may carry several clients' requests over one
    // connection, and one of them must not learn another's token from the time a request takes.
    const lastAuth = new WeakMap<object, { readonly header: string; readonly principal: Principal }>();
    const authenticators = opts.authenticators ?? [];

    const authorized = (req: FastifyRequest, reply: FastifyReply, done: () => void, principal: Principal, scope: Scope): void => {
      if (!allows(principal.scopes, scope, kindOf(req))) {
        const kind = kindOf(req);
        send(
          reply,
          403,
          [{ type: 'forbidden', message: `this token lacks the '${scope}' scope${kind === undefined ? '' : ` (or '${scope}:${kind}')`}` }],
          { 'www-authenticate': `Bearer realm="otm", error="insufficient_scope", scope="${scope}"` },
        );
        return;
      }
      req.principal = principal;
      done();
    };

    /** A request of a route that takes stream tickets: true when the hook has answered or passed it on. */
    const byTicket = (req: FastifyRequest, reply: FastifyReply, done: () => void, scope: Scope): boolean => {
      const ticket = req.routeOptions.config?.ticket;
      if (ticket === undefined) return false;
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
        return true;
      }
      if (req.headers.authorization !== undefined || q.ticket === undefined) return false;
      const principal = typeof q.ticket === 'string' ? ticket(q.ticket) : undefined;
      if (principal === undefined) {
        send(reply, 401, [{ type: 'unauthorized', message: 'the stream ticket is not valid or has expired: get a new one' }], {
          'www-authenticate': 'Bearer realm="otm", error="invalid_token"',
        });
      } else if (!allows(principal.scopes, scope, kindOf(req))) {
        send(reply, 403, [{ type: 'forbidden', message: `this ticket lacks the '${scope}' scope` }]);
      } else {
        req.principal = principal;
        done();
      }
      return true;
    };

    /** A token the static tokens do not know, checked by the authenticator that takes its shape: true when one does. */
    const byAuthenticator = (req: FastifyRequest, reply: FastifyReply, done: () => void, scope: Scope, token: string): boolean => {
      const other = authenticators.find((a) => a.accepts(token));
      if (other === undefined) return false;
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
      return true;
    };

    // Callback style (not async): no promise per request on the hot path.
    app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      const scope = req.routeOptions.config?.scope;
      if (scope === undefined) return done();
      if (byTicket(req, reply, done, scope)) return;
      const header = req.headers.authorization;
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
      if (principal === undefined && token !== undefined && byAuthenticator(req, reply, done, scope, token)) return;
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
  },
  { name: 'otm-authentication', dependencies: ['otm-error-answers'] },
);
