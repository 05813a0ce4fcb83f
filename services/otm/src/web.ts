/**
 * The pages a browser opens: the API's documentation (Swagger UI over /api/v5/openapi.json, at
 * /api/v5/docs) and the fleet page (at /). Both are entries of services/web, built by Vite into
 * services/web/dist (`npm run build`): docs.html and index.html with their assets under /assets/.
 * Both are static and public (no token to load them; the calls they make need one) and come from
 * that build: nothing is fetched from another site at run time. Served by `otm serve` and the
 * query role.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply } from 'fastify';

/** Where the API documentation lives. */
export const DOCS_PATH = '/api/v5/docs';

/** The built pages beside the installed service (services/web/dist), when OTM_WEB_DIR does not say where. */
export const DEFAULT_WEB_DIR = fileURLToPath(new URL('../../web/dist', import.meta.url));

/** The pages a build of services/web holds: the fleet page and the API docs. */
export const WEB_PAGES = ['index.html', 'docs.html'] as const;

export interface WebOptions {
  /** The built pages (OTM_WEB_DIR; default: DEFAULT_WEB_DIR). */
  webDir?: string;
  /** OTM_MAP_STYLE: a tile URL template (`https://.../{z}/{x}/{y}.png`) the fleet page draws under its markers. */
  mapStyle?: string;
}

const PAGE = { description: 'The page', content: { 'text/html': { schema: { type: 'string' } } } };

/** The pages (a fastify plugin): none, with a warning, when they are not built. */
export const webPages: FastifyPluginAsync<WebOptions> = async (app: FastifyInstance, opts) => {
  const webDir = opts.webDir ?? DEFAULT_WEB_DIR;
  const missing = WEB_PAGES.filter((page) => !fs.existsSync(path.join(webDir, page)));
  if (missing.length > 0) {
    app.log.warn(
      `the pages are not built (${missing.join(', ')} missing in ${webDir}): \`npm run build\` builds them; / and ${DOCS_PATH} answer 404 until then`,
    );
    return;
  }
  // The docs page at its own address (its assets are the build's, under /assets/), not at /docs.html.
  const docs = fs.readFileSync(path.join(webDir, 'docs.html'));
  const page = async (_req: unknown, reply: FastifyReply) => reply.type('text/html; charset=utf-8').send(docs);
  const summary = 'Extension: this description in Swagger UI (an HTML page); no token needed to load it';
  app.get(DOCS_PATH, { schema: { operationId: 'apiDocs', summary, tags: ['Operations'], response: { '200': PAGE } } }, page);
  app.get(`${DOCS_PATH}/`, { schema: { hide: true } }, page);

  const config = JSON.stringify({ mapStyle: opts.mapStyle ?? null });
  app.get(
    '/config.json',
    {
      schema: {
        operationId: 'pageConfig',
        summary: "The fleet page's settings (OTM_MAP_STYLE); no token needed",
        tags: ['Operations'],
        response: {
          '200': {
            description: 'The settings',
            content: { 'application/json': { schema: { type: 'object', properties: { mapStyle: { type: ['string', 'null'] } } } } },
          },
        },
      },
    },
    async (_req, reply) => reply.type('application/json; charset=utf-8').header('cache-control', 'no-store').send(config),
  );
  // The built files, each a route of its own, none in the OpenAPI document.
  await app.register(fastifyStatic, {
    root: webDir,
    prefix: '/',
    wildcard: false,
    index: ['index.html'],
    decorateReply: false,
    allowedPath: (pathName) => pathName !== '/docs.html',
  });
};
