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
      /* White on Swagger UI's method colours is 2 to 3.6:1: darker shades of the same hues, 5:1 or more. */
      .swagger-ui .opblock.opblock-get .opblock-summary-method { background: #1a64b0; }
      .swagger-ui .opblock.opblock-post .opblock-summary-method { background: #176f45; }
      .swagger-ui .opblock.opblock-put .opblock-summary-method { background: #a65c00; }
      .swagger-ui .opblock.opblock-delete .opblock-summary-method { background: #c41d1d; }
      .swagger-ui .opblock.opblock-patch .opblock-summary-method { background: #0b7a68; }
      .swagger-ui .opblock.opblock-head .opblock-summary-method { background: #7a10d8; }
      .swagger-ui .info .title small { background: #59606e; }
      .swagger-ui .info .title small.version-stamp { background: #4b7a00; }
      .swagger-ui .info a, .swagger-ui .info .url { color: #1f5fa8; }
      .swagger-ui .btn.authorize { color: #176f45; border-color: #176f45; }
      .swagger-ui .btn.authorize svg { fill: #176f45; }
      .swagger-ui .json-schema-2020-12-expand-deep-button { color: #555; }
      .swagger-ui .btn.execute { background: #1a64b0; border-color: #1a64b0; }
      .swagger-ui .btn.cancel { color: #c41d1d; border-color: #c41d1d; }
      .swagger-ui .download-contents { background: #59606e; }
      .swagger-ui .parameter__name.required span, .swagger-ui .parameter__name.required::after { color: #c41d1d; }
      .swagger-ui .markdown code, .swagger-ui .renderedMarkdown code { color: #6a0dad; }
    </style>
  </head>
  <body>
    <div id="swagger-ui"></div>
    <script src="${DOCS_PATH}/swagger-ui-bundle.js"></script>
    <script src="${DOCS_PATH}/init.js"></script>
  </body>
</html>
`;

/**
 * Swagger UI pointed at this service's description; no outside validator badge. Its own markup
 * (which holds the page's one `main`) is adjusted for accessibility (axe-core, docs/web.md):
 * - an operation's path is shown as text, not as a deep link: a link inside the button that opens
 *   the operation is a focusable element inside another (nested-interactive). Deep linking stays
 *   (the address follows the operation opened; a tag's name is still a link);
 * - the close button of the Authorize dialog (an icon alone) and the fields of Try it out (a
 *   parameter's value, a request body: no label of their own) get names, set as they appear.
 */
const DOCS_INIT = `const PlainOperationPaths = () => ({
  wrapComponents: {
    DeepLink: (Original, system) => (props) =>
      system.React.createElement(Original, String(props.path).includes('/') ? { ...props, enabled: false } : props),
  },
});
const root = document.getElementById('swagger-ui');
function nameFields() {
  for (const b of root.querySelectorAll('button.close-modal:not([aria-label])')) b.setAttribute('aria-label', 'Close');
  for (const row of root.querySelectorAll('tr[data-param-name]')) {
    const name = row.dataset.paramName + ' (' + row.dataset.paramIn + ' parameter)';
    for (const field of row.querySelectorAll('input:not([aria-label]), select:not([aria-label]), textarea:not([aria-label])')) {
      field.setAttribute('aria-label', name);
    }
  }
  for (const t of root.querySelectorAll('textarea.body-param__text:not([aria-label])')) t.setAttribute('aria-label', 'Request body');
}
// Once a frame at most, however many nodes React changed in it.
let queued = false;
new MutationObserver(() => {
  if (queued) return;
  queued = true;
  requestAnimationFrame(() => {
    queued = false;
    nameFields();
  });
}).observe(root, { childList: true, subtree: true });
window.ui = SwaggerUIBundle({
  url: '/api/v5/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  plugins: [PlainOperationPaths],
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
