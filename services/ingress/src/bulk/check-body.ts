/**
 * Checking a bulk body: parse it, check each document as a single PUT would, and encode each
 * accepted one as the text that will be stored. It reads no store and publishes nothing, so it can
 * run on a worker thread (thread-pool.ts sends large bodies there) as well as on the event loop,
 * with the same result. Its answer is built to cross threads cheaply: flat arrays, one entry per
 * item, no parsed documents. A telemetry document whose own bytes can be stored as they are
 * (item-bytes.ts) is answered as its span in the body, which comes back with the answer, instead
 * of being encoded again as text.
 *
 * What a body costs is bounded by its size and by the limit on documents, not by what it holds:
 * the documents are counted in the body's bytes before anything is parsed (item-bytes.ts), and a
 * body of more than `maxItems` is refused then, so at most `maxItems` documents are ever parsed;
 * NDJSON lines are taken one at a time, never split into an array of lines. A rejected document
 * keeps at most `ITEM_ERRORS` error items.
 */
import { isUtf8 } from 'node:buffer';
import type { KindSegment, OtmError } from '@otm/model';
import {
  OtmServiceError,
  eventFacts,
  invalidDocument,
  lifecycleRank,
  membersWithin,
  modifiedOf,
  parseJsonText,
  newEventFactsTable,
  setEventFacts,
  tooDeep,
  type ErrorCode,
  type EventFactsTable,
  type ErrorItem,
} from '@otm/core';
import { checkDocument, isPlainTelemetry, telemetryKey } from '../check-document.js';
import { arraySpans, countArrayItems, countLines, forEachLine, lineSpan, textStart, type ScannedValue } from '../item-bytes.js';

export type BulkFormat = 'json' | 'ndjson';

export interface BulkCheckTask {
  /** The request body as received (UTF-8), or as text. */
  readonly body: Uint8Array | string;
  /** A JSON array of documents, or NDJSON (one document per line, blank lines skipped). */
  readonly format: BulkFormat;
  readonly kind: KindSegment;
  readonly maxDepth: number;
  /** Most documents in one request: more is a 413 and nothing is checked. */
  readonly maxItems: number;
}

/** What became of one item. */
export const OUTCOME = {
  /** Not a valid document: see `rejected`. */
  rejected: 0,
  /** Telemetry with no entity inline: goes to the event store as its text. */
  telemetry: 1,
  /** Anything else valid (entities, actions, other events): the ingress finishes it from its text. */
  other: 2,
} as const;

export interface CheckedBulk {
  readonly ok: true;
  readonly count: number;
  /** Per item, an OUTCOME value. */
  readonly outcome: Uint8Array;
  /** The error items of each rejected item, as [index, items]. */
  readonly rejected: Array<[number, OtmError[]]>;
  /**
   * Per item ('' for a rejected one): its id, its storage key, its JSON text with the id ('' when
   * the text is its span of `body`).
   */
  readonly ids: string[];
  readonly keys: string[];
  readonly texts: string[];
  /** Per item, [start, end) of its text in `body` when its text there is what is stored; else 0, 0. */
  readonly spans: Uint32Array;
  /** The body's bytes, when some item's text is a span of it. */
  readonly body: Uint8Array | undefined;
  /** Per telemetry item ('' and 0 for others): partition key (vehicle or sensor), lifecycle rank, last modified (ms). */
  readonly partitions: string[];
  readonly ranks: Uint8Array;
  readonly modified: Float64Array;
  /**
   * A body of events: the facts the event store lists each telemetry event by (core's
   * `eventFacts`), read here from the documents parsed anyway, so that the event loop does not
   * parse their text again to list them. Undefined for other kinds.
   */
  readonly facts: EventFactsTable | undefined;
}

/** The whole request refused (its body is not a bulk body, or holds too many documents). */
export interface RefusedBulk {
  readonly ok: false;
  readonly status: number;
  readonly code: ErrorCode;
  readonly message: string;
  readonly items: ErrorItem[];
}

/** The refusal as the error the HTTP layer answers with. */
export const refusal = (r: RefusedBulk): OtmServiceError => new OtmServiceError(r.code, r.status, r.message, { items: r.items });

type Item = { readonly doc: unknown } | { readonly error: OtmError };

const utf8 = new TextDecoder('utf-8', { fatal: true });
/** For the lines of a body already known to be UTF-8; a byte order mark is kept (and is not JSON) but at the body's start. */
const lineText = new TextDecoder('utf-8', { ignoreBOM: true });

const NOT_UTF8: OtmError = { type: 'invalidJson', message: 'the body is not valid UTF-8' };

function textOf(body: Uint8Array | string): string {
  if (typeof body === 'string') return body;
  try {
    return utf8.decode(body);
  } catch {
    throw invalidDocument([NOT_UTF8]);
  }
}

/** At most this many error items are kept for one document of a bulk body (the last then says how many were left out). */
export const ITEM_ERRORS = 10;

const MORE_RE = /^(\d+) more problems not listed/;

/**
 * The error items of one rejected document, at most `ITEM_ERRORS` of them: the first ones, and an
 * item that says how many more there were (counting those the model itself left out).
 */
export function cappedErrors(errors: OtmError[]): OtmError[] {
  if (errors.length <= ITEM_ERRORS) return errors;
  const last = errors[errors.length - 1]!;
  const unlisted = last.type === 'invalidField' && last.field === '$' ? MORE_RE.exec(last.message) : null;
  const more = unlisted === null ? errors.length - (ITEM_ERRORS - 1) : errors.length - ITEM_ERRORS + Number(unlisted[1]);
  return [
    ...errors.slice(0, ITEM_ERRORS - 1),
    {
      type: 'invalidField',
      field: '$',
      message: `${more} more problems not listed (at most ${ITEM_ERRORS} items are reported for one document of a bulk request)`,
    },
  ];
}

/** The 413 of a body that holds more than `max` documents. */
const tooMany = (max: number): OtmServiceError =>
  new OtmServiceError('payloadTooLarge', 413, 'too many documents', {
    items: [{ type: 'payloadTooLarge', message: `a bulk request holds at most ${max} documents; this one holds more` }],
  });

const isJsonSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const EMPTY: OtmError = { type: 'invalidJson', message: 'the request body is empty; a JSON document is expected' };
const NOT_AN_ARRAY: OtmError = {
  type: 'invalidJson',
  message: 'a bulk body is a JSON array of documents, or NDJSON (application/x-ndjson)',
};

/**
 * The documents of a body, each with its member count (from the depth check's walk), and where each
 * lies in the body's bytes when those are at hand.
 */
interface Items {
  readonly items: Item[];
  /** Per item, the members of the parsed document (0 for a rejected one). */
  readonly parsedMembers: Uint32Array;
  readonly bytes?: Uint8Array;
  /** Per item: [start, end) in `bytes`, whether those bytes are plain, and the members counted in them. */
  readonly spans?: Uint32Array;
  readonly plain?: Uint8Array;
  readonly members?: Uint32Array;
}

/**
 * The documents of a body. Throws the refusal of the whole body: not UTF-8, not an array, more
 * than `maxItems` documents (counted before anything is parsed), an array document nested too deep.
 */
function itemsOf(task: BulkCheckTask): Items {
  // The bytes the documents are counted (and NDJSON lines found) in; their spans are kept only
  // when the body came as bytes.
  const scanned = typeof task.body === 'string' ? Buffer.from(task.body) : task.body;
  const bytes = typeof task.body === 'string' ? undefined : task.body;
  if (task.format === 'json') {
    const count = countArrayItems(scanned, task.maxItems);
    if (count > task.maxItems) throw tooMany(task.maxItems);
    // Not an array: refused as it is, not parsed.
    if (count < 0) throw invalidDocument([scanned.subarray(textStart(scanned)).every(isJsonSpace) ? EMPTY : NOT_AN_ARRAY]);
    const body = parseJsonText(textOf(task.body));
    if (!Array.isArray(body)) throw invalidDocument([NOT_AN_ARRAY]);
    // Counted in the bytes: the parsed array agrees, but the limit must hold whatever they said.
    if (body.length > task.maxItems) throw tooMany(task.maxItems);
    // The array is the first level: each document may nest one level less.
    const parsedMembers = new Uint32Array(body.length);
    for (let k = 0; k < body.length; k++) {
      const m = membersWithin(body[k], task.maxDepth - 1);
      if (m < 0) throw invalidDocument([tooDeep(task.maxDepth)]);
      parsedMembers[k] = m;
    }
    const items = body.map((doc: unknown) => ({ doc }));
    const found = bytes === undefined ? undefined : arraySpans(bytes, items.length);
    return found === undefined ? { items, parsedMembers } : { items, parsedMembers, bytes, ...found };
  }
  const count = countLines(scanned, task.maxItems);
  if (count > task.maxItems) throw tooMany(task.maxItems);
  if (bytes !== undefined && !isUtf8(bytes)) throw invalidDocument([NOT_UTF8]);
  const items: Item[] = [];
  const parsedMembers = new Uint32Array(count);
  const spans = new Uint32Array(2 * count);
  const plain = new Uint8Array(count);
  const members = new Uint32Array(count);
  const v: ScannedValue = { end: 0, plain: false, members: 0 };
  // Each line is decoded from its own bytes (a newline byte is a newline character: UTF-8 never
  // uses 0x0a otherwise), so that no line but those parsed is ever made a string.
  forEachLine(scanned, (from, lineEnd) => {
    try {
      const doc: unknown = JSON.parse(lineText.decode(scanned.subarray(from, lineEnd)));
      const m = membersWithin(doc, task.maxDepth);
      if (m < 0) {
        items.push({ error: tooDeep(task.maxDepth) });
        return;
      }
      const k = items.length;
      items.push({ doc });
      parsedMembers[k] = m;
      if (bytes !== undefined) {
        const { start, v: scannedLine } = lineSpan(bytes, from, lineEnd, v);
        spans[2 * k] = start;
        spans[2 * k + 1] = scannedLine.end;
        plain[k] = scannedLine.plain ? 1 : 0;
        members[k] = scannedLine.members;
      }
    } catch (e) {
      items.push({ error: { type: 'invalidJson', message: `the line is not valid JSON: ${(e as Error).message}` } });
    }
  });
  return bytes === undefined ? { items, parsedMembers } : { items, parsedMembers, bytes, spans, plain, members };
}

const refused = (e: OtmServiceError): RefusedBulk => ({
  ok: false,
  status: e.status,
  code: e.code,
  message: e.message,
  items: e.items,
});

/** Checks every document of a bulk body. Never throws for bad input: a refusal is an answer. */
export function checkBulk(task: BulkCheckTask): CheckedBulk | RefusedBulk {
  let found: Items;
  try {
    found = itemsOf(task);
  } catch (e) {
    if (e instanceof OtmServiceError) return refused(e);
    throw e;
  }
  const { items } = found;
  const count = items.length;
  const outcome = new Uint8Array(count);
  const ranks = new Uint8Array(count);
  const modified = new Float64Array(count);
  const rejected: Array<[number, OtmError[]]> = [];
  const ids: string[] = new Array<string>(count);
  const keys: string[] = new Array<string>(count);
  const texts: string[] = new Array<string>(count);
  const partitions: string[] = new Array<string>(count);
  const spans = new Uint32Array(2 * count);
  const facts = task.kind === 'events' ? newEventFactsTable(count) : undefined;
  let spanned = false;
  for (let i = 0; i < count; i++) {
    const item = items[i]!;
    ids[i] = keys[i] = texts[i] = partitions[i] = '';
    if ('error' in item) {
      rejected.push([i, [item.error]]);
      continue;
    }
    try {
      const { key, doc } = checkDocument(task.kind, item.doc);
      ids[i] = doc.id as string;
      keys[i] = key;
      if (isPlainTelemetry(task.kind, doc)) {
        // Its own bytes, when plain, hold every member it was checked with (no name repeated) and
        // its id was not generated; else the text JSON.stringify makes, as for a single PUT.
        if (found.plain?.[i] === 1 && doc === item.doc && found.parsedMembers[i] === found.members![i]) {
          spans[2 * i] = found.spans![2 * i]!;
          spans[2 * i + 1] = found.spans![2 * i + 1]!;
          spanned = true;
        } else texts[i] = JSON.stringify(doc);
        outcome[i] = OUTCOME.telemetry;
        partitions[i] = telemetryKey(doc, key);
        ranks[i] = lifecycleRank(doc.lifecycle);
        modified[i] = modifiedOf(doc);
        if (facts !== undefined) setEventFacts(facts, i, eventFacts(doc));
      } else {
        texts[i] = JSON.stringify(doc);
        outcome[i] = OUTCOME.other;
      }
    } catch (e) {
      if (e instanceof OtmServiceError && e.status === 400) rejected.push([i, cappedErrors(e.items as OtmError[])]);
      else throw e;
    }
  }
  const body = spanned ? found.bytes : undefined;
  return { ok: true, count, outcome, rejected, ids, keys, texts, spans, body, partitions, ranks, modified, facts };
}
