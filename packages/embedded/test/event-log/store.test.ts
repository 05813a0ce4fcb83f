/** The event store as a whole: documents kept out of LMDB, answered as written, found under their tenant, a closed store. */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { open } from 'lmdb';
import { AdapterError } from '@otm/core';
import { doc, lastSegment, put, useTempStores } from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

describe('event log store', () => {
  it('keeps the documents out of LMDB: the store file holds only the index', async () => {
    const dir = tmp();
    const s = openAt(dir);
    const big = JSON.stringify({ id: 'big', text: 'y'.repeat(200_000) });
    await s.events.write([put('big', big)]);
    expect((await s.events.get('t', 'events', 'big'))?.json).toBe(big);
    expect(fs.statSync(lastSegment(dir)).size).toBeGreaterThan(200_000);
    await closeIt(s);
    expect(fs.statSync(path.join(dir, 'store', 'otm.mdb')).size).toBeLessThan(200_000);
  });

  it('answers the stored bytes as written', async () => {
    const s = openAt(tmp());
    const json = JSON.stringify({ id: 'u', name: 'Zürich \u2028 \u0000 "q" 🚚' });
    await s.events.write([put('u', json)]);
    const got = await s.events.get('t', 'events', 'u');
    expect(got?.json).toBe(json);
    expect(got?.bytes?.equals(Buffer.from(json))).toBe(true);
  });

  it('indexes keys of any tenant so that they are found again after a reopen, each key once', async () => {
    // Tenants with 'é', with a control character, one starting below 28: lmdb's key encoding
    // escapes such characters; the index must still find each key, and only under its tenant.
    const tenants = ['t', 'acme.eu_1-2', 'café', 'a\u0003b', '\u001bx', '~'];
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write(
      tenants.map((tenant, i) => ({ op: 'put', tenant, doc: { kind: 'events', key: `k${i}`, lifecycleRank: 4, json: doc(i) } })),
    );
    await closeIt(s);
    const again = openAt(dir);
    for (const [i, tenant] of tenants.entries()) {
      expect((await again.events.get(tenant, 'events', `k${i}`))?.json).toBe(doc(i));
      // Under no other tenant (a prefix of the key, or a neighbour in the key order).
      expect(await again.events.get(`${tenant}x`, 'events', `k${i}`)).toBeUndefined();
    }
    await closeIt(again);
    // The index holds each key once, as lmdb's own encoding of the string would.
    const root = open({ path: path.join(dir, 'store', 'otm.mdb'), maxDbs: 8, compression: false });
    try {
      const index = root.openDB<Buffer, string>({ name: 'event-index', encoding: 'binary' });
      expect([...index.getKeys()].sort()).toEqual(tenants.map((t, i) => `${t}|events|k${i}|4`).sort());
    } finally {
      await root.close();
    }
  });

  it('a closed store refuses writes and close waits for queued ones', async () => {
    const dir = tmp();
    const s = openAt(dir);
    const pending = s.events.write([put('last', doc(5))]);
    await closeIt(s);
    await pending;
    await expect(s.events.write([put('late', doc(6))])).rejects.toThrow(/closed/);
    const again = openAt(dir);
    expect((await again.events.get('t', 'events', 'last'))?.json).toBe(doc(5));
  });

  it('refuses a write to a closed store with a retryable AdapterError (the process that opens the store next can take it)', async () => {
    const s = openAt(tmp());
    await closeIt(s);
    const refused = await s.events.write([put('late', doc(6))]).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({ name: 'AdapterError', adapter: 'event-log', retryable: true });
  });
});

describe('event log store: back-pressure', () => {
  it('keeps the changes waiting for the index commit bounded when a writer outpaces it', async () => {
    const { INDEX_BACKLOG_MAX } = await import('../../src/event-log/store.js');
    const s = openAt(tmp());
    const writer = (s.events as unknown as { writer: { behind: number } }).writer;
    const chunk = 10_000;
    let most = 0;
    for (let b = 0; b < (INDEX_BACKLOG_MAX / chunk) * 2.5; b++) {
      const writes = Array.from({ length: chunk }, (_, i) => {
        const n = b * chunk + i;
        const json = `{"id":"e${n}","eventType":"locationUpdateEvent","creationDate":"2026-03-02T00:00:00Z","geoReference":{"type":"latLonPointGeoReference","lat":52,"lon":5},"vehicle":{"associationType":"reference","entityType":"vehicle","uuid":"v${n % 50}"}}`;
        return put(`e${n}`, json);
      });
      await s.events.write(writes);
      most = Math.max(most, writer.behind);
    }
    // Without it the backlog grew with every write (the fill ran out of memory at 10 million).
    expect(most).toBeLessThan(INDEX_BACKLOG_MAX + 2 * chunk);
    expect((await s.events.get('t', 'events', `e${INDEX_BACKLOG_MAX * 2.5 - 1}`))?.json).toContain('"id"');
  }, 60_000);
});
