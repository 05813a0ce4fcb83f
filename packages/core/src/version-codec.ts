/**
 * How entity stores keep one version: `modified acceptedAt \n json` — the version stamp, then the
 * document exactly as it is answered (so a GET sends stored text without parsing it).
 */
import type { KindSegment } from '@otm/model';
import type { StoredDocument, VersionStamp } from './ports.js';

export const encodeVersion = (json: string, stamp: VersionStamp): string => `${stamp.modified} ${stamp.acceptedAt}\n${json}`;

export function decodeVersion(kind: KindSegment, key: string, lifecycleRank: number, raw: string): StoredDocument {
  const nl = raw.indexOf('\n');
  const [modified, acceptedAt] = raw.slice(0, nl).split(' ').map(Number) as [number, number];
  return { kind, key, lifecycleRank, json: raw.slice(nl + 1), stamp: { modified, acceptedAt } };
}

/**
 * A stored version read as bytes (`modified acceptedAt \n json` in UTF-8): the document's bytes are
 * a view of `raw`, answered as they are; its text is decoded only if something asks for `json`.
 */
class BytesVersion implements StoredDocument {
  private text: string | undefined;

  constructor(
    readonly kind: KindSegment,
    readonly key: string,
    readonly lifecycleRank: number,
    readonly stamp: VersionStamp,
    readonly bytes: Buffer,
  ) {}

  get json(): string {
    return (this.text ??= this.bytes.toString('utf8'));
  }
}

/**
 * `bytes` in memory of their own, copied if they are a view of a larger buffer. Whatever a cache
 * keeps for long must be: a small Buffer made from a string is a slice of Node's 8 KiB pool, and
 * one read from a socket (ioredis) a slice of the chunk it arrived in, so a cached document of
 * 600 bytes would keep 8 or 64 KiB alive, and a cache bounded by its documents' sizes would hold
 * many times that in buffers. `Buffer.allocUnsafeSlow` never takes from the pool.
 */
export function ownedBytes(bytes: Buffer): Buffer {
  if (bytes.byteOffset === 0 && bytes.buffer.byteLength === bytes.length) return bytes;
  const own = Buffer.allocUnsafeSlow(bytes.length);
  bytes.copy(own);
  return own;
}

/** The UTF-8 bytes of `text` in memory of their own (see `ownedBytes`). */
export function ownedUtf8(text: string): Buffer {
  const own = Buffer.allocUnsafeSlow(Buffer.byteLength(text));
  own.write(text);
  return own;
}

/**
 * A version as a cache keeps it: its UTF-8 bytes alone, in memory of their own, its text decoded
 * each time something asks for `json` and not kept (GET answers the bytes; the text kept beside
 * them would double what each cached document costs).
 */
class KeptVersion implements StoredDocument {
  constructor(
    readonly kind: KindSegment,
    readonly key: string,
    readonly lifecycleRank: number,
    readonly stamp: VersionStamp | undefined,
    readonly bytes: Buffer,
  ) {}

  get json(): string {
    return this.bytes.toString('utf8');
  }
}

/**
 * `doc` as a cache of latest versions keeps it (both stores' caches): its bytes in memory of
 * their own (see `ownedBytes`), its text not kept, nor its `value`.
 */
export function keptVersion(doc: StoredDocument): StoredDocument {
  if (doc instanceof KeptVersion) return doc;
  const bytes = doc.bytes === undefined ? ownedUtf8(doc.json) : ownedBytes(doc.bytes);
  return new KeptVersion(doc.kind, doc.key, doc.lifecycleRank, doc.stamp, bytes);
}

/** What a document kept by `keptVersion` costs its cache: its bytes and about 100 more. */
export const keptSize = (doc: StoredDocument): number => (doc.bytes?.length ?? doc.json.length) + 100;

export function decodeVersionBytes(kind: KindSegment, key: string, lifecycleRank: number, raw: Buffer): StoredDocument {
  const nl = raw.indexOf(10);
  const [modified, acceptedAt] = raw.toString('latin1', 0, nl).split(' ').map(Number) as [number, number];
  return new BytesVersion(kind, key, lifecycleRank, { modified, acceptedAt }, raw.subarray(nl + 1));
}
