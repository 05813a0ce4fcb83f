/**
 * Swagger UI's `$ref` resolution, bounded: a Swagger UI plugin.
 *
 * Opening an operation (or a schema of the Schemas section) makes Swagger UI resolve that part of
 * the document (`fn.resolveSubtree`); for OpenAPI 3.1 its resolver (swagger-client's ApiDOM
 * dereference) inlines every `$ref` along every path that does not repeat a schema, again for
 * each path, with nothing shared. The model's schemas all reach one another (a vehicle's
 * `contextEvents` are events, an event names vehicles, trips, actions, locations, ...: 180 of the
 * 193 schemas are reachable from any kind), so those paths are tens of millions and opening
 * GET /api/v5/vehicles/{UUID} kept the page busy for minutes (packages/http/src/openapi.ts;
 * docs/web.md has the figures). Our `resolveSubtree` replaces swagger-client's: it inlines the
 * `$ref`s of the part asked for two levels deep, then deeper while at most 40 schemas are inlined
 * (the document stays as served; this is only what Swagger UI draws and samples from). A `$ref`
 * left, or one that would repeat a schema of its own path, is inlined when Swagger UI draws the
 * schema holding it (wrapping `JSONSchema202012`: a few levels under what is drawn, so that the
 * types shown are right), so a schema can still be followed to any depth; "Expand all" stops at
 * what was inlined so (else it would walk those millions of paths). The requests and answers of
 * the kinds have examples (packages/http/src/examples.ts), which Swagger UI shows and sends instead of samples.
 */
import type { Plugin, ReactContext } from 'swagger-ui-dist/swagger-ui-bundle.js';
import { inlineRefs, resolveBounded } from './inline-refs.js';

/** How many levels of objects under a schema drawn have their `$ref`s inlined when it is drawn. */
const DRAWN_NEAR = 6;

export const BoundedRefs: Plugin = (system) => {
  // What Swagger UI draws: any $ref left within a few levels of a schema drawn is inlined (so the
  // types it shows for its members are right), once per schema object. A schema inlined here (not
  // by resolveSubtree) is drawn under a path of its own, so that "Expand all" above stops there.
  const prepared = new WeakMap<object, unknown>();
  const lazy = new WeakSet<object>();
  const prepare = (schema: unknown): unknown => {
    if (schema === null || typeof schema !== 'object') return schema;
    let out = prepared.get(schema);
    if (out === undefined) {
      out = inlineRefs(system.specSelectors.specJS(), schema, {
        near: DRAWN_NEAR,
        onInline: (o) => lazy.add(o),
        onCopy: (from, to) => {
          if (lazy.has(from)) lazy.add(to);
        },
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
      // MAX_INLINED schemas are. Swagger UI generates its samples from that (where no example is
      // given) and "Expand all" opens that much; the rest is drawn as it is opened.
      resolveSubtree: (spec: unknown, path: (string | number)[]) => Promise.resolve(resolveBounded(spec, path)),
    },
    wrapComponents: {
      JSONSchema202012: (Original, sys) => {
        const React = sys.React;
        const PathContext = (sys.getComponent('JSONSchema202012PathContext') as () => ReactContext<unknown[]>)();
        return React.forwardRef((props: { schema: unknown }, ref) => {
          const parentPath = React.useContext(PathContext);
          const schema = prepare(props.schema);
          const drawn = React.createElement(Original, { ...props, schema, ref });
          return schema !== null && typeof schema === 'object' && lazy.has(schema)
            ? React.createElement(PathContext.Provider, { value: [...parentPath, '$ref', '$ref'] }, drawn)
            : drawn;
        });
      },
    },
  };
};
