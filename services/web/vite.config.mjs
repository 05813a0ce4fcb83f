// The fleet page's bundle: its own code in one chunk, Leaflet, topojson-client and world-atlas
// (everything from node_modules) in a vendor chunk of their own, so that each is measured apart
// (docs/PERFORMANCE.md, "Fleet page") and the vendor chunk stays cached when only the page changes.
import { defineConfig } from 'vite';

export default defineConfig({
  build: {
    rolldownOptions: {
      output: {
        codeSplitting: {
          groups: [{ name: 'vendor', test: /[\\/]node_modules[\\/]/ }],
        },
      },
    },
  },
});
