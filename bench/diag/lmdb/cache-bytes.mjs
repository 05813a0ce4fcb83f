/**
 * What the embedded entity store's cache of latest versions (LmdbEntityStore.latest, bounded by
 * LATEST_CACHE_BOUNDS: 10,000 documents, 16 MiB of them) keeps alive outside V8's heap once full.
 * N trips of about 600 bytes are written, then each is read once by GET's path (`entities.get`),
 * and between two reads the script makes a few small Buffers as a request's handling does (a
 * header, a log line, a reply): what a server's other work takes from Node's 8 KiB buffer pool.
 * Printed: `process.memoryUsage().arrayBuffers` (the buffers outside the heap) and `heapUsed` before
 * and after the reads, each after a full collection, and their growth per cached document.
 *
 * After `npm run build`:
 *
 *   node --expose-gc bench/diag/lmdb/cache-bytes.mjs [trips=10000] [other-bytes=1500]
 *
 * `other-bytes`: what the script takes from the pool between two reads besides a header and a log
 * line (a small reply, a parsed body; anything under 4 KiB comes from the pool).
 *
 * A cached document's bytes used to be `Buffer.from(json)`, a slice of the 8 KiB pool: each one
 * kept its whole slab alive, 8 KiB for a 600-byte trip. They are now made with `ownedUtf8`
 * (packages/core/src/version-codec.ts), memory of their own.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openEmbeddedStores } from '../../../packages/embedded/dist/index.js';

if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc');
const N = Number(process.argv[2] ?? '10000');
const OTHER = Number(process.argv[3] ?? '1500');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-cache-bytes-'));
const stores = openEmbeddedStores(dir);
try {
  const keys = Array.from({ length: N }, (_, i) => `trip-${String(i).padStart(8, '0')}`);
  const doc = (k) => JSON.stringify({ id: k, entityType: 'trip', name: `Trip ${k}`, status: 'inTransit', note: 'x'.repeat(480) });
  for (let from = 0; from < N; from += 1000) {
    await stores.entities.unit(async (tx) => {
      for (const k of keys.slice(from, from + 1000))
        tx.put('acme', { kind: 'trips', key: k, lifecycleRank: 0, json: doc(k), stamp: { modified: 0, acceptedAt: 1 } });
    });
  }
  const external = () => (globalThis.gc(), process.memoryUsage().arrayBuffers);
  const heap = () => (globalThis.gc(), process.memoryUsage().heapUsed);
  const heapBefore = heap();
  const before = external();
  const others = [];
  let bytes = 0;
  for (const k of keys) {
    const d = await stores.entities.get('acme', 'trips', k);
    bytes += d.bytes?.length ?? 0;
    // A request's other small buffers, short-lived.
    others.push(
      Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${d.json.length}\r\n`),
      Buffer.from(`{"level":30,"msg":"${k}"}`),
      Buffer.allocUnsafe(OTHER),
    );
    if (others.length > 64) others.length = 0;
  }
  others.length = 0;
  const after = external();
  const heapAfter = heap();
  const mb = (n) => `${(n / 1024 / 1024).toFixed(1)} MB`;
  console.log(`${N} trips read once each, ${mb(bytes)} of documents, ${OTHER} other bytes from the pool between two reads`);
  console.log(
    `buffers outside the heap: ${mb(before)} before the reads, ${mb(after)} after: ${((after - before) / N).toFixed(0)} bytes a cached document`,
  );
  console.log(
    `V8's heap (used): ${mb(heapBefore)} before, ${mb(heapAfter)} after: ${((heapAfter - heapBefore) / N).toFixed(0)} bytes a cached document`,
  );
} finally {
  await stores.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
