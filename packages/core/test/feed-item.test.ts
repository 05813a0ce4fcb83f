/** The feed's item as written by hand (feed-item.ts `changeItem`) is what JSON.stringify of the same members gives. */
import { describe, expect, it } from 'vitest';
import { LIFECYCLES, changeItem, type FeedEntry } from '../src/index.js';

const reference = (e: FeedEntry, doc: string | undefined): string => {
  const head: Record<string, unknown> = { cursor: e.cursor, op: e.op, kind: e.kind, id: e.key };
  if (e.op === 'put' && e.lifecycleRank !== undefined && e.lifecycleRank > 0) head.lifecycle = LIFECYCLES[e.lifecycleRank - 1];
  const text = JSON.stringify(head);
  return doc === undefined ? text : `${text.slice(0, -1)},"document":${doc}}`;
};

describe('changeItem', () => {
  it('matches JSON.stringify for puts, deletes, lifecycles and ids that need escaping', () => {
    const doc = '{"id":"x","name":"Zürich \\"q\\" 🚚"}';
    const entries: FeedEntry[] = [
      { cursor: '1795667490255-0', at: 1, op: 'put', kind: 'vehicles', key: 'a', lifecycleRank: 0 },
      { cursor: '42', at: 1, op: 'put', kind: 'events', key: 'e"1\\\u0001é', lifecycleRank: 4 },
      { cursor: '43', at: 1, op: 'delete', kind: 'trips', key: 't' },
      ...[1, 2, 3, 5].map((r) => ({ cursor: `c${r}`, at: 1, op: 'put' as const, kind: 'actions' as const, key: 'k', lifecycleRank: r })),
    ];
    for (const e of entries) {
      expect(changeItem(e, undefined).toString('utf8')).toBe(reference(e, undefined));
      expect(changeItem(e, doc).toString('utf8')).toBe(reference(e, doc));
      expect(changeItem(e, Buffer.from(doc)).toString('utf8')).toBe(reference(e, doc));
      expect(() => JSON.parse(changeItem(e, doc).toString('utf8')) as unknown).not.toThrow();
    }
  });

  it('matches JSON.stringify for every ASCII character and some others in an id or a cursor', () => {
    const chars = [...Array.from({ length: 128 }, (_, c) => String.fromCharCode(c)), '\u0080', 'é', '\u2028', '\ud800', '🚚'];
    for (const c of chars) {
      for (const e of [
        { cursor: '7', at: 1, op: 'put' as const, kind: 'events' as const, key: `7e000000-${c}-x`, lifecycleRank: 3 },
        { cursor: `17-${c}`, at: 1, op: 'delete' as const, kind: 'trips' as const, key: 'plain-id' },
      ]) {
        expect(changeItem(e, undefined).toString('utf8'), JSON.stringify(c)).toBe(reference(e, undefined));
        expect(changeItem(e, '{}').equals(Buffer.from(reference(e, '{}'))), JSON.stringify(c)).toBe(true);
      }
    }
  });
});
