import { MODEL, refName, schemaByName, type ModelSchema } from './model-data.js';

export type KindSegment =
  | 'vehicles'
  | 'routes'
  | 'sensors'
  | 'locations'
  | 'actors'
  | 'consignments'
  | 'trips'
  | 'events'
  | 'actions'
  | 'goods'
  | 'documents'
  | 'transportOrders'
  | 'constraints';

export interface KindInfo {
  /** URL path segment: PUT /api/v5/<segment>, GET/DELETE /api/v5/<segment>/{UUID}. */
  segment: KindSegment;
  /** The kind's generic entityType value (`event` and `action` for the kinds without one in the model). */
  entityType: string;
  /** Human-readable name. */
  label: string;
  /** Member selecting the sub-kind, if any. */
  discriminator: 'eventType' | 'actionType' | 'type' | null;
  /** Model schema of the PUT body (key of generated/otm-schemas.json `schemas`). */
  schema: string;
}

const DEF: ReadonlyArray<[KindSegment, string, string, KindInfo['discriminator']]> = [
  ['vehicles', 'vehicle', 'Vehicle', null],
  ['routes', 'route', 'Route', null],
  ['sensors', 'sensor', 'Sensor', null],
  ['locations', 'location', 'Location', null],
  ['actors', 'actor', 'Actor', 'type'],
  ['consignments', 'consignment', 'Consignment', null],
  ['trips', 'trip', 'Trip', null],
  ['events', 'event', 'Event', 'eventType'],
  ['actions', 'action', 'Action', 'actionType'],
  ['goods', 'goods', 'Goods', 'type'],
  ['documents', 'document', 'Document', null],
  ['transportOrders', 'transportOrder', 'Transport order', null],
  ['constraints', 'constraint', 'Constraint', null],
];

export const KINDS: readonly KindInfo[] = Object.freeze(
  DEF.map(([segment, entityType, label, discriminator]) => {
    const k = MODEL.kinds[segment];
    if (!k) throw new Error(`model has no PUT /api/v5/${segment}`);
    return Object.freeze({ segment, entityType, label, discriminator, schema: k.schema });
  }),
);

const BY_SEGMENT: ReadonlyMap<string, KindInfo> = new Map(KINDS.map((k) => [k.segment, k]));

export function isKindSegment(s: string): s is KindSegment {
  return typeof s === 'string' && BY_SEGMENT.has(s);
}

export function kindInfo(kind: KindSegment): KindInfo {
  return BY_SEGMENT.get(kind) as KindInfo;
}

/** All entityType values the schema (and its sub-kinds) accept at the top level. */
function entityTypeValues(s: ModelSchema, seen = new Set<string>()): string[] {
  if (s.$ref) {
    const n = refName(s.$ref);
    if (seen.has(n)) return [];
    seen.add(n);
    return entityTypeValues(schemaByName(n), seen);
  }
  const out: string[] = [];
  for (const b of [...(s.oneOf ?? []), ...(s.allOf ?? [])]) out.push(...entityTypeValues(b, seen));
  for (const v of s.properties?.entityType?.enum ?? []) if (typeof v === 'string') out.push(v);
  return [...new Set(out)];
}

/** entityType values accepted on a document of each kind (derived from the schemas). */
export const ENTITY_TYPES_OF_KIND: ReadonlyMap<KindSegment, readonly string[]> = new Map(
  KINDS.map((k) => [k.segment, entityTypeValues(schemaByName(k.schema))]),
);

function mappingValues(schema: string): Set<string> {
  return new Set(Object.keys(schemaByName(schema).discriminator?.mapping ?? {}));
}
const EVENT_TYPES = mappingValues('event');
const ACTION_TYPES = mappingValues('action');
const GOODS_TYPES = mappingValues('goods');
const ACTOR_TYPES = mappingValues('actor');
const CONSTRAINT_TYPES = mappingValues('constraintValue');

/**
 * The reference/attributeRestriction `entityType` enum names `stopWaiting`, an event kind the model does not
 * define (it has startWaitingEvent only). The enum names event kinds by their short names, so it is an event.
 */
const NOT_IN_MODEL: Readonly<Record<string, KindSegment>> = { stopWaiting: 'events' };

/**
 * entityType value -> kind. A sub-kind's discriminator value names that sub-kind's kind first (`weigh` is the
 * actionType of the weigh action, though the weighEvent also accepts it as its short name); then the entityType
 * enums of the kinds' schemas, in KINDS order; then the values the model's enums name without defining them.
 */
export const KIND_OF_ENTITY_TYPE: ReadonlyMap<string, KindSegment> = (() => {
  const m = new Map<string, KindSegment>();
  for (const [values, kind] of [
    [ACTION_TYPES, 'actions'],
    [EVENT_TYPES, 'events'],
    [GOODS_TYPES, 'goods'],
  ] as const) {
    for (const v of values) if (!m.has(v)) m.set(v, kind);
  }
  for (const [seg, values] of ENTITY_TYPES_OF_KIND) for (const v of values) if (!m.has(v)) m.set(v, seg);
  for (const [v, k] of Object.entries(NOT_IN_MODEL)) if (!m.has(v)) m.set(v, k);
  return m;
})();

/** entityType values that more than one kind accepts (e.g. `weigh`: the weigh action and the weighEvent). */
const AMBIGUOUS: ReadonlySet<string> = (() => {
  const count = new Map<string, number>();
  for (const values of ENTITY_TYPES_OF_KIND.values()) for (const v of values) count.set(v, (count.get(v) ?? 0) + 1);
  return new Set([...count].filter(([, n]) => n > 1).map(([v]) => v));
})();

/**
 * Kind of an entityType value as used on entities, in references / attributeRestrictions (`items`, `locationUpdate`,
 * `associationCreated`, `stopWaiting`) and as keys of the updateEvent `entity` union (`load`, `weigh`): 'trip' ->
 * 'trips', 'load' -> 'actions', 'locationUpdate' -> 'events', 'items' -> 'goods'. undefined for anything else.
 */
export function kindOfEntityType(entityType: string): KindSegment | undefined {
  return typeof entityType === 'string' ? KIND_OF_ENTITY_TYPE.get(entityType) : undefined;
}

/**
 * Guesses the kind of a document (for validating a file without a path), from, in this order:
 * `entityType`; `eventType` (events); `actionType` (actions); `type` items/transportEquipment (goods)
 * or person/company (actors); a `value` whose `type` is a constraint kind (constraints); a `content`
 * with `contentType` (documents). Returns undefined when none applies.
 */
export function detectKind(doc: unknown): KindSegment | undefined {
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) return undefined;
  const get = (k: string): unknown => (Object.hasOwn(doc, k) ? (doc as Record<string, unknown>)[k] : undefined);
  const et = get('entityType');
  if (typeof et === 'string' && KIND_OF_ENTITY_TYPE.has(et) && !AMBIGUOUS.has(et)) return KIND_OF_ENTITY_TYPE.get(et);
  const ev = get('eventType');
  if (typeof ev === 'string' && EVENT_TYPES.has(ev)) return 'events';
  const ac = get('actionType');
  if (typeof ac === 'string' && ACTION_TYPES.has(ac)) return 'actions';
  const t = get('type');
  if (typeof t === 'string' && GOODS_TYPES.has(t)) return 'goods';
  if (typeof t === 'string' && ACTOR_TYPES.has(t)) return 'actors';
  const v = get('value');
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
    const vt = Object.hasOwn(v, 'type') ? (v as Record<string, unknown>).type : undefined;
    if (typeof vt === 'string' && CONSTRAINT_TYPES.has(vt)) return 'constraints';
  }
  const c = get('content');
  if (c !== null && typeof c === 'object' && !Array.isArray(c) && Object.hasOwn(c, 'contentType')) return 'documents';
  if (typeof et === 'string' && KIND_OF_ENTITY_TYPE.has(et)) return KIND_OF_ENTITY_TYPE.get(et);
  if (typeof ev === 'string') return 'events';
  if (typeof ac === 'string') return 'actions';
  return undefined;
}
