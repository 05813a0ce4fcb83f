/**
 * The ingress: checks a change, gives a new document its id, and publishes it to the bus. It
 * answers only after the bus has durably accepted the change.
 */
import { holdingMember, type KindSegment, type OtmError } from '@otm/model';
import {
  OtmServiceError,
  STORAGE_RETRY_AFTER_SECONDS,
  StorageRefused,
  TOPICS,
  storageAnswer,
  type ErrorItem,
  applyUpdate,
  associationKey,
  associationPlan,
  invalidDocument,
  isTelemetry,
  lifecycleRank,
  notFound,
  rememberText,
  TextPut,
  updateTarget,
  type Bus,
  type DocumentReader,
  type Envelope,
  type PutMessage,
} from '@otm/core';
import { OUTCOME, type CheckedBulk } from './bulk/check-body.js';
import { checkDocument, isPlainTelemetry, telemetryKey, type Accepted } from './check-document.js';
import { plainBodyText } from './item-bytes.js';

export { telemetryKey, type Accepted } from './check-document.js';

export interface IngressDeps {
  readonly bus: Bus;
  /** Where existing documents are looked up (for DELETE): the entity store, then the event store. */
  readonly readers: { readonly entities: DocumentReader; readonly events: DocumentReader };
  readonly now?: () => number;
}

/**
 * The bus messages of a put. Entity changes go to the entity topic keyed by the entity they
 * change, so that changes to one entity are applied in the order they were accepted: an entity's
 * own id; for an updateEvent, the entity it updates; for an association event, entity1.
 * Telemetry goes to the telemetry topic keyed by vehicle or sensor; one that holds entities inline
 * is also sent to the entity worker, which keeps those entities.
 */
export function envelopesFor(message: PutMessage, partitionKey: string = message.key): Envelope[] {
  if (isTelemetry(message.kind, message.doc)) {
    const out: Envelope[] = [{ topic: TOPICS.telemetry, key: telemetryKey(message.doc, message.key), message }];
    if (!isPlainTelemetry(message.kind, message.doc)) {
      // Members named, not spread: a TextPut keeps `doc` on its prototype.
      const { tenant, kind, key, doc, acceptedAt } = message;
      out.push({ topic: TOPICS.entities, key, message: { v: 1, op: 'put', tenant, kind, key, doc, acceptedAt, inlineOnly: true } });
    }
    return out;
  }
  return [{ topic: TOPICS.entities, key: partitionKey, message }];
}

const prefixed = (prefix: string, errors: OtmError[]): OtmError[] =>
  errors.map((e) => (e.type === 'invalidJson' ? e : { ...e, field: e.field === '$' || e.field === '' ? prefix : `${prefix}.${e.field}` }));

/** A stand-in document that selects the sub-kind named by a reference's entityType (e.g. 'load'). */
function subKindStub(kind: KindSegment, entityType: unknown): Record<string, unknown> | undefined {
  if (typeof entityType !== 'string') return undefined;
  if (kind === 'actions') return { actionType: entityType };
  if (kind === 'events') return { eventType: entityType.endsWith('Event') ? entityType : `${entityType}Event` };
  if (kind === 'goods' && (entityType === 'items' || entityType === 'transportEquipment')) return { type: entityType };
  return undefined;
}

/** Whether a document's effect on stored entities must be checked against them (update and association events). */
const hasEffect = (kind: KindSegment, doc: Readonly<Record<string, unknown>>): boolean =>
  kind === 'events' &&
  (doc.eventType === 'updateEvent' || doc.eventType === 'associationCreatedEvent' || doc.eventType === 'associationRemovedEvent');

/** A checked document with its bus messages. */
type Prepared = Accepted & { envelopes: Envelope[] };

/**
 * What became of the items of a bulk request, item by item: the id of each accepted one, the
 * model's error items of each rejected one. Flat, not an object an item: a request holds thousands.
 */
export interface BulkResult {
  readonly count: number;
  /** Per item: its id when accepted, '' when rejected. */
  readonly ids: readonly string[];
  /** The error items of each rejected item, by index. */
  readonly errors: ReadonlyMap<number, ReadonlyArray<OtmError | ErrorItem>>;
  /**
   * Set when a store (or the bus) refused some documents for lack of room or for now: they have an
   * `insufficientStorage` (or `unavailable`) item, and the answer is a 503 with this Retry-After.
   */
  readonly retryAfterSeconds?: number;
}

/** A refusal of some documents of a bulk request by a store: its item, and the Retry-After of its answer. */
function refusalOf(e: unknown): { item: ErrorItem; retryAfterSeconds: number } | undefined {
  if (e instanceof StorageRefused) {
    const answer = storageAnswer(e);
    return { item: answer.items[0]!, retryAfterSeconds: Number(answer.headers['retry-after']) };
  }
  if (e instanceof OtmServiceError && e.retryable && e.status === 503 && e.items.length > 0) {
    return { item: e.items[0]!, retryAfterSeconds: Number(e.headers['retry-after'] ?? STORAGE_RETRY_AFTER_SECONDS) };
  }
  return undefined;
}

const NOT_ALL: OtmError[] = [{ type: 'invalidField', field: '$', message: 'not accepted: another item of this atomic request is invalid' }];

export class Ingress {
  private readonly now: () => number;

  constructor(private readonly deps: IngressDeps) {
    this.now = deps.now ?? Date.now;
  }

  /**
   * Checks what an update or association event would do, against the stored state: the entity an
   * update leaves behind must be valid; an association must pair kinds that a member can hold.
   * Returns the partition key (the entity changed). A target not stored yet is not an error: the
   * effect waits for it. Only for documents with `hasEffect`.
   */
  private async checkEffect(tenant: string, doc: Readonly<Record<string, unknown>>): Promise<string> {
    if (doc.eventType === 'updateEvent') {
      const t = updateTarget(doc);
      if ('type' in t) throw invalidDocument([t]);
      const rank = t.patch.lifecycle === undefined ? undefined : lifecycleRank(t.patch.lifecycle);
      const stored = await this.deps.readers.entities.get(tenant, t.kind, t.key, rank);
      if (stored !== undefined) {
        const { errors } = applyUpdate(t.kind, JSON.parse(stored.json) as Record<string, unknown>, t.patch);
        if (errors.length > 0) throw invalidDocument(prefixed(t.path, errors));
      }
      return t.key;
    }
    // Else an association event (created or removed).
    const plan = associationPlan(doc);
    if ('type' in plan) throw invalidDocument([plan]);
    const e1 = doc.entity1 as Record<string, unknown>;
    // The sub-kind of entity1 decides its members: from the inline entity, the stored one, or the reference.
    const stored = plan.restriction1 === undefined ? await this.deps.readers.entities.get(tenant, plan.kind1, plan.key1) : undefined;
    const doc1 =
      e1.associationType === 'inline'
        ? e1.entity
        : stored !== undefined
          ? (JSON.parse(stored.json) as unknown)
          : subKindStub(plan.kind1, e1.entityType);
    if (holdingMember(plan.kind1, doc1, plan.kind2) === undefined) {
      throw invalidDocument([
        {
          type: 'invalidField',
          field: 'entity2',
          message: `no member of ${plan.kind1} can hold ${plan.kind2}: these two cannot be associated`,
        },
      ]);
    }
    return associationKey(plan);
  }

  /**
   * The bus messages of a document that passed `checkDocument`, made at once unless the
   * document's effect must be checked against stored entities (update and association events):
   * a bulk request of thousands of location events then does not wait a turn for each.
   */
  private prepareChecked(tenant: string, kind: KindSegment, accepted: Accepted): Prepared | Promise<Prepared> {
    const messages = (partitionKey: string): Prepared => {
      const message: PutMessage = { v: 1, op: 'put', tenant, kind, key: accepted.key, doc: accepted.doc, acceptedAt: this.now() };
      return { key: accepted.key, doc: accepted.doc, envelopes: envelopesFor(message, partitionKey) };
    };
    return hasEffect(kind, accepted.doc) ? this.checkEffect(tenant, accepted.doc).then(messages) : messages(accepted.key);
  }

  /**
   * Checks, publishes and answers a PUT. `sent` is the body as it came: a telemetry event whose
   * bytes are plain JSON (item-bytes.ts) and that had its id is stored, and answered, as that text,
   * as it would be from a bulk request; any other document as `JSON.stringify` makes it.
   */
  async put(
    tenant: string,
    kind: KindSegment,
    body: unknown,
    sent?: { readonly bytes: Uint8Array; readonly text: string },
  ): Promise<Accepted> {
    const checked = checkDocument(kind, body);
    if (sent !== undefined && checked.doc === body && isPlainTelemetry(kind, checked.doc)) {
      const text = plainBodyText(sent.bytes, sent.text, checked.doc);
      if (text !== undefined) rememberText(checked.doc, text);
    }
    const prepared = this.prepareChecked(tenant, kind, checked);
    const { envelopes, ...accepted } = prepared instanceof Promise ? await prepared : prepared;
    await this.deps.bus.publish(envelopes);
    return accepted;
  }

  /**
   * The documents of a checked bulk body (bulk/check-body.ts), published together (one bus publish)
   * and answered once the bus acknowledged them all; each rejected one gets its error items. With
   * `atomic`, one invalid document means none is accepted. Telemetry goes to the bus as its
   * checked text (TextPut), not parsed again here; other documents are parsed from their text, and
   * update and association events are checked against stored state as a single PUT's are.
   */
  async bulk(tenant: string, kind: KindSegment, checked: CheckedBulk, atomic: boolean): Promise<BulkResult> {
    const count = checked.count;
    const envelopes: Envelope[] = [];
    const errors = new Map<number, ReadonlyArray<OtmError | ErrorItem>>(checked.rejected);
    const { outcome, texts, spans } = checked;
    const body =
      checked.body === undefined ? undefined : Buffer.from(checked.body.buffer, checked.body.byteOffset, checked.body.byteLength);
    const ids = checked.ids.slice();
    /** The item of each message (an item may have two: a telemetry event holding entities inline). */
    const itemOf: number[] = [];
    const acceptedAt = this.now();
    for (let index = 0; index < count; index++) {
      const kept = outcome[index];
      if (kept === OUTCOME.telemetry) {
        // Its text, or its own bytes in the body (the body and where, not a copy nor a view).
        const own = texts[index] === '';
        const message = new TextPut({
          tenant,
          kind,
          key: checked.keys[index]!,
          acceptedAt,
          text: own ? body! : texts[index]!,
          from: own ? spans[2 * index]! : 0,
          to: own ? spans[2 * index + 1]! : 0,
          lifecycleRank: checked.ranks[index]!,
          modified: checked.modified[index]!,
          facts: checked.facts,
          factsAt: index,
        });
        envelopes.push({ topic: TOPICS.telemetry, key: checked.partitions[index]!, message });
        itemOf.push(index);
      } else if (kept === OUTCOME.other) {
        try {
          const doc = JSON.parse(texts[index]!) as Record<string, unknown>;
          rememberText(doc, texts[index]!);
          const now = this.prepareChecked(tenant, kind, { key: checked.keys[index]!, doc });
          const p = now instanceof Promise ? await now : now;
          envelopes.push(...p.envelopes);
          for (const _ of p.envelopes) itemOf.push(index);
        } catch (e) {
          if (!(e instanceof OtmServiceError && e.status === 400)) throw e;
          errors.set(index, e.items);
          ids[index] = '';
        }
      } else ids[index] = '';
    }
    if (atomic && errors.size > 0) {
      for (let index = 0; index < count; index++) if (!errors.has(index)) errors.set(index, NOT_ALL);
      return { count, ids: ids.fill(''), errors };
    }
    if (envelopes.length === 0) return { count, ids, errors };
    const bus = this.deps.bus;
    // Which documents were not stored: by message where the bus tells (in-process), else all of them.
    let failures: Map<number, unknown>;
    if (bus.publishEach !== undefined) {
      const outcomes = await bus.publishEach(envelopes);
      failures = new Map();
      outcomes.forEach((e, i) => {
        if (e !== undefined && !failures.has(itemOf[i]!)) failures.set(itemOf[i]!, e);
      });
    } else {
      try {
        await bus.publish(envelopes);
        return { count, ids, errors };
      } catch (e) {
        failures = new Map(itemOf.map((item) => [item, e]));
      }
    }
    if (failures.size === 0) return { count, ids, errors };
    const refusals = [...failures.values()].map(refusalOf);
    // Not a refusal a retry cures (a fault): the whole request fails, as a single PUT would.
    const faultAt = refusals.findIndex((r) => r === undefined);
    if (faultAt >= 0) throw [...failures.values()][faultAt] as Error;
    const retryAfterSeconds = Math.max(...refusals.map((r) => r!.retryAfterSeconds));
    if (atomic) {
      // All or nothing: every document is refused (those stored are stored again, unchanged, when it is sent again).
      const first = refusals[0]!.item;
      const item = { type: first.type, message: `not accepted, with the whole atomic request: ${first.message}` } as ErrorItem;
      for (let index = 0; index < count; index++) errors.set(index, [item]);
      return { count, ids: ids.fill(''), errors, retryAfterSeconds };
    }
    let k = 0;
    for (const item of failures.keys()) {
      errors.set(item, [refusals[k++]!.item]);
      ids[item] = '';
    }
    return { count, ids, errors, retryAfterSeconds };
  }

  /** Deletes every lifecycle version of the entity; 404 when there is none. */
  async delete(tenant: string, kind: KindSegment, key: string): Promise<void> {
    const message = { v: 1, op: 'delete', tenant, kind, key, acceptedAt: this.now() } as const;
    const inEntities = await this.deps.readers.entities.get(tenant, kind, key);
    if (inEntities !== undefined) {
      await this.deps.bus.publish([{ topic: TOPICS.entities, key, message }]);
      return;
    }
    const inEvents = kind === 'events' ? await this.deps.readers.events.get(tenant, kind, key) : undefined;
    if (inEvents === undefined) throw notFound(`no ${kind} entity with id ${key}`);
    const doc = JSON.parse(inEvents.json) as Record<string, unknown>;
    await this.deps.bus.publish([{ topic: TOPICS.telemetry, key: telemetryKey(doc, key), message }]);
  }
}
