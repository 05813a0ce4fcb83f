/**
 * The model's semantics, applied by the entity worker inside one unit of work per batch, the same
 * in both deployments:
 *
 * - every inline entity that has an `id` is also kept as an entity of its own kind; when the same
 *   entity arrives inline in several documents the newer one wins: the later `lastModified` (else
 *   `creationDate`), then the later acceptance by the ingress. A PUT of an entity itself always
 *   replaces it. Inline entities without an `id` are kept only inside their parent;
 * - an entity that holds another inline shows that other's current version: when an entity
 *   changes, the copies inside the entities that hold it (at any depth) are replaced too;
 * - `updateEvent` merges its patch (JSON Merge Patch, RFC 7396) into the entity it names; the
 *   result must be a valid entity of its kind;
 * - `associationCreatedEvent` puts entity2 into the member of entity1 that can hold its kind (sets
 *   a single association, adds once to an array); `associationRemovedEvent` takes it out;
 * - an update or association whose target is not known yet is kept and applied when the target
 *   arrives; one that cannot be applied then is dropped, logged and counted;
 * - actions and events are kept per lifecycle (see lifecycle.ts).
 *
 * What an event does to the document it names is model-effects.ts; this module applies it to the
 * store, in order, within the unit.
 */
import { inlineEntities, validateEntity, type InlineEntity, type KindSegment } from '@otm/model';
import type { Logger } from 'pino';
import { attributeFacet, attributeFacets, facetsOf, type ListRecord } from './facets.js';
import { storageKey } from './ids.js';
import { lifecycleRank } from './lifecycle.js';
import { jsonOf, type ChangeMessage, type Envelope } from './messages.js';
import { droppedEffects, pendingEffects } from './metrics.js';
import {
  ASSOCIATION_EVENTS,
  RESTRICTION_MATCHES_MAX,
  applyAssociation,
  applyUpdate,
  associationPlan,
  isNewer,
  modifiedOf,
  restrictionKey,
  updateTarget,
  type AssociationPlan,
  type Restriction,
} from './model-effects.js';
import type { EntityTx, HolderRef, PendingEffect, VersionStamp } from './ports.js';

type Doc = Record<string, unknown>;
const isObject = (v: unknown): v is Doc => typeof v === 'object' && v !== null && !Array.isArray(v);

export interface ApplyDeps {
  readonly logger: Logger;
}

/** Applies a batch of entity changes, in order, within one unit of work. */
export async function applyChanges(tx: EntityTx, batch: readonly Envelope[], deps: ApplyDeps): Promise<void> {
  const engine = new Engine(tx, deps);
  for (const e of batch) await engine.apply(e.message);
  await engine.propagate();
  await engine.relist();
}

/** One version for `Engine.store` to write. */
interface VersionToStore {
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  readonly doc: Doc;
  /** When the ingress accepted the change that brings it (its `modified` is the document's own). */
  readonly acceptedAt: number;
  /** A PUT of the entity itself, or an applied effect: always replaces. An inline copy (false) only when newer. */
  readonly authoritative: boolean;
  /** Its inline entities, when walked already (else walked here). */
  readonly children?: readonly InlineEntity[];
  /** Its JSON text, when made already (else made here). */
  readonly json?: string;
}

/** An entity version written in this unit, whose copies inside the entities that hold it are brought up to date at its end. */
interface Written {
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  readonly rank: number;
  doc: Doc;
  json: string;
}

/** An entity put or deleted in this unit: what its list record becomes (facets.ts). */
interface Touched {
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  /** Deleted in this unit (before the puts in `ranks`, if any): earlier versions are gone. */
  deleted: boolean;
  /** Facets of each version put in this unit, by lifecycle rank. */
  readonly ranks: Map<number, readonly string[]>;
}

/** The holders of written entities, each with the written entities it holds. */
interface HolderWork {
  readonly tenant: string;
  readonly ref: HolderRef;
  readonly held: Written[];
}

/** One string for an entity (tenant, kind, key), and for one lifecycle version of it. */
const entityId = (tenant: string, kind: string, key: string): string => `${tenant}\u0000${kind}\u0000${key}`;
const versionId = (tenant: string, kind: string, key: string, rank: number): string => `${entityId(tenant, kind, key)}\u0000${rank}`;

/** Whether `path` lies inside (or is) the member at `prefix`. */
function isUnder(path: ReadonlyArray<string | number>, prefix: ReadonlyArray<string | number>): boolean {
  if (path.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (path[i] !== prefix[i]) return false;
  return true;
}

/** Longest text of a client-supplied value in a log line. */
const LOG_TEXT_LIMIT = 200;
const clip = (v: unknown): unknown => (typeof v === 'string' && v.length > LOG_TEXT_LIMIT ? `${v.slice(0, LOG_TEXT_LIMIT)}…` : v);

/** A bounded summary of what an effect was dropped for (the event's error items are client-driven). */
function logDetail(detail: unknown): unknown {
  if (Array.isArray(detail)) {
    const shown = (detail as unknown[])
      .slice(0, 5)
      .map((d) => (typeof d === 'object' && d !== null ? Object.fromEntries(Object.entries(d).map(([k, v]) => [k, clip(v)])) : clip(d)));
    return detail.length > shown.length ? { items: shown, more: detail.length - shown.length } : shown;
  }
  if (typeof detail === 'object' && detail !== null) return Object.fromEntries(Object.entries(detail).map(([k, v]) => [k, clip(v)]));
  return clip(detail);
}

/**
 * Applies the changes of one unit of work. Every step costs in proportion to the documents it
 * touches: an entity written is remembered (`written`), and the copies of it that other entities
 * hold are brought up to date once, at the end of the unit (`propagate`), each holder read, walked
 * and written once however many of the entities it holds changed. A document with n inline
 * entities is therefore stored in O(n) work, not O(n²) (each inline entity stored used to re-read
 * and walk the whole document that held it).
 */
class Engine {
  /** Entity versions written in this unit, by tenant, kind, key and lifecycle rank. */
  private readonly written = new Map<string, Written>();
  /** Entities put or deleted in this unit, by tenant, kind and key, for their list records. */
  private readonly touched = new Map<string, Touched>();

  constructor(
    private readonly tx: EntityTx,
    private readonly deps: ApplyDeps,
  ) {}

  async apply(m: ChangeMessage): Promise<void> {
    if (m.op === 'delete') {
      this.tx.delete(m.tenant, m.kind, m.key);
      const t = this.touch(m.tenant, m.kind, m.key);
      t.deleted = true;
      t.ranks.clear();
      return;
    }
    // The document is walked once; its inline entities serve every step below.
    const { doc, children } = await this.withNewerCopies(m.tenant, m.kind, m.doc, m.acceptedAt);
    if (!m.inlineOnly) {
      // Unchanged by withNewerCopies, the document's text is the one the ingress already made.
      const json = doc === m.doc ? jsonOf(doc) : undefined;
      await this.store({ tenant: m.tenant, kind: m.kind, key: m.key, doc, acceptedAt: m.acceptedAt, authoritative: true, children, json });
    }
    await this.storeInline(m.tenant, children, m.acceptedAt);
    if (m.kind === 'events' && !m.inlineOnly) await this.effect(m.tenant, doc, m.acceptedAt, m.key);
  }

  /**
   * Writes one version (an authoritative one always replaces, an inline copy only when newer), then
   * remembers it for `propagate` and applies the effects that were waiting for this entity.
   */
  private async store(v: VersionToStore): Promise<boolean> {
    const { tenant, kind, key, doc, authoritative } = v;
    const stamp: VersionStamp = { modified: modifiedOf(doc), acceptedAt: v.acceptedAt };
    const children = v.children ?? inlineEntities(kind, doc);
    const rank = lifecycleRank(doc.lifecycle);
    const existing = await this.tx.get(tenant, kind, key, rank);
    const json = v.json ?? JSON.stringify(doc);
    if (existing !== undefined) {
      if (existing.json === json) return false;
      if (!authoritative && existing.stamp && isNewer(existing.stamp, stamp)) return false;
    }
    this.tx.put(tenant, { kind, key, lifecycleRank: rank, json, stamp });
    this.touch(tenant, kind, key).ranks.set(rank, facetsOf(kind, doc));
    const self = { kind, key, lifecycleRank: rank };
    for (const child of children) {
      if (typeof child.entity.id === 'string' && child.entity.id !== '') {
        this.tx.addHolder(tenant, { kind: child.kind, key: storageKey(child.entity.id) }, self);
      }
    }
    const id = versionId(tenant, kind, key, rank);
    const w = this.written.get(id);
    if (w === undefined) this.written.set(id, { tenant, kind, key, rank, doc, json });
    else {
      w.doc = doc;
      w.json = json;
    }
    await this.applyPending(tenant, kind, key);
    // Association events waiting for an entity with these attributes (attributeRestriction).
    for (const f of attributeFacets(doc)) await this.applyPending(tenant, kind, restrictionKey(f));
    return true;
  }

  /**
   * `doc` with each inline entity for which a newer version is stored replaced by that version
   * (the newer one wins also inside the document that brought the older copy). `doc` itself is
   * not changed; a copy is made when something is replaced.
   */
  private async withNewerCopies(
    tenant: string,
    kind: KindSegment,
    doc: Doc,
    acceptedAt: number,
  ): Promise<{ doc: Doc; children: InlineEntity[] }> {
    const children = inlineEntities(kind, doc);
    const replacements: Array<{ path: ReadonlyArray<string | number>; value: Doc }> = [];
    for (const child of children) {
      const id = child.entity.id;
      if (typeof id !== 'string' || id === '') continue;
      // A child inside one already replaced comes with its replacement (children come parents
      // first, each followed by its own, so only the last replacement can hold it).
      const last = replacements[replacements.length - 1];
      if (last !== undefined && isUnder(child.path, last.path)) continue;
      const stored = await this.tx.get(tenant, child.kind, storageKey(id), lifecycleRank(child.entity.lifecycle));
      if (stored?.stamp && isNewer(stored.stamp, { modified: modifiedOf(child.entity), acceptedAt })) {
        replacements.push({ path: child.path, value: JSON.parse(stored.json) as Doc });
      }
    }
    if (replacements.length === 0) return { doc, children };
    const copy = JSON.parse(JSON.stringify(doc)) as Doc;
    for (const r of replacements) replaceAt(copy, r.path, r.value);
    return { doc: copy, children: inlineEntities(kind, copy) };
  }

  /** Stores the inline entities (with an id) of `doc`, each if newer than the stored one. */
  private async storeInline(tenant: string, children: readonly InlineEntity[], acceptedAt: number): Promise<void> {
    for (let i = 0; i < children.length; i++) {
      const child = children[i]!;
      const id = child.entity.id;
      if (typeof id !== 'string' || id === '') continue;
      // A child's own inline entities are those listed right after it (parents come first, each
      // followed by everything inside it, at every depth).
      let end = i + 1;
      while (end < children.length && isUnder(children[end]!.path, child.path)) end++;
      await this.store({
        tenant,
        kind: child.kind,
        key: storageKey(id),
        doc: child.entity,
        acceptedAt,
        authoritative: false,
        children: children.slice(i + 1, end),
      });
    }
  }

  /**
   * Replaces the copies of the entities written in this unit that other entities hold inline with
   * their versions written last. Each holder is read, walked and written once. Holders of fewer
   * written entities go first: a holder that was itself written and is held by another (an action
   * holding a location, both inside a trip) is brought up to date before the copies of it are.
   */
  async propagate(): Promise<void> {
    if (this.written.size === 0) return;
    const work = new Map<string, HolderWork>();
    const holdersOf = new Map<string, HolderRef[]>();
    for (const w of this.written.values()) {
      const entity = entityId(w.tenant, w.kind, w.key);
      let refs = holdersOf.get(entity);
      if (refs === undefined) holdersOf.set(entity, (refs = await this.tx.holders(w.tenant, w.kind, w.key)));
      for (const ref of refs) {
        const id = versionId(w.tenant, ref.kind, ref.key, ref.lifecycleRank);
        let h = work.get(id);
        if (h === undefined) work.set(id, (h = { tenant: w.tenant, ref, held: [] }));
        h.held.push(w);
      }
    }
    const order = [...work.values()].sort((a, b) => a.held.length - b.held.length);
    for (const h of order) await this.refreshHolder(h);
    this.written.clear();
  }

  private touch(tenant: string, kind: KindSegment, key: string): Touched {
    const id = entityId(tenant, kind, key);
    let t = this.touched.get(id);
    if (t === undefined) this.touched.set(id, (t = { tenant, kind, key, deleted: false, ranks: new Map() }));
    return t;
  }

  /**
   * Lists every entity put in this unit at the unit's time, under the facets of all its versions
   * (those kept from before and those put now), and unlists the deleted ones: one read of the
   * list records a tenant, one write an entity.
   */
  async relist(): Promise<void> {
    if (this.touched.size === 0) return;
    const at = Date.now();
    const byTenant = new Map<string, Touched[]>();
    for (const t of this.touched.values()) {
      const list = byTenant.get(t.tenant);
      if (list === undefined) byTenant.set(t.tenant, [t]);
      else list.push(t);
    }
    for (const [tenant, list] of byTenant) {
      const previous = await this.tx.listRecords(tenant, list);
      list.forEach((t, i) => {
        const prev = previous[i];
        let next: ListRecord | undefined;
        if (t.ranks.size > 0) {
          const ranks: Record<number, readonly string[]> = t.deleted || prev === undefined ? {} : { ...prev.ranks };
          for (const [r, f] of t.ranks) ranks[r] = f;
          next = { at, ranks };
        }
        if (next !== undefined || prev !== undefined) this.tx.setListRecord(tenant, t.kind, t.key, next, prev);
      });
    }
    this.touched.clear();
  }

  private async refreshHolder({ tenant, ref, held }: HolderWork): Promise<void> {
    const stored = await this.tx.get(tenant, ref.kind, ref.key, ref.lifecycleRank);
    if (stored === undefined) {
      for (const w of held) this.tx.removeHolder(tenant, { kind: w.kind, key: w.key }, ref);
      return;
    }
    const byVersion = new Map<string, Written>();
    for (const w of held) byVersion.set(versionId(tenant, w.kind, w.key, w.rank), w);
    const holder = JSON.parse(stored.json) as Doc;
    let copies = inlineEntities(ref.kind, holder);
    let replaced: ReadonlyArray<string | number> | undefined;
    for (const copy of copies) {
      // Inside a copy just replaced: the old content, gone from the holder.
      if (replaced !== undefined && isUnder(copy.path, replaced)) continue;
      if (typeof copy.entity.id !== 'string' || copy.entity.id === '') continue;
      const w = byVersion.get(versionId(tenant, copy.kind, storageKey(copy.entity.id), lifecycleRank(copy.entity.lifecycle)));
      if (w === undefined || JSON.stringify(copy.entity) === w.json) continue;
      replaceAt(holder, copy.path, w.doc);
      replaced = copy.path;
    }
    if (replaced !== undefined) {
      const json = JSON.stringify(holder);
      this.tx.put(tenant, {
        kind: ref.kind,
        key: ref.key,
        lifecycleRank: ref.lifecycleRank,
        json,
        stamp: stored.stamp ?? { modified: 0, acceptedAt: 0 },
      });
      this.touch(tenant, ref.kind, ref.key).ranks.set(ref.lifecycleRank, facetsOf(ref.kind, holder));
      // A holder written in this unit is held as it is now by the holders that come after it.
      const self = this.written.get(versionId(tenant, ref.kind, ref.key, ref.lifecycleRank));
      if (self !== undefined) {
        self.doc = holder;
        self.json = json;
      }
      copies = inlineEntities(ref.kind, holder);
    }
    // An entity the holder no longer holds (in any lifecycle) no longer has it as a holder.
    const still = new Set<string>();
    for (const copy of copies) {
      if (typeof copy.entity.id === 'string' && copy.entity.id !== '') still.add(entityId(tenant, copy.kind, storageKey(copy.entity.id)));
    }
    for (const w of held) if (!still.has(entityId(tenant, w.kind, w.key))) this.tx.removeHolder(tenant, { kind: w.kind, key: w.key }, ref);
  }

  private async applyPending(tenant: string, kind: KindSegment, key: string): Promise<void> {
    const waiting = await this.tx.pending(tenant, kind, key);
    for (const p of waiting) {
      this.tx.removePending(tenant, kind, key, p);
      await this.effect(tenant, p.event, p.acceptedAt, p.eventKey);
    }
  }

  private drop(reason: string, event: Doc, detail: unknown): void {
    droppedEffects.inc({ reason });
    this.deps.logger.warn(
      { reason, eventId: clip(event.id), eventType: clip(event.eventType), detail: logDetail(detail) },
      'effect dropped',
    );
  }

  private wait(tenant: string, kind: KindSegment, key: string, event: Doc, acceptedAt: number, eventKey: string): void {
    const effect: PendingEffect = { acceptedAt, eventKey, event };
    pendingEffects.inc();
    this.tx.addPending(tenant, kind, key, effect);
  }

  /** Applies an update or association event to its target, or keeps it until the target arrives. */
  private async effect(tenant: string, event: Doc, acceptedAt: number, eventKey: string): Promise<void> {
    if (event.eventType === 'updateEvent') {
      const t = updateTarget(event);
      if ('type' in t) return this.drop('badTarget', event, t);
      const rank = t.patch.lifecycle === undefined ? undefined : lifecycleRank(t.patch.lifecycle);
      const existing = await this.tx.get(tenant, t.kind, t.key, rank);
      if (existing === undefined) return this.wait(tenant, t.kind, t.key, event, acceptedAt, eventKey);
      const { doc, errors } = applyUpdate(t.kind, JSON.parse(existing.json) as Doc, t.patch);
      if (errors.length > 0) return this.drop('invalidResult', event, errors);
      await this.store({ tenant, kind: t.kind, key: t.key, doc, acceptedAt, authoritative: true });
      await this.storeInline(tenant, inlineEntities(t.kind, t.patch), acceptedAt);
      return;
    }
    const created = ASSOCIATION_EVENTS[event.eventType as string];
    if (created === undefined) return;
    const plan = associationPlan(event);
    if ('type' in plan) return this.drop('badTarget', event, plan);
    if (plan.restriction1 !== undefined) {
      const keys = await this.select(tenant, plan.kind1, plan.restriction1);
      if (keys.length === 0) {
        const [name, value] = plan.restriction1.attributes[0]!;
        return this.wait(tenant, plan.kind1, restrictionKey(attributeFacet(name, value)), event, acceptedAt, eventKey);
      }
      for (const key of keys) await this.associate(tenant, { ...plan, key1: key }, event, created, acceptedAt);
      return;
    }
    const existing = await this.tx.get(tenant, plan.kind1, plan.key1);
    if (existing === undefined) return this.wait(tenant, plan.kind1, plan.key1, event, acceptedAt, eventKey);
    await this.associate(tenant, plan, event, created, acceptedAt, existing.json);
  }

  /** Couples (or uncouples) entity2 in entity1 (`plan.key1`) and stores entity1. */
  private async associate(
    tenant: string,
    plan: AssociationPlan,
    event: Doc,
    created: boolean,
    acceptedAt: number,
    json?: string,
  ): Promise<void> {
    const text = json ?? (await this.tx.get(tenant, plan.kind1, plan.key1))?.json;
    if (text === undefined) return;
    const doc = applyAssociation(plan.kind1, JSON.parse(text) as Doc, plan, event.entity2, created);
    if (doc === undefined) return this.drop('noHoldingMember', event, { kind1: plan.kind1, kind2: plan.kind2 });
    const errors = validateEntity(plan.kind1, doc);
    if (errors.length > 0) return this.drop('invalidResult', event, errors);
    await this.store({ tenant, kind: plan.kind1, key: plan.key1, doc, acceptedAt, authoritative: true });
  }

  /**
   * The entities of `kind` a restriction selects: those whose latest version has every attribute
   * of it with that value, found through the facet of its first attribute (the lists as committed,
   * and the entities put in this unit). At most RESTRICTION_MATCHES_MAX, in list order.
   */
  private async select(tenant: string, kind: KindSegment, r: Restriction): Promise<string[]> {
    const [name, value] = r.attributes[0]!;
    const f = attributeFacet(name, value);
    const candidates = new Set<string>();
    for (const p of await this.tx.list({ tenant, kind, facet: f, limit: RESTRICTION_MATCHES_MAX * 4 })) candidates.add(p.key);
    for (const t of this.touched.values()) {
      if (t.tenant === tenant && t.kind === kind && [...t.ranks.values()].some((fs) => fs.includes(f))) candidates.add(t.key);
    }
    const out: string[] = [];
    for (const key of candidates) {
      const stored = await this.tx.get(tenant, kind, key);
      if (stored === undefined) continue;
      const attrs = (JSON.parse(stored.json) as Doc).externalAttributes;
      if (isObject(attrs) && r.attributes.every(([k, v]) => attrs[k] === v)) out.push(key);
      if (out.length >= RESTRICTION_MATCHES_MAX) break;
    }
    return out;
  }
}

/** Sets the value at `path` inside `root` (the path must exist). */
function replaceAt(root: Doc, path: ReadonlyArray<string | number>, value: unknown): void {
  let node: unknown = root;
  for (let i = 0; i < path.length - 1; i++) node = (node as Record<string | number, unknown>)[path[i]!];
  const last = path[path.length - 1]!;
  if (Array.isArray(node)) node[last as number] = value;
  else Object.defineProperty(node, last, { value, enumerable: true, writable: true, configurable: true });
}
