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

export function decodeVersionBytes(kind: KindSegment, key: string, lifecycleRank: number, raw: Buffer): StoredDocument {
  const nl = raw.indexOf(10);
  const [modified, acceptedAt] = raw.toString('latin1', 0, nl).split(' ').map(Number) as [number, number];
  return new BytesVersion(kind, key, lifecycleRank, { modified, acceptedAt }, raw.subarray(nl + 1));
}
