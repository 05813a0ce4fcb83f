/**
 * Paths and methods: a request for a path no route declares is a 404; for a path some route
 * declares, but with another method (TRACE, PATCH, ...), a 405 whose `Allow` lists the methods
 * declared for it; a path segment longer than the router takes is a 414. A plugin of the root
 * (fastify-plugin) that learns the routes as they are added, whichever plugin adds them.
 *
 * A process that serves part of the API (the ingress, the query role) declares the routes of the
 * other part as served elsewhere (`servedElsewhere`): their methods are in `Allow`, and a request
 * for one of them is told which process serves it.
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyPluginOptions, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { send } from './errors.js';
import { clip } from './params.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The methods routes declare for `path` (a request's path, no query), in the usual order; with `staticOnly`, only routes without path parameters. */
    declaredMethods(path: string, staticOnly?: boolean): string[];
    /** Answers the 405 of a method that `path` does not have here, with `Allow: <allowed>`. */
    methodNotAllowed(req: FastifyRequest, reply: FastifyReply, allowed: readonly string[]): FastifyReply;
  }
  interface FastifyContextConfig {
    /** A route of the API that another process of the service serves (see above). */
    servedElsewhere?: boolean;
  }
}

/** Longest path segment (a kind, an id) the router takes; a longer one is a 414. */
export const MAX_PARAM_LENGTH = 200;

/** The order of methods in `Allow`. */
const ORDER = ['GET', 'HEAD', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS'];
const rank = (m: string): number => (ORDER.includes(m) ? ORDER.indexOf(m) : ORDER.length);

interface Declared {
  readonly method: string;
  readonly url: string;
  readonly pattern: RegExp;
  readonly static: boolean;
}

/** A route's URL as a pattern of request paths: `:name` one segment, `*` the rest. */
function patternOf(url: string): RegExp {
  const parts = url.split('/').map((seg) => {
    if (seg.startsWith(':')) return '[^/]+';
    if (seg === '*') return '.*';
    return seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  });
  return new RegExp(`^${parts.join('/')}$`);
}

export const methods = fp(
  // eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
  async (app: FastifyInstance) => {
    const declared: Declared[] = [];
    app.addHook('onRoute', (route: RouteOptions) => {
      const list = Array.isArray(route.method) ? route.method : [route.method];
      const pattern = patternOf(route.url);
      const isStatic = !route.url.includes(':') && !route.url.includes('*');
      for (const method of list) declared.push({ method, url: route.url, pattern, static: isStatic });
    });

    app.decorate('declaredMethods', (path: string, staticOnly = false): string[] => {
      const found = new Set<string>();
      for (const d of declared) if ((!staticOnly || d.static) && d.pattern.test(path)) found.add(d.method);
      return [...found].sort((a, b) => rank(a) - rank(b));
    });

    app.decorate('methodNotAllowed', (req: FastifyRequest, reply: FastifyReply, allowed: readonly string[]): FastifyReply => {
      const message = allowed.includes(req.method)
        ? `${req.method} is served by another process of this service (GET by the query service, writes by the ingress)`
        : `${req.method} is not allowed here; use ${allowed.join(', ')}`;
      return send(reply, 405, [{ type: 'methodNotAllowed', message }], { allow: allowed.join(', ') });
    });

    app.setNotFoundHandler((req, reply) => {
      const path = req.url.split('?')[0]!;
      // A segment too long for the router under a path the API has (a kind, an id): 414; elsewhere a 404.
      const segments = path.split('/');
      const long = segments.findIndex((segment) => segment.length > MAX_PARAM_LENGTH);
      const under = `${segments.slice(0, long).join('/')}/`;
      if (long > 1 && declared.some((d) => d.url.startsWith(under))) {
        return send(reply, 414, [{ type: 'uriTooLong', message: `a segment of the path is longer than ${MAX_PARAM_LENGTH} characters` }]);
      }
      const allowed = app.declaredMethods(path);
      if (allowed.length > 0) return app.methodNotAllowed(req, reply, allowed);
      return send(reply, 404, [{ type: 'notFound', message: `no resource at ${req.method} ${clip(path)}` }]);
    });
  },
  { name: 'otm-methods' },
);

/**
 * `plugin`'s routes as served by another process: each answers 405 naming that process, before
 * authentication, and none is in this process's OpenAPI document. The plugin gets no options: its
 * routes' handlers never run, and it must not use its options when it registers them.
 */
export function servedElsewhere<Options extends FastifyPluginOptions>(plugin: FastifyPluginAsync<Options>): FastifyPluginAsync {
  return async (app) => {
    app.addHook('onRoute', (route: RouteOptions) => {
      route.config = { servedElsewhere: true };
      route.schema = { hide: true };
      route.onRequest = undefined;
      route.preValidation = undefined;
      route.preHandler = undefined;
      route.handler = (req, reply) => app.methodNotAllowed(req, reply, app.declaredMethods(req.url.split('?')[0]!));
    });
    await app.register(plugin as unknown as FastifyPluginAsync);
  };
}
