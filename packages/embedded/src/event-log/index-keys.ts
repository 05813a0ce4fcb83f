/**
 * The bytes of the event log's LMDB keys (layout 2: recovery.ts rebuilds an index of another
 * layout from the log at start, `INDEX_LAYOUT`).
 *
 * Every entry costs its key, its value and LMDB's 10 bytes of node and pointer, in pages that a
 * B-tree keeps from half to nearly full; these keys are most of those bytes, and they are mostly
 * ids: storage keys are UUIDs (36 characters as text, 16 bytes as what they are) and times were 15
 * digits (7 bytes as a number). So:
 *
 * - `event-index` keeps its keys as strings to every caller (`tenant|kind|key|rank`: the log's
 *   records, `recent`, compaction and recovery use them as they are), through a key codec
 *   (`indexKeyCodec`) that writes a key whose `key` is a UUID as `tenant|kind` (`tenant` alone for
 *   kind `events`), a mark byte (2; 3 for `events`), the UUID's 16 bytes and the rank's digit (22
 *   bytes instead of 50 for an event of tenant `acme`), and any other key as lmdb-js writes a string
 *   (ordered-binary: the same bytes as before). The two are told apart by their first byte below
 *   5: a mark in the first, an ordered-binary escape (4) or none in the other. The order of this
 *   database's keys is nobody's concern (reads are point reads; compaction walks all of it and
 *   resumes from a key it read).
 * - The lists (effects.ts: `event-time`, `event-vehicle`, `event-records`) are opened with binary
 *   keys made here from their parts: the tenant (`tenantPart`: UTF-8, bytes 0 and 1 escaped, then
 *   0, so that no tenant's keys are a prefix of another's), a vehicle (`writeVehiclePart`: 16
 *   bytes), a time (`writeTime`: 7 bytes, big-endian, clamped as `pad15` clamps), and an event key
 *   at the end (`writeKeyPart`: 16 bytes, or another form for a key that is not a UUID). They sort
 *   as the text keys did within a tenant's or a vehicle's list: by time, then by key, keys being
 *   UUIDs written as lower-case hex (whose byte order is their text order). A key that is not a
 *   UUID (a test's, a tool's: ingest stores every event under its storage key) sorts among its own
 *   kind in text order, after the UUIDs whose first byte is below 255.
 *
 * Such keys are compared by LMDB's memcmp, as the text keys were (`keyCodecOf` below).
 */
import { createHash } from 'node:crypto';
import type { RootDatabase } from 'lmdb';

/** lmdb-js's key encoding (ordered-binary) of the strings of a database, as its database objects carry it. */
export interface KeyCodec {
  writeKey(key: unknown, target: Uint8Array, position: number): number;
  readKey(buffer: Uint8Array, start: number, end: number): unknown;
}

/** Node's Buffer writes UTF-8 natively (as ordered-binary does for long strings). */
type Utf8Target = Uint8Array & { utf8Write?: (s: string, offset: number) => number };

/**
 * The key encoding of string keys that are not UUID-shaped: the bytes of lmdb-js's own
 * (ordered-binary, as ever), given as the database's `keyEncoder`, for two reasons.
 *
 * - LMDB's comparator. lmdb-js gives a database whose keys it encodes itself a comparator of its
 *   own that compares four bytes at a time; one opened with a key encoder keeps LMDB's, a memcmp.
 *   These keys share long prefixes (tenant, kind), so a put's descent through the B-tree is mostly
 *   key comparisons. Both comparators order the bytes of strings alike (bytewise, a prefix first:
 *   ordered-binary writes no 0 byte of its own into a string).
 * - A string of fewer than 64 characters is written by ordered-binary a character at a time in
 *   JavaScript (to escape those below 5 and encode the others). Keys of ASCII without such
 *   characters are written natively, then looked at; any other string is left to ordered-binary.
 *
 * What they save: CPU an event in the event store, spent on key comparisons and key writes
 * (the figure: docs/PERFORMANCE.md). Undefined when the root does not carry lmdb-js's functions: the databases are then
 * opened as lmdb-js opens them.
 */
export function keyCodecOf(root: RootDatabase): KeyCodec | undefined {
  const { writeKey, readKey } = root as unknown as Partial<KeyCodec>;
  if (typeof writeKey !== 'function' || typeof readKey !== 'function') return undefined;
  return {
    writeKey(key: unknown, target: Utf8Target, position: number): number {
      // ordered-binary escapes a first character below 28, and writes strings of 64 and more natively.
      if (typeof key !== 'string' || key.length >= 64 || !(key.charCodeAt(0) >= 28) || target.utf8Write === undefined) {
        return writeKey(key, target, position);
      }
      const end = position + target.utf8Write(key, position);
      // More bytes than characters: not ASCII. A byte below 5: a character ordered-binary escapes.
      if (end - position !== key.length) return writeKey(key, target, position);
      for (let i = position; i < end; i++) if (target[i]! < 5) return writeKey(key, target, position);
      return end;
    },
    readKey,
  };
}

/** Options of a database of the event log: binary values, keys by `keys` (lmdb-js's own when undefined). */
export const binaryDb = (name: string, keys: KeyCodec | undefined) =>
  keys === undefined ? { name, encoding: 'binary' as const } : { name, encoding: 'binary' as const, keyEncoder: keys };

/** Options of a database of the lists: binary keys (built here) and values, compared by memcmp. */
export const binaryKeysDb = (name: string) => ({ name, encoding: 'binary' as const, keyEncoding: 'binary' as const });

// ---- UUIDs ---------------------------------------------------------------------------------------

/** Hex digit values by character code (lower case only: storage keys are lower case); -1 otherwise. */
const HEX = new Int8Array(65536).fill(-1);
for (let c = 0; c < 10; c++) HEX[48 + c] = c;
for (let c = 0; c < 6; c++) HEX[97 + c] = 10 + c;
const HEX_BYTE = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));
/** Where each byte's two hex digits are in a UUID's text. */
const DIGITS = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/**
 * Writes the 16 bytes of the UUID at `s[from, from + 36)` (lower-case hex, dashes where they go;
 * `s` holds at least that many characters) at `target[at]`; false, with part of them written,
 * when it is not one.
 */
export function writeUuid(s: string, from: number, target: Uint8Array, at: number): boolean {
  if (s.charCodeAt(from + 8) !== 45 || s.charCodeAt(from + 13) !== 45 || s.charCodeAt(from + 18) !== 45 || s.charCodeAt(from + 23) !== 45) {
    return false;
  }
  for (let i = 0; i < 16; i++) {
    const d = from + DIGITS[i]!;
    const hi = HEX[s.charCodeAt(d)]!;
    const lo = HEX[s.charCodeAt(d + 1)]!;
    if ((hi | lo) < 0) return false;
    target[at + i] = (hi << 4) | lo;
  }
  return true;
}

/** Copies `from[start, end)` to `target[at]`: a loop, which for a few bytes costs less than Buffer's `copy`. */
export function copyBytes(from: Uint8Array, start: number, end: number, target: Uint8Array, at: number): number {
  for (let i = start; i < end; i++) target[at++] = from[i]!;
  return at;
}

/** The UUID (lower-case text) of the 16 bytes at `b[at]`. */
export function uuidAt(b: Uint8Array, at: number): string {
  const h = (i: number) => HEX_BYTE[b[at + i]!]!;
  return (
    h(0) +
    h(1) +
    h(2) +
    h(3) +
    '-' +
    h(4) +
    h(5) +
    '-' +
    h(6) +
    h(7) +
    '-' +
    h(8) +
    h(9) +
    '-' +
    h(10) +
    h(11) +
    h(12) +
    h(13) +
    h(14) +
    h(15)
  );
}

// ---- event-index: string keys, UUIDs as 16 bytes --------------------------------------------------

/** After `tenant|kind` in a compact index key: the UUID and the rank's digit follow. */
const MARK = 2;
/** After `tenant` in a compact index key of kind `events` (nearly all of them): the same. */
const MARK_EVENTS = 3;
const BAR = 124;
const EVENTS = '|events';

/**
 * The key codec of `event-index` (see the module comment): `tenant|kind|<uuid>|<digit>` with an
 * ASCII `tenant|kind` without characters below 5 as those bytes (for kind `events`, `tenant`
 * alone), a mark (MARK, MARK_EVENTS), 16 bytes and the digit; anything else as `keyCodecOf` writes
 * it. Undefined where `keyCodecOf` is.
 */
export function indexKeyCodec(root: RootDatabase): KeyCodec | undefined {
  const other = keyCodecOf(root);
  if (other === undefined) return undefined;
  return {
    writeKey(key: unknown, target: Uint8Array, position: number): number {
      if (typeof key === 'string') {
        const n = key.length;
        // Where the UUID starts: after `tenant|kind|`, 38 characters before the end.
        const u = n - 38;
        const rank = key.charCodeAt(n - 1);
        if (u >= 2 && key.charCodeAt(n - 2) === BAR && key.charCodeAt(u - 1) === BAR && rank >= 48 && rank <= 57) {
          // `tenant|kind` less `|events` when it ends so.
          const events = u >= 8 && key.startsWith(EVENTS, u - 8);
          const end = events ? u - 8 : u - 1;
          let i = 0;
          for (; i < end; i++) {
            const c = key.charCodeAt(i);
            if (c < 5 || c > 127) break;
            target[position + i] = c;
          }
          if (i === end && writeUuid(key, u, target, position + i + 1)) {
            target[position + i] = events ? MARK_EVENTS : MARK;
            target[position + i + 17] = rank;
            return position + i + 18;
          }
        }
      }
      return other.writeKey(key, target, position);
    },
    readKey(buffer: Uint8Array, start: number, end: number): unknown {
      for (let i = start; i < end; i++) {
        const b = buffer[i]!;
        if (b >= 5) continue;
        if ((b === MARK || b === MARK_EVENTS) && end - i === 18) {
          let prefix = '';
          for (let j = start; j < i; j++) prefix += String.fromCharCode(buffer[j]!);
          return `${prefix}${b === MARK_EVENTS ? EVENTS : ''}|${uuidAt(buffer, i + 1)}|${String.fromCharCode(buffer[end - 1]!)}`;
        }
        break;
      }
      return other.readKey(buffer, start, end);
    },
  };
}

// ---- the lists: binary keys -----------------------------------------------------------------------

/** The largest key LMDB takes from lmdb-js (4 KB pages). */
export const MAX_KEY_BYTES = 1978;

/** UTF-8 of `s` with bytes 0 and 1 written as 1 1 and 1 2 (so that 0 ends it), then `end` bytes of 0. */
function escaped(s: string, lead: number[], end: number): Buffer {
  const utf8 = Buffer.from(s, 'utf8');
  const out: number[] = [...lead];
  for (const b of utf8) {
    if (b <= 1) out.push(1, b + 1);
    else out.push(b);
  }
  for (let i = 0; i < end; i++) out.push(0);
  return Buffer.from(out);
}

const tenantParts = new Map<string, Buffer>();

/** The first part of every list key: the tenant's UTF-8, 0 and 1 escaped, then 0. */
export function tenantPart(tenant: string): Buffer {
  let part = tenantParts.get(tenant);
  if (part === undefined) {
    // Tenants are few; a process that meets more (a test, a hostile run) starts the cache again.
    if (tenantParts.size >= 10_000) tenantParts.clear();
    tenantParts.set(tenant, (part = escaped(tenant, [], 1)));
  }
  return part;
}

/**
 * A vehicle in a list key: its 16 bytes. Vehicles are storage keys, UUIDs; any other string is
 * written as 16 bytes of its SHA-256 (never read back: a vehicle's list is read under the part
 * made from its name, the same way).
 */
export function writeVehiclePart(vehicle: string, target: Buffer, at: number): number {
  if (vehicle.length !== 36 || !writeUuid(vehicle, 0, target, at)) {
    createHash('sha256').update(`otm vehicle\n${vehicle}`).digest().copy(target, at, 0, 16);
  }
  return at + 16;
}

/**
 * An event key at the end of a list key: a UUID as its 16 bytes; any other as 255, its UTF-8 with
 * 0 and 1 escaped, and 0, or two when that would make 16 bytes (so that 16 bytes are a UUID).
 */
export function writeKeyPart(key: string, target: Buffer, at: number): number {
  if (key.length === 36 && writeUuid(key, 0, target, at)) return at + 16;
  let part = escaped(key, [255], 1);
  if (part.length === 16) part = escaped(key, [255], 2);
  if (at + part.length > target.length) throw new Error(`Key was too large, max key size is ${MAX_KEY_BYTES}`);
  part.copy(target, at);
  return at + part.length;
}

/** The event key of the key part `b[at, end)` (`writeKeyPart`). */
export function readKeyPart(b: Uint8Array, at: number, end: number): string {
  if (end - at === 16) return uuidAt(b, at);
  let last = end;
  while (last > at + 1 && b[last - 1] === 0) last--;
  const bytes: number[] = [];
  for (let i = at + 1; i < last; i++) {
    const x = b[i]!;
    if (x === 1) bytes.push(b[++i]! - 1);
    else bytes.push(x);
  }
  return Buffer.from(bytes).toString('utf8');
}

/** Bytes of a time in a list key. */
export const TIME_BYTES = 7;
const MAX15 = 999_999_999_999_999;
const P48 = 2 ** 48;

/** A time (ms) in a list key: 7 bytes, big-endian; clamped as `pad15` clamps (before the epoch: 0). */
export function writeTime(ms: number, target: Buffer, at: number): number {
  const t = ms > 0 ? Math.min(MAX15, Math.trunc(ms)) : 0;
  const hi = Math.floor(t / P48);
  target[at] = hi;
  target.writeUIntBE(t - hi * P48, at + 1, 6);
  return at + TIME_BYTES;
}

/** The time `writeTime` wrote at `b[at]`. */
export const readTime = (b: Uint8Array, at: number): number =>
  b[at]! * P48 + b[at + 1]! * 2 ** 40 + b[at + 2]! * 2 ** 32 + b[at + 3]! * 2 ** 24 + ((b[at + 4]! << 16) | (b[at + 5]! << 8) | b[at + 6]!);

/**
 * Where a list key is made: one buffer a kind of key, and views of it by length, made once, so
 * that a key of a length seen before allocates nothing (lmdb-js copies a key at once).
 */
export class KeyScratch {
  readonly buf = Buffer.allocUnsafeSlow(MAX_KEY_BYTES + 64);
  private readonly views: Buffer[] = [];
  /** The view of the first `n` bytes. */
  view(n: number): Buffer {
    if (n > MAX_KEY_BYTES) throw new Error(`Key of size ${n} was too large, max key size is ${MAX_KEY_BYTES}`);
    return (this.views[n] ??= this.buf.subarray(0, n));
  }
}
