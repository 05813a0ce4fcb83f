/**
 * The pages a browser opens: the API's documentation (Swagger UI over /api/v5/openapi.json, at
 * /api/v5/docs) and the fleet page (services/web's bundle, at /). Both are static and public (no
 * token to load them; the calls they make need one) and come from the installed packages: nothing
 * is fetched from another site at run time. Served by `otm serve` and the query role.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';

const require = createRequire(import.meta.url);

/** Where the API documentation lives. */
export const DOCS_PATH = '/api/v5/docs';

const HTML_TYPE = 'text/html; charset=utf-8';

/** The files of swagger-ui-dist the page loads (nothing else of the package is served). */
const SWAGGER_FILES = new Set(['swagger-ui.css', 'swagger-ui-bundle.js', 'favicon-32x32.png', 'favicon-16x16.png']);

const DOCS_HTML = `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>OTM trip data exchange service: API documentation</title>
    <link rel="stylesheet" href="${DOCS_PATH}/swagger-ui.css" />
    <link rel="icon" type="image/png" href="${DOCS_PATH}/favicon-32x32.png" sizes="32x32" />
    <style>
      /* Readable contrast for the texts Swagger UI greys out (WCAG AA). */
      .swagger-ui .opblock .opblock-summary-path__deprecated, .swagger-ui .parameter__in, .swagger-ui .parameter__type { color: #3b4151; }
      .swagger-ui .opblock-tag small, .swagger-ui .info .base-url { color: #3b4151; }
    </style>
  </head>
  <body>
    <main id="swagger-ui" aria-label="API documentation"></main>
    <script src="${DOCS_PATH}/swagger-ui-bundle.js"></script>
    <script src="${DOCS_PATH}/init.js"></script>
  </body>
</html>
`;

/** Swagger UI pointed at this service's description; no outside validator badge. */
const DOCS_INIT = `window.ui = SwaggerUIBundle({
  url: '/api/v5/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: 'BaseLayout',
});
`;

/** The folder of the fleet page's bundle (services/web/dist), or undefined when it was not built. */
export function webBundleDir(): string | undefined {
  const dir = process.env.OTM_WEB_DIR ?? fileURLToPath(new URL('../../web/dist', import.meta.url));
  return fs.existsSync(path.join(dir, 'index.html')) ? dir : undefined;
}

export interface WebOptions {
  /** The fleet page's bundle (default: services/web/dist, when built). */
  webDir?: string;
  /** OTM_MAP_STYLE: a tile URL template (`https://.../{z}/{x}/{y}.png`) the fleet page draws under its markers. */
  mapStyle?: string;
}

export async function registerWebRoutes(app: FastifyInstance, opts: WebOptions = {}): Promise<void> {
  const swaggerDir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
  const page = async (_req: unknown, reply: import('fastify').FastifyReply) => reply.type(HTML_TYPE).send(DOCS_HTML);
  app.get(DOCS_PATH, page);
  app.get(`${DOCS_PATH}/`, page);
  app.get(`${DOCS_PATH}/init.js`, async (_req, reply) => reply.type('text/javascript; charset=utf-8').send(DOCS_INIT));
  await app.register(fastifyStatic, {
    root: swaggerDir,
    prefix: `${DOCS_PATH}/`,
    wildcard: false,
    index: false,
    decorateReply: false,
    allowedPath: (pathName) => SWAGGER_FILES.has(pathName.replace(/^\//, '')),
    globIgnore: ['**/*.map', '**/*-es-bundle*', '**/*.txt', '**/*.md', '**/package.json', '**/NOTICE', '**/LICENSE'],
  });

  const webDir = opts.webDir ?? webBundleDir();
  if (webDir === undefined) {
    app.log.warn('the fleet page is not built (services/web/dist): `npm run build` builds it; / answers 404 until then');
    return;
  }
  const config = JSON.stringify({ mapStyle: opts.mapStyle ?? null });
  app.get('/config.json', async (_req, reply) =>
    reply.type('application/json; charset=utf-8').header('cache-control', 'no-store').send(config),
  );
  await app.register(fastifyStatic, { root: webDir, prefix: '/', wildcard: false, index: ['index.html'], decorateReply: false });
}
