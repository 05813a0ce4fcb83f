/**
 * Lists of entities on Redis (the `Lister` port of the Redis entity store): for every (tenant,
 * kind, facet) a sorted set whose members are `${at as 15 digits}|${key}`, every score 0 (keys.ts).
 * With equal scores Redis orders members by their bytes, and a fixed-width time first makes that
 * order the keyset order (at, key), so a page is one ZRANGEBYLEX: an O(log n) seek to the first
 * member after the cursor (or at `since`), then the members up to `limit`, whatever the size of
 * the list. A score holding `at` would not do: members of equal score would still need the key in
 * the member, and ZRANGEBYSCORE cannot start strictly after (at, key).
 *
 * A unit keeps the lists in step with the entities in its own commit (transactions.ts
 * `setListRecord`): it removes the entity's old members (the facets of its previous list record at
 * the previous time) and adds the new ones, and keeps the record (`P:lr:`) that says which members
 * are there. On Redis Cluster a list is a slot of its own, so it changes in its own MULTI (see
 * transactions.ts): a unit that fails between groups may leave a member of an old position until
 * the batch is replayed. The query checks every filter against the document it answers, so a
 * stale member can at worst list an entity once more at its old time; it never hides one.
 */
import type { ListPosition, ListScan } from '@otm/core';

/** Digits of `at` in a member: ms since the epoch up to the year 33658. */
const AT_DIGITS = 15;
const AT_MAX = 10 ** AT_DIGITS - 1;

/** `at` as AT_DIGITS digits (clamped to what they hold; rounded up, as bounds on integers need). */
const atText = (at: number): string => String(Math.min(AT_MAX, Math.max(0, Math.ceil(at)))).padStart(AT_DIGITS, '0');

/** The member of an entity listed at `at`. */
export const listMember = (at: number, key: string): string => `${atText(at)}|${key}`;

/** The position a member stands for. */
export function parseListMember(member: string): ListPosition {
  return { at: Number(member.slice(0, AT_DIGITS)), key: member.slice(AT_DIGITS + 1) };
}

/**
 * The ZRANGEBYLEX bounds of a scan: the members strictly after `after` and at or after `since`
 * (the later of the two), and before `before`; undefined when nothing can match.
 */
export function listBounds(scan: Pick<ListScan, 'after' | 'since' | 'before'>): { min: string; max: string } | undefined {
  const { after, since, before } = scan;
  let min = '-';
  // `${since}|` sorts before every member at `since` and after every member before it.
  if (since !== undefined && since > 0) min = `[${atText(since)}|`;
  // Strictly after the member of `after`; tighter than `since` unless it lies before it.
  if (after !== undefined && (since === undefined || after.at >= since)) min = `(${listMember(after.at, after.key)}`;
  let max = '+';
  if (before !== undefined) {
    if (before <= 0) return undefined;
    max = `(${atText(before)}|`;
  }
  return { min, max };
}
