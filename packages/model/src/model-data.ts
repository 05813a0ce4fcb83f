import data from './generated/otm-schemas.json' with { type: 'json' };

/** A schema as stored in generated/otm-schemas.json (OpenAPI 3.1 schema object, prose removed). */
export interface ModelSchema {
  type?: string | string[];
  format?: string;
  enum?: unknown[];
  const?: unknown;
  required?: string[];
  properties?: Record<string, ModelSchema>;
  items?: ModelSchema;
  additionalProperties?: boolean | ModelSchema;
  oneOf?: ModelSchema[];
  allOf?: ModelSchema[];
  anyOf?: ModelSchema[];
  not?: ModelSchema;
  $ref?: string;
  discriminator?: { propertyName: string; mapping?: Record<string, string> };
  deprecated?: boolean;
  default?: unknown;
  [k: string]: unknown;
}

export interface ModelData {
  source: { openapi: string; version: string | null };
  patches: string[];
  kinds: Record<string, { schema: string; operationId: string | null }>;
  schemas: Record<string, ModelSchema>;
}

export const MODEL: ModelData = data;

export function refName(ref: string): string {
  const p = '#/components/schemas/';
  if (!ref.startsWith(p)) throw new Error(`unsupported $ref ${ref}`);
  return ref.slice(p.length);
}

export function schemaByName(name: string): ModelSchema {
  const s = Object.hasOwn(MODEL.schemas, name) ? MODEL.schemas[name] : undefined;
  if (!s) throw new Error(`unknown schema ${name}`);
  return s;
}
