// Two pages, each a Vite entry: the fleet page (index.html, served at /) and the API docs
// (docs.html, served at /api/v5/docs by services/otm/src/web.ts). Their own code in a chunk each;
// Swagger UI (swagger-ui-dist) in a chunk of its own, which only the docs page loads; Leaflet,
// topojson-client and world-atlas (everything else from node_modules) in the `vendor` chunk, so
// that the fleet page's code is measured apart (docs/PERFORMANCE.md, "Fleet page") and the vendor
// chunks stay cached when only the pages change.
import { defineConfig } from 'vite';

export default defineConfig({
  build: {
    // Swagger UI's own bundle is 1.5 MB minified as it comes (swagger-ui-dist): no warning for that chunk.
    chunkSizeWarningLimit: 1600,
    rolldownOptions: {
      // Its warning that plugins took much of the build's time names Vite's own CSS and HTML steps: nothing to act on.
      checks: { bundlerTimings: false },
      input: { index: 'index.html', docs: 'docs.html' },
      output: {
        codeSplitting: {
          // The same priority: the first group that matches a module takes it.
          groups: [
            { name: 'swagger-ui', test: /[\\/]node_modules[\\/]swagger-ui-dist[\\/]/ },
            { name: 'vendor', test: /[\\/]node_modules[\\/]/ },
          ],
        },
      },
    },
  },
});
