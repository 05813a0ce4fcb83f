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
      /* The schemas and examples of the model's large operations (vehicles, trips, events): numbers in
         highlighted JSON (3.45:1 on its #333), format badges (2.38:1), secondary and muted texts, "deprecated". */
      .swagger-ui .microlight span[style*="211, 99, 99"] { color: #ee8f8f !important; }
      .swagger-ui .json-schema-2020-12__constraint--string { background-color: #8a5a00; }
      .swagger-ui .json-schema-2020-12-keyword__name--secondary, .swagger-ui .json-schema-2020-12-keyword__value,
      .swagger-ui .json-schema-2020-12-keyword__value--secondary, .swagger-ui .json-schema-2020-12-keyword--description,
      .swagger-ui .json-schema-2020-12-json-viewer__name--secondary, .swagger-ui .json-schema-2020-12-json-viewer__value,
      .swagger-ui .json-schema-2020-12-json-viewer__value--secondary { color: #4a4a4a; }
      .swagger-ui .json-schema-2020-12__attribute--muted, .swagger-ui .json-schema-2020-12-keyword__name--extension,
      .swagger-ui .json-schema-2020-12-keyword__value--extension, .swagger-ui .json-schema-2020-12-json-viewer__name--extension,
      .swagger-ui .json-schema-2020-12-json-viewer__value--extension { color: #505050; }
      .swagger-ui .json-schema-2020-12__attribute--warning { color: #a00000; }
      .swagger-ui .json-schema-2020-12-keyword__value--warning, .swagger-ui .json-schema-2020-12-json-viewer__value--warning { color: #a00000; border-color: #a00000; }
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
 *   An example that scrolls (a long one) is made focusable, so that the keyboard can scroll it.
 *
 * And its `$ref` resolution is bounded (`BoundedRefs`). Opening an operation (or a schema of the
 * Schemas section) makes Swagger UI resolve that part of the document (`fn.resolveSubtree`);
 * for OpenAPI 3.1 its resolver (swagger-client's ApiDOM dereference) inlines every `$ref` along
 * every path that does not repeat a schema, again for each path, with nothing shared. The model's
 * schemas all reach one another (a vehicle's `contextEvents` are events, an event names vehicles,
 * trips, actions, locations, ...: 180 of the 193 schemas are reachable from any kind), so those
 * paths are tens of millions and opening GET /api/v5/vehicles/{UUID} kept the page busy for
 * minutes (packages/http/src/openapi.ts; docs/web.md has the figures). Our `resolveSubtree`
 * replaces swagger-client's: it inlines the `$ref`s of the part asked for two levels deep, then
 * deeper while at most 40 schemas are inlined (the document stays as served; this is only what
 * Swagger UI draws and samples from). A `$ref` left, or one that would repeat a schema of its
 * own path, is inlined when Swagger UI draws the schema holding it (wrapping `JSONSchema202012`:
 * a few levels under what is drawn, so that the types shown are right), so a schema can still be
 * followed to any depth; "Expand all" stops at what was inlined so (else it would walk those
 * millions of paths). The requests and answers of the kinds have examples (openapi.ts), which
 * Swagger UI shows and sends instead of samples.
 */
const DOCS_INIT = `const SCHEMA_DATA = new Set(['example', 'examples', 'default', 'const', 'enum']);
const isLocalRef = (v) => v !== null && typeof v === 'object' && typeof v.$ref === 'string' && v.$ref.startsWith('#/');
function pointerGet(doc, ref) {
  let v = doc;
  for (const raw of ref.slice(2).split('/')) {
    const k = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    if (v === null || typeof v !== 'object' || !Object.prototype.hasOwnProperty.call(v, k)) return undefined;
    v = v[k];
  }
  return v;
}
// Node with its local $refs inlined: at most maxRefs levels of them (a $ref inside an inlined
// schema is one level deeper), and only within the first \`near\` levels of objects and arrays
// under node (what is deeper is left as it is); never one that would repeat a schema of its own
// path. What changes is copied (onCopy(from, to) is told), the rest is shared. An inlined schema
// keeps its name in $$ref, as Swagger UI's own resolver marks it, and is passed to onInline.
// Data (examples, defaults, enums) is kept as it is.
function inlineRefs(spec, node, { maxRefs = Infinity, near = Infinity, onInline = () => {}, onCopy = () => {}, basePath = [] }) {
  const errors = [];
  let inlined = 0;
  const isData = (k, x) => SCHEMA_DATA.has(k) && !(k === 'examples' && x !== null && typeof x === 'object' && !Array.isArray(x));
  const walk = (v, refs, level, stack, path) => {
    if (v === null || typeof v !== 'object' || level > near) return v;
    if (Array.isArray(v)) {
      const out = v.map((x, i) => walk(x, refs, level + 1, stack, [...path, i]));
      return out.every((x, i) => x === v[i]) ? v : out;
    }
    const members = (skip) => {
      const out = {};
      let changed = skip !== undefined;
      for (const [k, x] of Object.entries(v)) {
        if (k === skip) continue;
        out[k] = isData(k, x) ? x : walk(x, refs, level + 1, stack, [...path, k]);
        if (out[k] !== x) changed = true;
      }
      if (!changed) return v;
      onCopy(v, out);
      return out;
    };
    if (!isLocalRef(v)) return members();
    const target = pointerGet(spec, v.$ref);
    if (target === undefined) {
      errors.push({ message: 'Could not resolve reference: ' + v.$ref, fullPath: [...path, '$ref'] });
      return v;
    }
    if (refs >= maxRefs || stack.includes(v.$ref)) return v;
    inlined++;
    const inner = walk(target, refs + 1, level, [...stack, v.$ref], path);
    if (inner === null || typeof inner !== 'object' || Array.isArray(inner)) return inner;
    const merged = { ...inner, ...members('$ref'), $$ref: v.$ref };
    onInline(merged);
    return merged;
  };
  return { spec: walk(node, 0, 0, [], basePath), errors, inlined };
}
const MAX_INLINED = 40;
const BoundedRefs = (system) => {
  // What Swagger UI draws: any $ref left within a few levels of a schema drawn is inlined (so the
  // types it shows for its members are right), once per schema object. A schema inlined here (not
  // by resolveSubtree) is drawn under a path of its own, so that "Expand all" above stops there.
  const prepared = new WeakMap();
  const lazy = new WeakSet();
  const prepare = (schema) => {
    if (schema === null || typeof schema !== 'object') return schema;
    let out = prepared.get(schema);
    if (out === undefined) {
      out = inlineRefs(system.specSelectors.specJS(), schema, {
        near: 6,
        onInline: (o) => lazy.add(o),
        onCopy: (from, to) => lazy.has(from) && lazy.add(to),
      }).spec;
      prepared.set(schema, out);
      if (out !== null && typeof out === 'object') prepared.set(out, out);
    }
    return out;
  };
  return {
    fn: {
      // Swagger UI calls this with the document (plain JS, with the parts resolved so far) and the
      // path of the part to resolve: its $refs are inlined two levels deep (as the samples of the
      // error answers need; 45 schemas at most in this document), then deeper while at most
      // MAX_INLINED schemas are (see web.ts). Swagger UI generates its samples from that (where
      // no example is given) and "Expand all" opens that much; the rest is drawn as it is opened.
      resolveSubtree: async (spec, path) => {
        let node = spec;
        for (const k of path) node = node === null || typeof node !== 'object' ? undefined : node[k];
        let best = inlineRefs(spec, node, { maxRefs: 2, basePath: path });
        for (let depth = 3; depth <= 20; depth++) {
          const next = inlineRefs(spec, node, { maxRefs: depth, basePath: path });
          if (next.inlined > MAX_INLINED || next.inlined === best.inlined) break;
          best = next;
        }
        return { spec: best.spec, errors: best.errors };
      },
    },
    wrapComponents: {
      JSONSchema202012: (Original, sys) => {
        const React = sys.React;
        const PathContext = sys.getComponent('JSONSchema202012PathContext')();
        return React.forwardRef((props, ref) => {
          const parentPath = React.useContext(PathContext);
          const schema = prepare(props.schema);
          const drawn = React.createElement(Original, { ...props, schema, ref });
          return lazy.has(schema) ? React.createElement(PathContext.Provider, { value: [...parentPath, '$ref', '$ref'] }, drawn) : drawn;
        });
      },
    },
  };
};
const PlainOperationPaths = () => ({
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
  // A long example scrolls: the keyboard must reach it (scrollable-region-focusable).
  for (const pre of root.querySelectorAll('.highlight-code > .microlight:not([tabindex])')) {
    if (pre.scrollHeight > pre.clientHeight || pre.scrollWidth > pre.clientWidth) pre.setAttribute('tabindex', '0');
  }
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
  plugins: [PlainOperationPaths, BoundedRefs],
  layout: 'BaseLayout',
});
`;

/** The fleet page's bundle beside the installed service (services/web/dist), or undefined when it was not built. */
export function webBundleDir(): string | undefined {
  const dir = fileURLToPath(new URL('../../web/dist', import.meta.url));
  return fs.existsSync(path.join(dir, 'index.html')) ? dir : undefined;
}

export interface WebOptions {
  /** The fleet page's bundle: OTM_WEB_DIR (config.ts checks it holds index.html); default: webBundleDir(). */
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
