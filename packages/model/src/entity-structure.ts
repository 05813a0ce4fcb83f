/**
 * Model semantics derived from the schemas: where inline entities sit in a document, what an association
 * points at, and which member of an entity holds an association to an entity of another kind.
 *
 * Everything here is computed once from generated/otm-schemas.json (no hand-written member lists).
 */
import { detectKind, isKindSegment, kindInfo, kindOfEntityType, KINDS, type KindSegment } from './kinds.js';
import { refName, schemaByName, type ModelSchema } from './model-data.js';
import { flattenParts, singleRef, updateEventSchema } from './transform.js';

/** Path from the document root: member names and array indices. */
export type Path = ReadonlyArray<string | number>;

export interface InlineEntity {
  /** Kind of the inline entity. */
  kind: KindSegment;
  /** The inline entity object itself (the same object as inside the document). */
  entity: Record<string, unknown>;
  /** Path to that object, e.g. ['actions', 0, 'entity', 'location', 'entity']. */
  path: Path;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const get = (o: Obj, k: string): unknown => (Object.hasOwn(o, k) ? o[k] : undefined);

// ------------------------------------------------------------------------------------------------
// Schema helpers
// ------------------------------------------------------------------------------------------------

/** The schema with references followed and allOf flattened (oneOf unions are returned as they are). */
function resolve(s: ModelSchema): ModelSchema {
  for (let i = 0; i < 50; i++) {
    const r = singleRef(s);
    if (r !== undefined) s = schemaByName(r);
    else if (s.allOf && !s.oneOf) s = flattenParts(s.allOf);
    else return s;
  }
  throw new Error('reference loop');
}

/**
 * The kind of an entity schema: an object schema with an `id` member whose `entityType` enum names one
 * kind (`load-in-events` -> actions, `trip-constraint` -> constraints, `stop-entity` -> actions).
 */
function entityKindOf(s: ModelSchema): KindSegment | undefined {
  if (!s.properties?.id) return undefined;
  const values = (s.properties.entityType?.enum ?? []).filter((v): v is string => typeof v === 'string');
  const kinds = new Set(values.map((v) => kindOfEntityType(v)));
  if (kinds.size !== 1) return undefined;
  return [...kinds][0];
}

const ASSOCIATION = 'associationType';
const UPDATE_EVENT = updateEventSchema();
/** The entity union (any kind), as referenced by updateEvent `entity`. */
const GENERIC_ENTITY = (() => {
  const e = schemaByName(UPDATE_EVENT).properties?.entity;
  const r = e ? singleRef(e) : undefined;
  if (!r) throw new Error('updateEvent.entity is not a reference');
  return r;
})();

// ------------------------------------------------------------------------------------------------
// Inline entities: a walk plan per schema, pruned to the members that can lead to an entity
// ------------------------------------------------------------------------------------------------

interface ObjPlan {
  t: 0;
  kind: KindSegment | undefined;
  props: Map<string, Plan>;
  useful: boolean;
}
interface ArrPlan {
  t: 1;
  items: Plan;
  useful: boolean;
}
interface DispPlan {
  t: 2;
  prop: string;
  branches: Map<string, Plan>;
  def: Plan | undefined;
  useful: boolean;
}
type Plan = ObjPlan | ArrPlan | DispPlan;

const plans = new Map<string, Plan | null>();
const allPlans: Plan[] = [];

function planOfName(name: string): Plan | null {
  if (plans.has(name)) return plans.get(name) ?? null;
  const s = schemaByName(name);
  const r = singleRef(s);
  if (r !== undefined) {
    const p = planOfName(r);
    plans.set(name, p);
    return p;
  }
  // register before building: the schemas are recursive (event -> contextEvents -> event)
  let p: Plan | null;
  if (s.oneOf) {
    const d: DispPlan = { t: 2, prop: '', branches: new Map(), def: undefined, useful: false };
    plans.set(name, d);
    fillDispatch(d, s);
    p = d;
  } else if (s.allOf || s.type === 'object' || s.properties) {
    const o: ObjPlan = { t: 0, kind: undefined, props: new Map(), useful: false };
    plans.set(name, o);
    fillObject(o, resolve(s), name);
    p = o;
  } else {
    p = planOf(s, name);
    plans.set(name, p);
  }
  if (p) allPlans.push(p);
  return p;
}

function fillDispatch(d: DispPlan, s: ModelSchema): void {
  if (!s.discriminator || !s.oneOf) throw new Error('oneOf without discriminator');
  d.prop = s.discriminator.propertyName;
  const mapping = s.discriminator.mapping ?? {};
  const mapped = new Set(Object.values(mapping));
  for (const [v, ref] of Object.entries(mapping)) {
    const p = planOfName(refName(ref));
    if (p) d.branches.set(v, p);
  }
  const def = s.oneOf.find((b) => b.$ref && !mapped.has(b.$ref));
  if (def?.$ref) d.def = planOfName(refName(def.$ref)) ?? undefined;
}

function fillObject(o: ObjPlan, s: ModelSchema, name: string | undefined): void {
  o.kind = entityKindOf(s);
  for (const [k, v] of Object.entries(s.properties ?? {})) {
    if (name === UPDATE_EVENT && k === 'entity') continue; // a patch, not an entity
    const p = planOf(v, undefined);
    if (p) o.props.set(k, p);
  }
}

function planOf(s: ModelSchema, name: string | undefined): Plan | null {
  const r = singleRef(s);
  if (r !== undefined) return planOfName(r);
  let p: Plan | null = null;
  if (s.oneOf) {
    const d: DispPlan = { t: 2, prop: '', branches: new Map(), def: undefined, useful: false };
    fillDispatch(d, s);
    p = d;
  } else if (s.allOf || s.type === 'object' || s.properties) {
    const o: ObjPlan = { t: 0, kind: undefined, props: new Map(), useful: false };
    fillObject(o, resolve(s), name);
    p = o;
  } else if (s.items) {
    const items = planOf(s.items, undefined);
    if (items) p = { t: 1, items, useful: false };
  }
  if (p) allPlans.push(p);
  return p;
}

/** Marks the plans that can reach an entity and drops the members that cannot. */
function prune(): void {
  for (let changed = true; changed;) {
    changed = false;
    for (const p of allPlans) {
      if (p.useful) continue;
      let u = false;
      if (p.t === 0) u = p.kind !== undefined || [...p.props.values()].some((c) => c.useful);
      else if (p.t === 1) u = p.items.useful;
      else u = [...p.branches.values()].some((c) => c.useful) || (p.def?.useful ?? false);
      if (u) {
        p.useful = true;
        changed = true;
      }
    }
  }
  for (const p of allPlans) {
    if (p.t === 0) for (const [k, c] of p.props) if (!c.useful) p.props.delete(k);
    if (p.t === 2) for (const [k, c] of p.branches) if (!c.useful) p.branches.delete(k);
  }
}

let rootPlans: Map<KindSegment, Plan> | undefined;
function rootPlan(kind: KindSegment): Plan | undefined {
  if (!rootPlans) {
    const m = new Map<KindSegment, Plan>();
    for (const k of KINDS) {
      const p = planOfName(k.schema);
      if (p) m.set(k.segment, p);
    }
    prune();
    rootPlans = m;
  }
  return rootPlans.get(kind);
}

function walk(plan: Plan, v: unknown, path: Array<string | number>, out: InlineEntity[], root: boolean): void {
  if (plan.t === 1) {
    if (!Array.isArray(v)) return;
    for (let i = 0; i < v.length; i++) {
      path.push(i);
      walk(plan.items, v[i], path, out, false);
      path.pop();
    }
    return;
  }
  if (!isObj(v)) return;
  if (plan.t === 2) {
    let b: Plan | undefined;
    if (!Object.hasOwn(v, plan.prop)) b = plan.def;
    else {
      const tag = v[plan.prop];
      if (typeof tag === 'string') b = plan.branches.get(tag);
    }
    if (b) walk(b, v, path, out, root);
    return;
  }
  if (plan.kind !== undefined && !root) out.push({ kind: plan.kind, entity: v, path: path.slice() });
  if (plan.props.size === 0) return;
  // for-in over a parsed JSON object = its own keys in document order (JSON.parse creates no inherited ones);
  // hasOwn guards against anything enumerable on a prototype
  for (const k in v) {
    const c = plan.props.get(k);
    if (c === undefined || !Object.hasOwn(v, k)) continue;
    path.push(k);
    walk(c, v[k], path, out, false);
    path.pop();
  }
}

/**
 * Every inline entity at any depth of a (valid) document of `kind`, parents before children, in document
 * order: the `entity` of every association with associationType 'inline' (vehicle, actors, actions, location,
 * consignments, goods, documents, constraint, route, sensors, subLocations, entity1/entity2, ...) and the
 * entities embedded directly (`contextEvents` items), as the schemas say, dispatching on the discriminators
 * at each level. The `entity` of an updateEvent is a patch, not an entity: not descended into. Pure; members
 * that do not match the schema are skipped, nothing throws.
 */
export function inlineEntities(kind: KindSegment, doc: unknown): InlineEntity[] {
  const out: InlineEntity[] = [];
  const plan = rootPlan(kind);
  if (plan) walk(plan, doc, [], out, true);
  return out;
}

// ------------------------------------------------------------------------------------------------
// Association targets
// ------------------------------------------------------------------------------------------------

/** Kind of an entity object: entityType, eventType, actionType, then detectKind. */
function kindOfEntityObject(e: Obj): KindSegment | undefined {
  const et = get(e, 'entityType');
  const k = typeof et === 'string' ? kindOfEntityType(et) : undefined;
  if (k) return k;
  if (typeof get(e, 'eventType') === 'string') return 'events';
  if (typeof get(e, 'actionType') === 'string') return 'actions';
  return detectKind(e);
}

/**
 * The kind and id of the entity an association points at. inline: the kind of its `entity` (entityType,
 * eventType, actionType, detectKind) and `entity.id`; reference: kindOfEntityType(entityType) and `uuid`;
 * attributeRestriction: the kind only. undefined when `assoc` is not an association (no known associationType).
 */
export function associationTarget(assoc: unknown): { kind: KindSegment | undefined; id: string | undefined; inline: boolean } | undefined {
  if (!isObj(assoc)) return undefined;
  const at = get(assoc, ASSOCIATION);
  if (at === 'inline') {
    const e = get(assoc, 'entity');
    if (!isObj(e)) return { kind: undefined, id: undefined, inline: true };
    const id = get(e, 'id');
    return { kind: kindOfEntityObject(e), id: typeof id === 'string' ? id : undefined, inline: true };
  }
  if (at === 'reference' || at === 'attributeRestriction') {
    const et = get(assoc, 'entityType');
    const uuid = at === 'reference' ? get(assoc, 'uuid') : undefined;
    return {
      kind: typeof et === 'string' ? kindOfEntityType(et) : undefined,
      id: typeof uuid === 'string' ? uuid : undefined,
      inline: false,
    };
  }
  return undefined;
}

// ------------------------------------------------------------------------------------------------
// Holding members
// ------------------------------------------------------------------------------------------------

export interface HoldingMember {
  member: string;
  many: boolean;
}
export interface AssociationRow {
  kind: KindSegment;
  subKind: string | null;
  member: string;
  many: boolean;
  holds: KindSegment[];
}

interface MemberInfo {
  member: string;
  many: boolean;
  holds: KindSegment[];
}

/** Kinds an entity schema (or union of entity schemas) can be. */
function kindsOfEntitySchema(s: ModelSchema, seen = new Set<ModelSchema>()): KindSegment[] {
  if (seen.has(s)) return [];
  seen.add(s);
  const r = resolve(s);
  if (r.oneOf) {
    const out: KindSegment[] = [];
    for (const b of r.oneOf) for (const k of kindsOfEntitySchema(b, seen)) if (!out.includes(k)) out.push(k);
    return out;
  }
  const k = entityKindOf(r);
  return k ? [k] : [];
}

/**
 * An association member: its value (or its array items) is a union dispatched on associationType; it holds
 * the kinds of the `entity` of its inline branch. A single member holding the generic `entity` union (entity1 /
 * entity2 of the association events) is not a holding member: it is what the event is about, not a coupling;
 * an array of them (locationUpdateEvent `references`) holds any kind of that union.
 */
function associationMember(member: string, m: ModelSchema): MemberInfo | undefined {
  let s = resolve(m);
  let many = false;
  if (s.type === 'array' && s.items) {
    s = resolve(s.items);
    many = true;
  }
  if (!s.oneOf || s.discriminator?.propertyName !== ASSOCIATION) return undefined;
  const inline = s.discriminator.mapping?.inline;
  if (!inline) return undefined;
  const entity = resolve(schemaByName(refName(inline))).properties?.entity;
  if (!entity) return undefined;
  const target = singleRef(entity);
  if (target === GENERIC_ENTITY && !many) return undefined;
  const holds = kindsOfEntitySchema(entity);
  return holds.length ? { member, many, holds } : undefined;
}

function membersOf(s: ModelSchema): MemberInfo[] {
  const out: MemberInfo[] = [];
  for (const [k, v] of Object.entries(resolve(s).properties ?? {})) {
    const m = associationMember(k, v);
    if (m) out.push(m);
  }
  return out;
}

interface KindAssociations {
  /** sub-kind -> members; `null` = the kind without discriminator, or its default branch (plain actor). */
  bySubKind: Map<string | null, MemberInfo[]>;
  /** entityType value -> sub-kind, when the value names exactly one sub-kind (`load`, `locationUpdate`). */
  subKindOfEntityType: Map<string, string>;
  /** Members common to all sub-kinds: used when the sub-kind is unknown. */
  common: MemberInfo[];
  hasDefault: boolean;
}

let associations: Map<KindSegment, KindAssociations> | undefined;
function kindAssociations(kind: KindSegment): KindAssociations {
  if (!associations) {
    associations = new Map();
    for (const k of KINDS) {
      const s = schemaByName(k.schema);
      const bySubKind = new Map<string | null, MemberInfo[]>();
      const subKindOfEntityType = new Map<string, string>();
      const etCount = new Map<string, number>();
      let hasDefault = false;
      if (s.oneOf && s.discriminator) {
        const mapping = s.discriminator.mapping ?? {};
        const mapped = new Set(Object.values(mapping));
        const def = s.oneOf.find((b) => b.$ref && !mapped.has(b.$ref));
        if (def?.$ref) {
          hasDefault = true;
          bySubKind.set(null, membersOf(schemaByName(refName(def.$ref))));
        }
        for (const [v, ref] of Object.entries(mapping)) {
          const b = resolve(schemaByName(refName(ref)));
          bySubKind.set(v, membersOf(b));
          for (const et of b.properties?.entityType?.enum ?? []) {
            if (typeof et !== 'string') continue;
            etCount.set(et, (etCount.get(et) ?? 0) + 1);
            subKindOfEntityType.set(et, v);
          }
        }
        for (const [et, n] of etCount) if (n > 1) subKindOfEntityType.delete(et);
      } else bySubKind.set(null, membersOf(s));
      const lists = [...bySubKind.values()];
      const first = lists[0] ?? [];
      const common = first
        .filter((m) => lists.every((l) => l.some((x) => x.member === m.member && x.many === m.many)))
        .map((m) => ({
          ...m,
          holds: m.holds.filter((h) => lists.every((l) => l.find((x) => x.member === m.member)?.holds.includes(h))),
        }))
        .filter((m) => m.holds.length > 0);
      associations.set(k.segment, { bySubKind, subKindOfEntityType, common, hasDefault });
    }
  }
  return associations.get(kind) as KindAssociations;
}

function membersFor(kind: KindSegment, doc: unknown): MemberInfo[] {
  const a = kindAssociations(kind);
  const disc = kindInfo(kind).discriminator;
  if (!disc) return a.bySubKind.get(null) ?? [];
  if (isObj(doc)) {
    const tag = get(doc, disc);
    if (typeof tag === 'string' && a.bySubKind.has(tag)) return a.bySubKind.get(tag) ?? [];
    if (tag === undefined && a.hasDefault) return a.bySubKind.get(null) ?? [];
    const et = get(doc, 'entityType');
    const sub = typeof et === 'string' ? a.subKindOfEntityType.get(et) : undefined;
    if (sub !== undefined) return a.bySubKind.get(sub) ?? [];
  } else if (a.hasDefault) return a.bySubKind.get(null) ?? [];
  return a.common;
}

/**
 * The member of an entity of `kind1` that holds an association to an entity of `kind2`, from the schemas.
 * The sub-kind comes from `doc1`'s discriminator (actionType, eventType, goods/actor `type`; failing that an
 * entityType naming one sub-kind, e.g. `load`); without it (actions, events, goods) only the members common to
 * all sub-kinds count; an actor without `type` is a plain actor.
 *
 * When several members can hold kind2, the first of these rules that matches decides:
 * 1. the member named like kind2 (its path segment or entityType, case-insensitive): `vehicle`, `sensors`, `actors`;
 * 2. the member whose name ends with it: `relatedConsignments`, `subLocations`;
 * 3. the first such member in the schema's order.
 * undefined when no member can hold kind2 (e.g. a sensor and a trip).
 */
export function holdingMember(kind1: KindSegment, doc1: unknown, kind2: KindSegment): HoldingMember | undefined {
  if (!isKindSegment(kind1) || !isKindSegment(kind2)) return undefined;
  const info2 = kindInfo(kind2);
  const candidates = membersFor(kind1, doc1).filter((m) => m.holds.includes(kind2));
  if (candidates.length === 0) return undefined;
  const names = [info2.segment.toLowerCase(), info2.entityType.toLowerCase()];
  const pick =
    candidates.find((m) => names.includes(m.member.toLowerCase())) ??
    candidates.find((m) => names.some((n) => m.member.toLowerCase().endsWith(n))) ??
    candidates[0];
  return pick ? { member: pick.member, many: pick.many } : undefined;
}

/**
 * All association members per kind and sub-kind (subKind null: a kind without sub-kinds, or the plain actor),
 * in KINDS order, sub-kinds in the model's mapping order, members in schema order.
 */
export function associationTable(): AssociationRow[] {
  const out: AssociationRow[] = [];
  for (const k of KINDS) {
    for (const [subKind, members] of kindAssociations(k.segment).bySubKind) {
      for (const m of members) out.push({ kind: k.segment, subKind, member: m.member, many: m.many, holds: [...m.holds] });
    }
  }
  return out;
}
