/** The LMDB index of the event log: what happens when LMDB does not commit it. */
import { ABORT } from 'lmdb';
import { describe, expect, it, vi } from 'vitest';
import { AdapterError } from '@otm/core';
import { doc, failCommits, put, useTempStores, value, withLmdb } from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

/**
 * The next `n` index commits run their callback, then fail with `error()` (nothing of them is
 * stored: aborted); the ones after commit as usual.
 */
function failNextCommits(s: ReturnType<typeof openAt>, n: number, error: () => Error): void {
  const root = (s.events as unknown as { opts: { root: { childTransaction: (fn: () => unknown) => Promise<unknown> } } }).opts.root;
  const real = root.childTransaction.bind(root);
  let failing = n;
  root.childTransaction = (fn) =>
    failing-- > 0
      ? real(() => {
          fn();
          return ABORT;
        }).then(() => {
          throw error();
        })
      : real(fn);
}

describe('event log index', () => {
  it('when LMDB fails to commit the index, answered events stay readable and the next start indexes them from the log', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { warn: (m) => warnings.push(m) });
    await s.events.write([put('before', doc(1))]);
    await s.events.settled(); // 'before' is in the index and the checkpoint after it
    // From here on every LMDB commit of the index fails (a full disk under LMDB, say).
    const restore = failCommits(s);
    await s.events.write([put('during', doc(2))]);
    await s.events.settled(); // its commit failed
    expect(warnings.join()).toMatch(/LMDB did not commit \(MDB_MAP_FULL\)/);
    expect(await value('otm_event_index_failed')).toBe(1);
    expect((await s.events.get('t', 'events', 'during'))?.json).toBe(doc(2));
    // Later index commits succeed again; the checkpoint must still not move past 'during'.
    restore();
    await s.events.write([put('after', doc(3))]);
    await closeIt(s);
    const again = openAt(dir);
    for (const [k, i] of [
      ['before', 1],
      ['during', 2],
      ['after', 3],
    ] as const)
      expect((await again.events.get('t', 'events', k))?.json).toBe(doc(i));
  });

  it('a commit that fails after its transaction was built is tried again by itself, lists and feed included', async () => {
    const dir = tmp();
    const s = openAt(dir, { warn: () => {} });
    await s.events.write([put('before', doc(1))]);
    await s.events.settled();
    // The next two index commits run their callback, then fail.
    failNextCommits(s, 2, () => new Error('MDB_MAP_FULL: Environment mapsize limit reached'));
    await s.events.write([put('during', doc(2))]);
    await s.events.settled(); // its commit failed; tried again after a backoff, by itself
    expect(await value('otm_event_index_failed')).toBe(1);
    await vi.waitFor(async () => expect(await value('otm_event_index_failed')).toBe(0), { timeout: 10_000 });
    // Listed, with its feed entry: the retry recorded what the failed attempt had built.
    const listed = await s.events.list({ tenant: 't', kind: 'events', facet: '', limit: 10 });
    expect(listed.map((e) => e.key).sort()).toEqual(['before', 'during']);
    const feed = await s.entities.feed.read({ tenant: 't', limit: 10 });
    expect(feed.entries.map((e) => e.key)).toEqual(['before', 'during']);
  });

  it('a failure whose cause lmdb-js gives late (or never) does not mark the index down after its retry committed', async () => {
    const dir = tmp();
    const warnings: string[] = [];
    const s = openAt(dir, { warn: (m) => warnings.push(m) });
    await s.events.write([put('before', doc(1))]);
    await s.events.settled();
    // lmdb-js's own shape: a bare "Commit failed" whose `commitError` is a promise still pending
    // when the retry (after about half a second) commits.
    failNextCommits(s, 1, () =>
      Object.assign(new Error('Commit failed (see commitError for details)'), { commitError: new Promise(() => {}) }),
    );
    await s.events.write([put('during', doc(2))]);
    const [part] = s.events.parts();
    // The retry commits; then the cause's wait (1 s) ends: the part must be up, and stay up.
    await vi.waitFor(() => expect(warnings.join('\n')).toMatch(/LMDB did not commit .*committed since/), { timeout: 10_000 });
    expect(part!.status().up).toBe(true);
    expect(await value('otm_event_index_failed')).toBe(0);
    expect((await s.events.get('t', 'events', 'during'))?.json).toBe(doc(2));
  });

  it('reads positions of 16 bytes only: another value is a damaged index, a non-retryable AdapterError', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write([put('k', doc(1))]);
    await closeIt(s);
    await withLmdb(dir, (root) => {
      const index = root.openDB<Buffer, string>({ name: 'event-index', encoding: 'binary' });
      const entries = [...index.getRange({})].map(({ key, value: v }) => [key, Buffer.from(v)] as const);
      expect(entries.map(([, v]) => v.length)).toEqual([16]);
      root.transactionSync(() => entries.forEach(([k, v]) => index.putSync(k, v.subarray(0, 12))));
    });
    const again = openAt(dir);
    const refused = await again.events.get('t', 'events', 'k').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({ adapter: 'event-log', retryable: false, message: expect.stringMatching(/12 bytes.*damaged/) });
  });
});
