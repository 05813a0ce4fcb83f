/**
 * The Redis keys of the entity store (`P` = the key prefix, default `otm`; `{t:k:id}` = tenant,
 * kind and storage key, escaped, used as the Redis Cluster hash tag so that every key of one
 * entity lives in one slot):
 * - `P:e:{t:k:id}` hash: field = lifecycle rank `0`..`5`, value = `${modified} ${acceptedAt}\n${json}`
 *   (the version stamp, then the document as answered). GET without a rank takes the highest.
 * - `P:h:{t:k:id}` set: the entities holding this one inline, members `holderKind\0holderKey\0rank`.
 * - `P:p:{t:k:id}` sorted set + `P:pe:{t:k:id}` hash: effects waiting for this entity. Score =
 *   acceptedAt, member = `${acceptedAt padded to 15 digits}\0${eventKey}` (so equal scores are
 *   ordered by event key, exactly like the LMDB key), the hash maps the member to the effect's JSON.
 */

/** Separates the parts of a set or sorted-set member. */
export const SEP = '\u0000';
/** acceptedAt as 15 digits: members of equal score sort by event key. */
export const pad = (n: number) => String(Math.max(0, Math.trunc(n))).padStart(15, '0');
/** Escapes what would break the hash tag or the `:` separators. */
const esc = (s: string) => s.replace(/[%:{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

export class Keys {
  constructor(private readonly prefix: string) {}
  tag(tenant: string, kind: string, key: string) {
    return `{${esc(tenant)}:${kind}:${esc(key)}}`;
  }
  entity(t: string, k: string, id: string) {
    return this.entityOfTag(this.tag(t, k, id));
  }
  entityOfTag(tag: string) {
    return `${this.prefix}:e:${tag}`;
  }
  holders(t: string, k: string, id: string) {
    return `${this.prefix}:h:${this.tag(t, k, id)}`;
  }
  pending(t: string, k: string, id: string) {
    return `${this.prefix}:p:${this.tag(t, k, id)}`;
  }
  pendingEffects(t: string, k: string, id: string) {
    return `${this.prefix}:pe:${this.tag(t, k, id)}`;
  }
}
