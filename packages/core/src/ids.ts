import { createHash, randomUUID } from 'node:crypto';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const TRAILING_UUID_RE = /([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\/?$/i;
// RFC 4122 name-space id for URLs (appendix C).
const URL_NAMESPACE = Buffer.from('6ba7b8119dad11d180b400c04fd430c8', 'hex');

export const isUuid = (s: string): boolean => UUID_RE.test(s);
export const newId = (): string => randomUUID();

/** Name-based UUID (version 5, SHA-1) of `name` in the URL name space. */
export function uuidV5(name: string): string {
  const hash = createHash('sha1').update(URL_NAMESPACE).update(name, 'utf8').digest();
  hash[6] = (hash[6]! & 0x0f) | 0x50;
  hash[8] = (hash[8]! & 0x3f) | 0x80;
  const h = hash.subarray(0, 16).toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * The UUID under which an entity with this `id` is stored and found again with
 * `GET /api/v5/<kind>/{UUID}`:
 * - a UUID is its own key (compared without regard to case);
 * - a URI (or any other string) that ends in a UUID, such as `https://example.com/trips/<uuid>`,
 *   is found under that UUID;
 * - any other string is found under its name-based UUID (version 5, URL name space), which the
 *   PUT answer reports in the `Location` header.
 * The document keeps the `id` exactly as the client sent it.
 */
export function storageKey(id: string): string {
  if (UUID_RE.test(id)) return id.toLowerCase();
  const m = TRAILING_UUID_RE.exec(id);
  if (m?.[1]) return m[1].toLowerCase();
  return uuidV5(id);
}
