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
