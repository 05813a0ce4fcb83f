/**
 * What the embedded event store costs an event on disk and in memory: N location events of V
 * vehicles (one a second each, ids as a fleet makes them: random UUIDs, from a fixed seed so that
 * every run stores the same bytes) written through the embedded stores as `otm serve` opens them
 * (`openEmbeddedStores`: the event log, its LMDB index, lists, tracks, feed entries and latest
 * positions), 5,000 events a write, two writes in flight (as bulk bodies arrive). Then:
 *
 * - the process's memory (/proc/self/status: VmRSS and its anonymous and file-backed parts; of the
 *   anonymous part, V8's heap and the memory outside it, `process.memoryUsage()`; this script's own
 *   array of the 1,000,000 ids is in the heap) and the LMDB file's mappings (/proc/self/smaps: how
 *   many, their size, what of them is resident), after the ingest and again after reading
 *   everything back (each event by its key, each vehicle's list and the list of all events, a page
 *   of 1,000 at a time), each after a full collection when node runs with --expose-gc;
 * - the LMDB file's size, and for each database the bytes of its pages (branch, leaf, overflow:
 *   lmdb-js `getStats`, LMDB's `mdb_stat`) an event, its entries, and its pages' fill (the bytes
 *   its entries take, key, value and LMDB's 10 bytes of node and pointer, against its leaf and
 *   overflow pages' bytes), from a second process that opens the file once the stores are closed;
 * - the segment files' bytes an event.
 *
 * After `npm run build`:
 *
 *   node --expose-gc bench/diag/lmdb/index-bytes.mjs [events=1000000] [vehicles=1000] [tenant=acme]
 *
 * The data folder is a temporary one, removed at the end (OTM_DIAG_KEEP=1 keeps it and prints
 * where it is).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);

// ---- the second process: per-database figures of a closed data folder -------------------------
if (process.argv[2] === '--stats') {
  const { open } = await import('lmdb');
  const file = process.argv[3];
  const root = open({ path: file, readOnly: true, maxDbs: 64 });
  const names = [...root.getKeys({})].filter((k) => typeof k === 'string');
  const out = { pageSize: 0, dbs: [], free: undefined, lastPage: 0 };
  const pagesOf = (s) => s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages;
  for (const name of names) {
    const db = root.openDB({ name, encoding: 'binary', keyEncoding: 'binary' });
    const s = db.getStats();
    out.pageSize = s.pageSize;
    out.lastPage = s.lastPageNumber;
    out.free ??= s.free;
    // What the entries take: key, value, and LMDB's node header (8 bytes) and pointer (2).
    let used = 0;
    for (const { key, value } of db.getRange({})) used += key.length + value.length + 10;
    out.dbs.push({
      name,
      branch: s.treeBranchPageCount,
      leaf: s.treeLeafPageCount,
      overflow: s.overflowPages,
      pages: pagesOf(s),
      entries: s.entryCount,
      used,
    });
  }
  out.main = root.getStats().root;
  root.close();
  process.stdout.write(JSON.stringify(out));
  process.exit(0);
}

// ---- the measured process ---------------------------------------------------------------------
const { openEmbeddedStores } = await import('../../../packages/embedded/dist/index.js');

const N = Number(process.argv[2] ?? 1_000_000);
const V = Number(process.argv[3] ?? 1000);
const TENANT = process.argv[4] ?? 'acme';
const PER_WRITE = 5_000;
const T0 = Date.UTC(2026, 2, 1, 6, 0, 0);

/** A fixed-seed generator (xorshift128+ halves), so that every run writes the same ids. */
function seeded(seed = 0x9e3779b9) {
  let a = seed >>> 0;
  let b = 0x6c078965;
  let c = 0xdeadbeef;
  let d = 0x12345678;
  return () => {
    const t = a ^ (a << 11);
    a = b;
    b = c;
    c = d;
    d = (d ^ (d >>> 19) ^ (t ^ (t >>> 8))) >>> 0;
    return d;
  };
}
const rand = seeded();
const hex8 = () => rand().toString(16).padStart(8, '0');
/** A version 4 UUID, lower case, as a fleet's devices make them. */
function uuid() {
  const a = hex8();
  const b = hex8();
  const c = hex8();
  const d = hex8();
  return `${a}-${b.slice(0, 4)}-4${b.slice(5, 8)}-${((parseInt(c[0], 16) & 3) | 8).toString(16)}${c.slice(1, 4)}-${c.slice(4)}${d}`;
}
const vehicles = Array.from({ length: V }, uuid);

/** Event i: vehicle i % V, one a second each, a few ms apart between vehicles. */
function event(i) {
  const v = i % V;
  const t = T0 + Math.floor(i / V) * 1000 + (v % 1000);
  const id = uuid();
  const json =
    `{"eventType":"locationUpdateEvent","id":"${id}","lifecycle":"actual","creationDate":"${new Date(t).toISOString()}",` +
    `"geoReference":{"type":"latLonPointGeoReference","lat":${(52 + (i % 1000) / 10000).toFixed(4)},"lon":${(5.4 + (i % 977) / 10000).toFixed(4)},` +
    `"speed":{"value":${50 + (i % 30)},"unit":"km/h"},"heading":{"value":${i % 360},"unit":"degrees"}},` +
    `"vehicle":{"associationType":"reference","entityType":"vehicle","uuid":"${vehicles[v]}"}}`;
  return { id, json };
}

const MB = (n) => (n / 1048576).toFixed(1);

/** The process's memory, and the LMDB file's mappings (count, size, resident). */
function memory(mdb) {
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  let maps = 0;
  let mapped = 0;
  let resident = 0;
  let current;
  for (const line of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const m = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (m) {
      current = m[1] === mdb;
      if (current) maps++;
      continue;
    }
    if (!current) continue;
    const f = /^(Size|Rss):\s+(\d+) kB/.exec(line);
    if (f?.[1] === 'Size') mapped += Number(f[2]) * 1024;
    else if (f?.[1] === 'Rss') resident += Number(f[2]) * 1024;
  }
  const { heapTotal, external } = process.memoryUsage();
  return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile'), maps, mapped, resident, heapTotal, external };
}

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-diag-index-bytes-'));
const mdb = path.join(dataDir, 'store', 'otm.mdb');
const stores = openEmbeddedStores(dataDir, { warn: (m) => console.error(m) });
const { events } = stores;
const ids = new Array(N);
let written = 0;
const cpu0 = process.cpuUsage();
const t0 = performance.now();
const writer = async () => {
  while (written < N) {
    const from = written;
    const to = Math.min(N, from + PER_WRITE);
    written = to;
    const writes = [];
    for (let i = from; i < to; i++) {
      const { id, json } = event(i);
      ids[i] = id;
      writes.push({ op: 'put', tenant: TENANT, doc: { kind: 'events', key: id, lifecycleRank: 4, json } });
    }
    await events.write(writes);
  }
};
await Promise.all([writer(), writer()]);
await events.settled();
const cpu = process.cpuUsage(cpu0);
const wall = performance.now() - t0;
global.gc?.();
const afterIngest = memory(mdb);

// Read everything back: each event by its key, each vehicle's list, the list of all events.
let read = 0;
for (const id of ids) if ((await events.get(TENANT, 'events', id)) !== undefined) read++;
let listed = 0;
const page = async (facet) => {
  let after;
  for (;;) {
    const got = await events.list({ tenant: TENANT, kind: 'events', facet, limit: 1000, ...(after ? { after } : {}) });
    listed += got.length;
    if (got.length < 1000) return;
    const last = got[got.length - 1];
    after = { at: last.at, key: last.key };
  }
};
for (const v of vehicles) await page(`vehicle=${v}`);
await page('');
global.gc?.();
const afterRead = memory(mdb);
if (read !== N || listed !== 2 * N) throw new Error(`read back ${read} events and ${listed} list entries, not ${N} and ${2 * N}`);

await stores.close();
const fileBytes = fs.statSync(mdb).size;
const segmentBytes = fs
  .readdirSync(path.join(dataDir, 'events'))
  .reduce((a, f) => a + fs.statSync(path.join(dataDir, 'events', f)).size, 0);
const stats = JSON.parse(execFileSync(process.execPath, [SELF, '--stats', mdb], { encoding: 'utf8', maxBuffer: 1 << 20 }));
if (process.env.OTM_DIAG_KEEP === '1') console.log(`data folder kept: ${dataDir}`);
else fs.rmSync(dataDir, { recursive: true, force: true });

const per = (bytes) => (bytes / N).toFixed(1);
console.log(
  `${N.toLocaleString('en-US')} location events, ${V} vehicles, tenant '${TENANT}': written in ${(wall / 1000).toFixed(1)} s, ` +
    `${((cpu.user + cpu.system) / N).toFixed(2)} µs of CPU an event (one run: for comparisons, bench/diag/bulk/bulk-publish.mjs)`,
);
console.log('');
console.log('| database | entries | branch | leaf | overflow | MB | bytes an event | fill |');
console.log('|---|---|---|---|---|---|---|---|');
const { pageSize } = stats;
let sum = 0;
for (const d of stats.dbs.sort((a, b) => b.pages - a.pages)) {
  sum += d.pages * pageSize;
  if (d.pages === 0) continue;
  const fill = d.leaf + d.overflow > 0 ? `${Math.round((100 * d.used) / ((d.leaf + d.overflow) * pageSize))} %` : '';
  console.log(
    `| ${d.name} | ${d.entries.toLocaleString('en-US')} | ${d.branch} | ${d.leaf} | ${d.overflow} | ${MB(d.pages * pageSize)} | ${per(d.pages * pageSize)} | ${fill} |`,
  );
}
const freePages = stats.free.treeBranchPageCount + stats.free.treeLeafPageCount + stats.free.overflowPages;
console.log(
  `| (free-page list's own pages) | ${stats.free.entryCount} | | | | ${MB(freePages * pageSize)} | ${per(freePages * pageSize)} | |`,
);
console.log(`| all databases | | | | | ${MB(sum)} | ${per(sum)} | |`);
console.log(`| LMDB file (${pageSize} B pages; last page ${stats.lastPage}) | | | | | ${MB(fileBytes)} | ${per(fileBytes)} | |`);
console.log(`| segment files | | | | | ${MB(segmentBytes)} | ${per(segmentBytes)} | |`);
console.log('');
console.log('| memory (MB) | RSS | anonymous | (V8 heap) | (external) | file-backed | LMDB maps | mapped | LMDB resident |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const [when, m] of [
  ['after the ingest', afterIngest],
  ['after reading back', afterRead],
]) {
  console.log(
    `| ${when} | ${MB(m.rss)} | ${MB(m.anon)} | ${MB(m.heapTotal)} | ${MB(m.external)} | ${MB(m.file)} | ${m.maps} | ${MB(m.mapped)} | ${MB(m.resident)} |`,
  );
}
