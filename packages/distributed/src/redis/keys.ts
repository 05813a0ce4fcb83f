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
 * - `P:lr:{t:k:id}` string: the entity's list record (facets.ts `encodeListRecord`): when it last
 *   changed and the facets of each version, so that a unit knows which list members to replace.
 * - `P:l:{t:k:f}` sorted set (`f` = the facet, escaped), every score 0: the entities listed under
 *   facet `f`, members `${at padded to 15 digits}|${key}`, so that the lexical order of members is
 *   the keyset order (at, key) and ZRANGEBYLEX seeks to a position (lists.ts). A list lives in its
 *   own slot on Redis Cluster (its hash tag is the facet's, not an entity's).
 * - `P:f:{t}` stream: the tenant's change feed; `P:ff:{t}` string: the id of the newest change
 *   retention removed from it (feed.ts).
 * - `P:pos:{t}` hash: field = vehicle storage key, value = its latest position as JSON (positions.ts).
 * - `P:tenants` set: every tenant a unit of work wrote for (added in the unit's commit), so that
 *   the entity export finds the tenants' feeds without a SCAN of the keyspace; a slot of its own on
 *   Redis Cluster (no hash tag).
 * - `P:ax:{t}` string: the entity export's cursor in the tenant's feed, the last change copied into
 *   ClickHouse; `P:axl` string: the export's lease, the exporter that holds it (feed-export.ts).
 * - Webhook subscriptions (subscriptions.ts), in the tenant's slot: `P:ws:{t}:<id>` hash, one
 *   subscription; `P:wss:{t}` set, the ids of the tenant's subscriptions; `P:wsd:{t}:<id>` list, its
 *   recent delivery attempts (JSON, newest first); `P:wsl:{t}:<id>` string, the dispatcher holding
 *   its lease. `P:wsall` set, members `tenant\0id`: every subscription, for the dispatchers, and
 *   `P:wsdisp` sorted set, the dispatchers alive (each a slot of its own on Redis Cluster, like
 *   `P:tenants`).
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
  listRecord(t: string, k: string, id: string) {
    return `${this.prefix}:lr:${this.tag(t, k, id)}`;
  }
  /** The hash tag of a list: tenant, kind and facet (a slot of its own on Redis Cluster). */
  listTag(t: string, k: string, facet: string) {
    return `{${esc(t)}:${k}:${esc(facet)}}`;
  }
  list(t: string, k: string, facet: string) {
    return `${this.prefix}:l:${this.listTag(t, k, facet)}`;
  }
  /** The hash tag of a tenant's feed and positions. */
  tenantTag(t: string) {
    return `{${esc(t)}}`;
  }
  feed(t: string) {
    return `${this.prefix}:f:${this.tenantTag(t)}`;
  }
  feedFloor(t: string) {
    return `${this.prefix}:ff:${this.tenantTag(t)}`;
  }
  positions(t: string) {
    return `${this.prefix}:pos:${this.tenantTag(t)}`;
  }
  tenants() {
    return `${this.prefix}:tenants`;
  }
  exportCursor(t: string) {
    return `${this.prefix}:ax:${this.tenantTag(t)}`;
  }
  exportLease() {
    return `${this.prefix}:axl`;
  }
  webhook(t: string, id: string) {
    return `${this.prefix}:ws:${this.tenantTag(t)}:${esc(id)}`;
  }
  webhooksOf(t: string) {
    return `${this.prefix}:wss:${this.tenantTag(t)}`;
  }
  webhookDeliveries(t: string, id: string) {
    return `${this.prefix}:wsd:${this.tenantTag(t)}:${esc(id)}`;
  }
  webhookLease(t: string, id: string) {
    return `${this.prefix}:wsl:${this.tenantTag(t)}:${esc(id)}`;
  }
  allWebhooks() {
    return `${this.prefix}:wsall`;
  }
  webhookDispatchers() {
    return `${this.prefix}:wsdisp`;
  }
}
