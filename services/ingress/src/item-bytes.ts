/**
 * How many documents a bulk body holds and where each lies in its bytes, and whether those bytes
 * (or a single PUT's body) can be stored as they are instead of the document being encoded again
 * with `JSON.stringify`.
 *
 * A document's bytes are kept when they are plain JSON that every reader parses to the value that
 * was checked: compact (no whitespace between tokens), no member name that starts with a digit
 * (JavaScript would list such members first), no number with an exponent or with more than 15
 * significant digits (other parsers could read another value, or none), and no object that repeats
 * a member name (parsers disagree on which one counts: the caller compares the number of members
 * counted here with the number in the parsed document, `membersWithin` of @otm/core). Escapes in strings and
 * trailing zeros in fractions (`52.4000`) are kept as sent: they denote the same value everywhere.
 *
 * The scanner reads bytes that have been parsed as JSON already (the whole body, or the line), so
 * it follows the structure without checking it again. Bytes >= 0x80 occur only inside strings in
 * valid JSON, and never equal `"` or `\`: scanning bytes rather than characters is safe.
 *
 * Counting the documents of a bulk body (`countArrayItems`, `countLines`) is the exception: it
 * runs before anything is parsed, so that a body of more documents than allowed is refused without
 * being parsed into millions of values. It trusts nothing in the bytes: every loop is bounded by
 * their end, it allocates nothing, and it stops as soon as the count passes the limit. On bytes
 * that are not what they claim to be its count may be anything: such a body is refused, on its
 * count or by the parser.
 */

import { membersWithin } from '@otm/core';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const MINUS = 0x2d;
const DOT = 0x2e;
const ZERO = 0x30;
const NINE = 0x39;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

const isDigit = (c: number): boolean => c >= ZERO && c <= NINE;
const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** Per open bracket, whether it is an object (a comma separates members in both); reused. */
const openBrackets: boolean[] = [];

/** What `scanValue` found out about the value it went over. */
export interface ScannedValue {
  /** Where the value ends (one past its last byte). */
  end: number;
  /** Whether its bytes may be stored as they are (see the top of this file). */
  plain: boolean;
  /** Members of all its objects, at any depth (one colon each). */
  members: number;
}

/** Whether the number token b[start, end) is one every JSON parser reads as the same double. */
function plainNumber(b: Uint8Array, start: number, end: number): boolean {
  let i = start;
  if (b[i] === MINUS) i++;
  const intStart = i;
  while (i < end && isDigit(b[i]!)) i++;
  const intDigits = i - intStart;
  const zeroInt = intDigits === 1 && b[intStart] === ZERO;
  let fracDigits = 0;
  let leadingZeros = 0;
  if (i < end && b[i] === DOT) {
    i++;
    const fracStart = i;
    while (i < end && isDigit(b[i]!)) i++;
    fracDigits = i - fracStart;
    while (leadingZeros < fracDigits && b[fracStart + leadingZeros] === ZERO) leadingZeros++;
  }
  if (i !== end) return false; // an exponent
  const significant = zeroInt ? fracDigits - leadingZeros : intDigits + fracDigits;
  return significant <= 15;
}

/**
 * Goes over the JSON value that starts at `b[start]` (not whitespace) and reports where it ends,
 * whether its bytes are plain and how many object members it holds. `into` is filled and returned
 * (one object reused for every item of a body).
 */
export function scanValue(b: Uint8Array, start: number, into: ScannedValue, limit: number = b.length): ScannedValue {
  const n = limit;
  let i = start;
  let depth = 0;
  let plain = true;
  let members = 0;
  /** The next string is a member name: after `{`, and after `,` inside an object. */
  let nameNext = false;
  const objects = openBrackets;
  objects.length = 0;
  do {
    const c = b[i]!;
    if (c === QUOTE) {
      if (nameNext) {
        if (isDigit(b[i + 1]!)) plain = false;
        nameNext = false;
      }
      i++;
      // Bounded, though the bytes parsed as JSON: never run past the end whatever they hold.
      while (i < n) {
        const d = b[i]!;
        if (d === QUOTE) break;
        i += d === BACKSLASH ? 2 : 1;
      }
      i++;
    } else if (c === OPEN_OBJECT) {
      objects.push(true);
      depth++;
      nameNext = true;
      i++;
    } else if (c === OPEN_ARRAY) {
      objects.push(false);
      depth++;
      i++;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      objects.pop();
      depth--;
      nameNext = false;
      i++;
    } else if (c === COLON) {
      members++;
      i++;
    } else if (c === COMMA) {
      nameNext = objects[objects.length - 1] === true;
      i++;
    } else if (c === MINUS || isDigit(c)) {
      const from = i;
      i++;
      while (i < n) {
        const d = b[i]!;
        if (isDigit(d) || d === DOT || d === 0x65 || d === 0x45 || d === 0x2b || d === MINUS) i++;
        else break;
      }
      if (!plainNumber(b, from, i)) plain = false;
    } else if (isSpace(c)) {
      plain = false;
      i++;
    } else {
      // true, false, null
      i += c === 0x66 ? 5 : 4;
    }
  } while (depth > 0 && i < n);
  into.end = i;
  into.plain = plain;
  into.members = members;
  return into;
}

/**
 * The byte span of each document of a JSON array body, as [start, end) pairs, with whether each is
 * plain and its member count; undefined when the body is not an array of `count` values (it was
 * parsed as such, so that would be a bug here: the caller then encodes every document instead).
 */
export function arraySpans(b: Uint8Array, count: number): { spans: Uint32Array; plain: Uint8Array; members: Uint32Array } | undefined {
  const spans = new Uint32Array(2 * count);
  const plain = new Uint8Array(count);
  const members = new Uint32Array(count);
  const n = b.length;
  let i = 0;
  while (i < n && isSpace(b[i]!)) i++;
  if (b[i] !== OPEN_ARRAY) return undefined;
  i++;
  const v: ScannedValue = { end: 0, plain: false, members: 0 };
  for (let k = 0; ; k++) {
    while (i < n && isSpace(b[i]!)) i++;
    if (b[i] === CLOSE_ARRAY) return k === count ? { spans, plain, members } : undefined;
    if (k === count) return undefined;
    scanValue(b, i, v);
    spans[2 * k] = i;
    spans[2 * k + 1] = v.end;
    plain[k] = v.plain ? 1 : 0;
    members[k] = v.members;
    i = v.end;
    while (i < n && isSpace(b[i]!)) i++;
    if (b[i] === COMMA) i++;
    else if (b[i] !== CLOSE_ARRAY) return undefined;
  }
}

/**
 * The span of the value in b[start, end) (an NDJSON line, or a PUT body, that parsed), without the
 * whitespace around it; `plain` is false unless the value fills the rest exactly.
 */
export function lineSpan(b: Uint8Array, start: number, end: number, into: ScannedValue): { start: number; v: ScannedValue } {
  let s = start;
  let e = end;
  while (s < e && isSpace(b[s]!)) s++;
  while (e > s && isSpace(b[e - 1]!)) e--;
  if (s === e) {
    into.end = e;
    into.plain = false;
    into.members = 0;
    return { start: s, v: into };
  }
  scanValue(b, s, into, e);
  if (into.end !== e) into.plain = false;
  return { start: s, v: into };
}

/**
 * The text of a single PUT's body, to be stored as it is, when its bytes hold nothing but `doc`
 * as plain JSON (whitespace around it aside) with every member it was parsed with; else
 * undefined. `text` is the body decoded, `bytes` the body.
 */
export function plainBodyText(bytes: Uint8Array, text: string, doc: unknown): string | undefined {
  const { start, v } = lineSpan(bytes, 0, bytes.length, { end: 0, plain: false, members: 0 });
  if (!v.plain || v.members !== membersWithin(doc, Infinity)) return undefined;
  if (start === 0 && v.end === bytes.length) return text;
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, v.end - start).toString('utf8');
}

/** Where the JSON whitespace at b[i..] ends (at most at b's end). */
function skipSpace(b: Uint8Array, i: number): number {
  const n = b.length;
  while (i < n && isSpace(b[i]!)) i++;
  return i;
}

/**
 * Where a body's text starts: after the UTF-8 byte order mark, when it has one (the decoder drops
 * it from the body's text, and so do the counts below).
 */
export const textStart = (b: Uint8Array): number => (b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf ? 3 : 0);

/**
 * The values at the top level of a JSON array body, counted in its bytes up to `max + 1` (counting
 * stops there); -1 when the body is not an array (its first byte other than whitespace is not
 * `[`, or it has none). Strings are skipped with their escapes; brackets and braces are followed,
 * so that only the commas of the array itself separate documents.
 */
export function countArrayItems(b: Uint8Array, max: number): number {
  const n = b.length;
  let i = skipSpace(b, textStart(b));
  if (b[i] !== OPEN_ARRAY) return -1;
  i++;
  let depth = 1;
  let count = 0;
  /** At the top level, the next value starts a document: after `[` and after each of its commas. */
  let valueNext = true;
  while (i < n) {
    const c = b[i]!;
    if (depth === 1) {
      if (c === COMMA) {
        valueNext = true;
        i++;
        continue;
      }
      if (c === CLOSE_ARRAY) return count;
      if (isSpace(c)) {
        i++;
        continue;
      }
      if (valueNext) {
        valueNext = false;
        if (++count > max) return count;
      }
    }
    if (c === QUOTE) {
      i++;
      while (i < n) {
        const d = b[i]!;
        if (d === QUOTE) break;
        i += d === BACKSLASH ? 2 : 1;
      }
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) depth++;
    else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      // A closing bracket at the top level is the array's own (above): this one is not JSON.
      if (--depth < 1) return count;
    }
    i++;
  }
  return count;
}

/** Whether a byte is whitespace inside an NDJSON line (space, tab, CR); a line of nothing else is blank. */
const isLineSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0d;

/**
 * Calls `each(start, end)` with the byte span of every line of an NDJSON body that is not blank
 * (holds more than spaces, tabs and CRs), in order, the newline left out (and the byte order mark
 * of the first line); stops when `each` returns false. The body is never split: a body of millions of blank lines costs no memory.
 */
export function forEachLine(b: Uint8Array, each: (start: number, end: number) => boolean | void): void {
  const n = b.length;
  let i = textStart(b);
  while (i < n) {
    const start = i;
    while (i < n && isLineSpace(b[i]!)) i++;
    if (i === n) return;
    if (b[i] === 0x0a) {
      i++;
      continue;
    }
    const newline = b.indexOf(0x0a, i);
    const end = newline === -1 ? n : newline;
    if (each(start, end) === false) return;
    i = end + 1;
  }
}

/** The lines of an NDJSON body that are not blank (see `forEachLine`), counted up to `max + 1`. */
export function countLines(b: Uint8Array, max: number): number {
  let count = 0;
  forEachLine(b, () => ++count <= max);
  return count;
}
