/**
 * The module a bulk checking thread runs (see thread-pool.ts): `checkBulk` on the bodies the
 * event loop hands it. Every validator is compiled when the thread starts, not on its first body.
 * The answer's typed arrays, and the body when items are spans of it, are moved back to the event
 * loop rather than copied.
 */
import { Piscina } from 'piscina';
import { precompile } from '@otm/model';
import { checkBulk, type BulkCheckTask, type CheckedBulk, type RefusedBulk } from './check-body.js';

precompile();

export default function check(task: BulkCheckTask): CheckedBulk | RefusedBulk {
  const answer = checkBulk(task);
  if (!answer.ok) return answer;
  const moved: ArrayBuffer[] = [];
  for (const a of [answer.body, answer.spans, answer.outcome, answer.ranks, answer.modified, answer.facts?.flags, answer.facts?.numbers]) {
    if (a !== undefined && a.buffer instanceof ArrayBuffer && !moved.includes(a.buffer)) moved.push(a.buffer);
  }
  const movable = { [Piscina.transferableSymbol]: moved, [Piscina.valueSymbol]: answer } as unknown as Parameters<typeof Piscina.move>[0];
  return Piscina.move(movable) as unknown as CheckedBulk;
}
