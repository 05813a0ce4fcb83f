/**
 * What travels on the bus from ingress to workers. The same shape is used by the in-process bus
 * and by Kafka (as JSON), so both deployments run the same worker code.
 */
import type { KindSegment } from '@otm/model';
import { eventFactsAt, type EventFacts, type EventFactsTable } from './event-facts.js';
import type { StoredDocument, VersionStamp } from './ports.js';

export const TOPICS = {
  /** Changes to entities; key: the storage key of the entity changed (per-entity order). */
  entities: 'otm.entities.v1',
  /** Location, sensor, emission, fuel, weigh and start/stop events; key: vehicle or sensor id. */
  telemetry: 'otm.telemetry.v1',
  /** Messages a worker can never apply, with the reason. */
  deadLetter: 'otm.dead-letter.v1',
} as const;
export type Topic = (typeof TOPICS)[keyof typeof TOPICS];

export interface PutMessage {
  readonly v: 1;
  readonly op: 'put';
  readonly tenant: string;
  readonly kind: KindSegment;
  /** Storage key (a lower-case UUID) of the entity. */
  readonly key: string;
  /** The validated document, with its `id` (generated when the request had none). */
  readonly doc: Readonly<Record<string, unknown>>;
  /** When the ingress accepted the change (ms since the epoch). */
  readonly acceptedAt: number;
  /**
   * Set on the copy of a telemetry event sent to the entity worker only to keep the entities it
   * holds inline; the event itself is kept by the telemetry worker.
   */
  readonly inlineOnly?: boolean;
}

export interface DeleteMessage {
  readonly v: 1;
  readonly op: 'delete';
  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  readonly acceptedAt: number;
}

export type ChangeMessage = PutMessage | DeleteMessage;

export interface Envelope {
  readonly topic: Topic;
  /** Partition key: messages with the same key are handled in the order they were published. */
  readonly key: string;
  readonly message: ChangeMessage;
}

/** Event kinds that are high-volume telemetry and go to the event store. */
export const TELEMETRY_EVENT_TYPES: ReadonlySet<string> = new Set([
  'locationUpdateEvent',
  'sensorUpdateEvent',
  'emissionEvent',
  'fuelConsumedEvent',
  'weighEvent',
  'startEngineEvent',
  'stopEngineEvent',
  'startMovingEvent',
  'stopMovingEvent',
  'startWaitingEvent',
]);

export const isTelemetry = (kind: KindSegment, doc: Readonly<Record<string, unknown>> | undefined): boolean =>
  kind === 'events' && doc !== undefined && TELEMETRY_EVENT_TYPES.has(doc.eventType as string);

const texts = new WeakMap<object, string>();

/**
 * The JSON text of an accepted document, made once per document object: the ingress makes it for
 * its answer, and in one process the workers reuse it for the stored version instead of encoding
 * the same document again. Accepted documents are never changed after this (changes are made on
 * copies), which is what makes the cache safe.
 */
export function jsonOf(doc: Readonly<Record<string, unknown>>): string {
  let text = texts.get(doc);
  if (text === undefined) {
    text = JSON.stringify(doc);
    texts.set(doc, text);
  }
  return text;
}

/** What a TextPut is made of. */
export interface TextPutOptions {
  readonly tenant: string;
  readonly kind: KindSegment;
  /** Storage key of the entity. */
  readonly key: string;
  /** When the ingress accepted the change (ms since the epoch). */
  readonly acceptedAt: number;
  /**
   * The document as JSON, with its id: text, or UTF-8 bytes: all of a buffer, or its bytes
   * [from, to) (a bulk body's span, kept as the body and two numbers rather than a view an event:
   * thousands of events wait in the bus at once, and the collector copies all they hold).
   */
  readonly text: string | Buffer;
  /** Where the document starts in `text` when it is bytes (default 0). */
  readonly from?: number;
  /** Where the document ends in `text` when it is bytes (default: its end). */
  readonly to?: number;
  /** Its lifecycle rank (0 without one). */
  readonly lifecycleRank: number;
  /** Its `lastModified`, else `creationDate`, in ms since the epoch; 0 when neither. */
  readonly modified: number;
  /** Its facts, when read already: entry `factsAt` of the table of its request's events. */
  readonly facts?: EventFactsTable;
  readonly factsAt?: number;
}

/**
 * A put whose document was checked and encoded before it got here (by a bulk request's checking
 * thread): it carries the document's JSON text, the text `jsonOf` would make, with the facts a
 * store needs (lifecycle rank, last modified), and parses the text only when something reads
 * `doc`. Bulk telemetry then reaches the event store, or Kafka, as that text without being parsed
 * again on the event loop. A spread (`{ ...message }`) does not copy `doc`, which lives on the
 * prototype: make copies with their members named. It is also the version it writes
 * (`StoredDocument`), so that a worker in the same process hands it to the event store as it is.
 */
export class TextPut implements PutMessage, StoredDocument {
  readonly v = 1;
  readonly op = 'put';
  #doc: Readonly<Record<string, unknown>> | undefined;
  #json: string | undefined;
  /** The buffer that holds the document's UTF-8 bytes, when it came as bytes, and where in it. */
  readonly #src: Buffer | undefined;
  readonly #from: number;
  readonly #to: number;
  /** The facts of the events of its request, and where its own are (a bulk request's checking thread read them). */
  readonly #facts: EventFactsTable | undefined;
  readonly #factsAt: number;

  readonly tenant: string;
  readonly kind: KindSegment;
  readonly key: string;
  readonly acceptedAt: number;
  readonly lifecycleRank: number;
  readonly modified: number;

  constructor(o: TextPutOptions) {
    this.tenant = o.tenant;
    this.kind = o.kind;
    this.key = o.key;
    this.acceptedAt = o.acceptedAt;
    this.lifecycleRank = o.lifecycleRank;
    this.modified = o.modified;
    const text = o.text;
    if (typeof text === 'string') this.#json = text;
    else this.#src = text;
    this.#from = o.from ?? 0;
    this.#to = o.to ?? (typeof text === 'string' ? 0 : text.length);
    this.#facts = o.facts;
    this.#factsAt = o.factsAt ?? 0;
  }

  /** Its facts, when read already (`StoredDocument.facts`). */
  get facts(): EventFacts | undefined {
    return this.#facts === undefined ? undefined : eventFactsAt(this.#facts, this.#factsAt);
  }

  /** The document's JSON as UTF-8 bytes, when it came as bytes (a view made on each call; `json` decodes them once, if asked). */
  get bytes(): Buffer | undefined {
    const src = this.#src;
    if (src === undefined) return undefined;
    return this.#from === 0 && this.#to === src.length ? src : src.subarray(this.#from, this.#to);
  }

  /** The document as JSON text. */
  get json(): string {
    return (this.#json ??= this.#src!.toString('utf8', this.#from, this.#to));
  }

  get stamp(): VersionStamp {
    return { modified: this.modified, acceptedAt: this.acceptedAt };
  }

  get doc(): Readonly<Record<string, unknown>> {
    if (this.#doc === undefined) {
      const doc = JSON.parse(this.json) as Record<string, unknown>;
      texts.set(doc, this.json);
      this.#doc = doc;
    }
    return this.#doc;
  }
}

/**
 * Remembers `text` as the JSON text of `doc` for `jsonOf`: only for a document just parsed from
 * that text, when the text is what `JSON.stringify` made (parsing and encoding such text again gives
 * it back unchanged) or the document's own plain bytes as sent, in bulk or by PUT
 * (services/ingress/src/item-bytes.ts: the same value for every reader).
 */
export function rememberText(doc: Readonly<Record<string, unknown>>, text: string): void {
  texts.set(doc, text);
}

const DOC_MEMBER = ',"doc":';
const DOC_OBJECT = `${DOC_MEMBER}{`;

const CLOSE = Buffer.from('}');

/**
 * A change message as JSON for a bus that carries text (Kafka). The document comes last and is
 * the text `jsonOf` made, so that `decodeMessage` can hand the same text to the worker instead of
 * the worker encoding the document again. A TextPut that holds its document as UTF-8 bytes is
 * encoded as bytes (the same text), without decoding them.
 */
export function encodeMessage(message: ChangeMessage): string | Buffer {
  if (message.op !== 'put') return JSON.stringify(message);
  if (message instanceof TextPut) {
    const { v, op, tenant, kind, key, acceptedAt, bytes } = message;
    const head = `${JSON.stringify({ v, op, tenant, kind, key, acceptedAt }).slice(0, -1)}${DOC_MEMBER}`;
    return bytes === undefined ? `${head}${message.json}}` : Buffer.concat([Buffer.from(head), bytes, CLOSE]);
  }
  const { doc, ...rest } = message;
  return `${JSON.stringify(rest).slice(0, -1)}${DOC_MEMBER}${jsonOf(doc)}}`;
}

/**
 * Parses what `encodeMessage` made (or any JSON change message). When the document is the last
 * member, its text is remembered for `jsonOf`: the text is the sender's `jsonOf` text of the
 * document (see `rememberText`).
 */
export function decodeMessage(text: string): ChangeMessage {
  const message = JSON.parse(text) as ChangeMessage;
  if (
    typeof message !== 'object' ||
    message === null ||
    message.op !== 'put' ||
    typeof message.doc !== 'object' ||
    message.doc === null ||
    Array.isArray(message.doc)
  ) {
    return message;
  }
  // The document's text is what follows the first `,"doc":{` when the message is laid out as
  // encodeMessage writes it: every other member a number, string, boolean or null (a JSON string
  // never holds a raw quote, so no such member holds that text), `doc` the last of them, and no
  // whitespace after the document (the text ends `}}`; a member after it would end otherwise).
  // Cheaper than writing the other members out again to compare (half the cost of this function).
  let last = '';
  for (const k in message) {
    const v = (message as unknown as Record<string, unknown>)[k];
    if (k !== 'doc' && typeof v === 'object' && v !== null) return message;
    last = k;
  }
  if (last !== 'doc' || !text.endsWith('}}')) return message;
  const at = text.indexOf(DOC_OBJECT);
  if (at > 0) texts.set(message.doc, text.slice(at + DOC_OBJECT.length - 1, -1));
  return message;
}
