/**
 * The little of Swagger UI's API (swagger-ui-dist 5, its bundle) that the docs page uses: the
 * bundle has no types of its own. Its plugins get Swagger UI's "system": React, its components,
 * its selectors.
 */
declare module 'swagger-ui-dist/swagger-ui-bundle.js' {
  /** React as Swagger UI bundles it (the page has no React of its own). */
  export interface ReactApi {
    createElement(type: unknown, props?: object | null, ...children: unknown[]): unknown;
    forwardRef<P>(render: (props: P, ref: unknown) => unknown): unknown;
    useContext<T>(context: ReactContext<T>): T;
  }
  export interface ReactContext<T> {
    readonly Provider: unknown;
    readonly __value?: T;
  }
  export interface System {
    readonly React: ReactApi;
    getComponent(name: string): unknown;
    readonly specSelectors: { specJS(): unknown };
  }
  /** A component of Swagger UI's, wrapped by a plugin: the original and the system give the new one. */
  export type ComponentWrapper = (Original: unknown, system: System) => unknown;
  export interface PluginDefinition {
    fn?: Record<string, (...args: never[]) => unknown>;
    wrapComponents?: Record<string, ComponentWrapper>;
  }
  export type Plugin = (system: System) => PluginDefinition;
  export interface Options {
    url: string;
    dom_id: string;
    deepLinking?: boolean;
    validatorUrl?: string | null;
    presets?: unknown[];
    plugins?: Plugin[];
    layout?: string;
  }
  interface SwaggerUIBundle {
    (options: Options): unknown;
    readonly presets: { readonly apis: unknown };
  }
  const SwaggerUIBundle: SwaggerUIBundle;
  export default SwaggerUIBundle;
}
