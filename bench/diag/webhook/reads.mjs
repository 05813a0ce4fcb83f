/**
 * What a change costs the dispatcher to read, in-process, without HTTP: the change feed read in
 * pages of 100 (the event log's changes, in blocks of up to 2,500 a commit, as a bulk write leaves
 * them), and the documents of each page through query's `Finder.documents`, either one at a time
 * (`Finder.version`: the entity store, then the event log's `get`) or together (the event log's
 * `documentsOf`: one index lookup each, one pread a run of adjacent records, bytes), and the part
 * of either that is the entity store's miss (it is asked first, as `Finder.version` asks). The
 * two document reads are alternated page by page, so that the machine's noise falls on both
 * alike; CPU time of this process (user + system), which a shared machine moves less than the
 * clock.
 *
 *   npm run build
 *   node bench/diag/webhook/reads.mjs [events=100000] [rounds=3] [--entities]
 *
 * With --entities, also the entity store's feed (an entry a change, its document kept): 50,000
 * vehicles read in pages of 1,000, the feed alone and `Finder.changes` (the feed and its items).
 *
 * Run from a copy of an older build to compare the feed read (`one at a time` is the old path in
 * any build: an event store without `documentsOf`).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openEmbeddedStores } from '@otm/embedded';
import { Finder } from '@otm/query';

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const EVENTS = Number(args[0] ?? 100_000);
const ROUNDS = Number(args[1] ?? 3);
const ENTITIES = process.argv.includes('--entities');
const PAGE = 100;
const TENANT = 'bench';
const uuid = (prefix, i) => `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
const cpu = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-webhook-reads-'));
const s = openEmbeddedStores(dir);
try {
  for (let b = 0; b < EVENTS; b += 5_000) {
    const writes = [];
    for (let i = b; i < Math.min(EVENTS, b + 5_000); i++) {
      const key = uuid('7e000000', i);
      const json = JSON.stringify({
        id: key,
        eventType: 'locationUpdateEvent',
        lifecycle: 'actual',
        creationDate: new Date(Date.UTC(2026, 2, 2) + i * 1000).toISOString(),
        geoReference: { type: 'latLonPointGeoReference', lat: 52 + (i % 1000) / 10_000, lon: 5 + (i % 977) / 10_000 },
        vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: uuid('7c000000', i % 1000) },
      });
      writes.push({ op: 'put', tenant: TENANT, doc: { kind: 'events', key, lifecycleRank: 4, json } });
    }
    await s.events.write(writes);
  }
  await s.events.settled();
  const together = new Finder({ entities: s.entities, events: s.events });
  // The same event store without its batched read: what Finder.documents did before it.
  const ev = s.events;
  const alone = new Finder({
    entities: s.entities,
    events: { get: (...a) => ev.get(...a), list: (q) => ev.list(q), track: (q) => ev.track(q) },
  });
  const batched = typeof ev.documentsOf === 'function' && together.documents !== undefined;
  const kinds = new Set(['events']);
  console.log(
    `webhook reads: ${EVENTS.toLocaleString('en')} location events, pages of ${PAGE}${batched ? '' : ' (this build has no documentsOf)'}`,
  );
  for (let round = 1; round <= ROUNDS; round++) {
    let feedUs = 0;
    let aloneUs = 0;
    let togetherUs = 0;
    let entitiesUs = 0;
    let changes = 0;
    let after;
    for (let page = 0; ; page++) {
      await new Promise((r) => setImmediate(r));
      let c0 = cpu();
      const p = await s.entities.feed.read({ tenant: TENANT, limit: PAGE, kinds, ...(after === undefined ? {} : { after }) });
      feedUs += cpu() - c0;
      if (p.entries.length === 0) break;
      changes += p.entries.length;
      after = p.next;
      // Alternated: which goes first changes every page (each in a turn of its own).
      const order = page % 2 === 0 ? [alone, together] : [together, alone];
      for (const f of order) {
        await new Promise((r) => setImmediate(r));
        c0 = cpu();
        const docs = await f.documents(TENANT, p.entries);
        const us = cpu() - c0;
        if (docs.some((d) => d === undefined)) throw new Error('a document was not found');
        if (f === alone) aloneUs += us;
        else togetherUs += us;
      }
      // Of which the entity store's misses, asked first for every event (as Finder.version asks).
      await new Promise((r) => setImmediate(r));
      c0 = cpu();
      await Promise.all(p.entries.map((e) => s.entities.get(TENANT, e.kind, e.key, e.lifecycleRank)));
      entitiesUs += cpu() - c0;
    }
    console.log(
      `  round ${round}: feed read ${(feedUs / changes).toFixed(2)} µs a change; documents one at a time ${(aloneUs / changes).toFixed(2)} µs, ` +
        `together ${(togetherUs / changes).toFixed(2)} µs; of either, the entity store's misses ${(entitiesUs / changes).toFixed(2)} µs ` +
        `(${changes.toLocaleString('en')} changes)`,
    );
  }
  if (ENTITIES) {
    const VEHICLES = 50_000;
    const stamp = { modified: 0, acceptedAt: 1 };
    for (let b = 0; b < VEHICLES; b += 1_000) {
      await s.entities.unit(async (tx) => {
        for (let i = b; i < b + 1_000; i++) {
          const key = uuid('7c000001', i);
          const json = JSON.stringify({ id: key, name: `vehicle ${i}`, licensePlate: `AB-${i}`, pad: 'x'.repeat(200) });
          tx.put('fleet', { kind: 'vehicles', key, lifecycleRank: 0, json, stamp });
        }
      });
    }
    console.log(`entity feed: ${VEHICLES.toLocaleString('en')} vehicles, pages of 1,000`);
    for (let round = 1; round <= ROUNDS; round++) {
      let feedUs = 0;
      let changesUs = 0;
      let n = 0;
      let after;
      for (;;) {
        await new Promise((r) => setImmediate(r));
        let c0 = cpu();
        const p = await s.entities.feed.read({ tenant: 'fleet', limit: 1_000, ...(after === undefined ? {} : { after }) });
        feedUs += cpu() - c0;
        if (p.entries.length === 0) break;
        await new Promise((r) => setImmediate(r));
        c0 = cpu();
        await together.changes('fleet', undefined, 1_000, after);
        changesUs += cpu() - c0;
        n += p.entries.length;
        after = p.next;
      }
      console.log(`  round ${round}: feed read ${(feedUs / n).toFixed(2)} µs a change; Finder.changes ${(changesUs / n).toFixed(2)} µs`);
    }
  }
} finally {
  await s.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
