/**
 * Key layout shared by the embedded stores (LMDB entity store and the event log's index):
 * `tenant|kind|key|` then the lifecycle rank, so all versions of one document are adjacent.
 *
 * ordered-binary (lmdb's key encoding) turns NUL in a string key into an array separator, so the
 * separator is '|': tenants, kinds, UUIDs and ranks never contain it, and '~' sorts after them all.
 */
import { LIFECYCLES } from '@otm/core';

export const SEP = '|';
export const END = '~';
export const prefixOf = (tenant: string, kind: string, key: string) => `${tenant}${SEP}${kind}${SEP}${key}${SEP}`;

/** Every lifecycle rank, highest (realized) first. */
export const RANKS_DOWN: readonly number[] = Array.from({ length: LIFECYCLES.length + 1 }, (_, i) => LIFECYCLES.length - i);

/**
 * The ranks a read tries, in order: the one asked for, else all from the top. Reads probe them
 * with point gets: in the service, where every event-loop turn reads in a fresh read transaction,
 * that costs less than one step of a range cursor, which lmdb renews per transaction (a tight
 * loop in one transaction says the opposite, which is not how the service reads:
 * bench/diag/lmdb/lmdb-latest-version.mjs compares both).
 */
export const ranksToTry = (rank?: number): readonly number[] => (rank === undefined ? RANKS_DOWN : [rank]);
