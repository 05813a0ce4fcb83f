/**
 * The API documentation page (/api/v5/docs): Swagger UI (swagger-ui-dist, bundled) over this
 * service's /api/v5/openapi.json, with no outside validator badge, its `$ref` resolution bounded
 * (bounded-refs.ts) and its markup made accessible (accessibility.ts, style.css).
 */
import 'swagger-ui-dist/swagger-ui.css';
import './style.css';
import favicon from 'swagger-ui-dist/favicon-32x32.png';
import SwaggerUIBundle from 'swagger-ui-dist/swagger-ui-bundle.js';
import { nameFieldsAsRendered, PlainOperationPaths } from './accessibility.js';
import { BoundedRefs } from './bounded-refs.js';

const icon = Object.assign(document.createElement('link'), { rel: 'icon', type: 'image/png', href: favicon });
icon.setAttribute('sizes', '32x32');
document.head.append(icon);

const root = document.getElementById('swagger-ui');
if (root === null) throw new Error('#swagger-ui is missing');
nameFieldsAsRendered(root);
(window as { ui?: unknown }).ui = SwaggerUIBundle({
  url: '/api/v5/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  plugins: [PlainOperationPaths, BoundedRefs],
  layout: 'BaseLayout',
});
