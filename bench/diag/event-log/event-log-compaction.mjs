/**
 * Compaction of the embedded event log (packages/embedded/src/event-log.ts): writes `events`
 * location events (~400 B) in batches of 5,000 into 64 MB segments, replaces every other one
 * (so that the sealed segments are half dead), then compacts, and prints how long it took, the
 * bytes reclaimed, the longest the event loop was held up meanwhile (perf_hooks'
 * monitorEventLoopDelay; a segment's index entries move 2,000 a turn), and how much the process's
 * resident memory grew (a segment is read and written in pieces of 1 MB). After `npm run build`.
 *
 *   node bench/diag/event-log/event-log-compaction.mjs [events=400000]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { openEmbeddedStores } from '../../../packages/embedded/dist/index.js';
import { locationEvent } from '../../lib/documents.mjs';

const EVENTS = Number(process.argv[2] ?? 400_000);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-diag-compaction-'));
const stores = openEmbeddedStores(dir, { eventCompaction: { intervalMs: 0 } });
const id = (i) => `7c000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const write = async (from, to, step, v) => {
  for (let b = from; b < to; b += 5_000 * step) {
    const batch = [];
    for (let i = b; i < Math.min(to, b + 5_000 * step); i += step) {
      batch.push({ op: 'put', tenant: 'acme', doc: { kind: 'events', key: id(i), lifecycleRank: 4, json: locationEvent(id(i), i + v) } });
    }
    await stores.events.write(batch);
  }
};
const logBytes = () => fs.readdirSync(path.join(dir, 'events')).reduce((a, f) => a + fs.statSync(path.join(dir, 'events', f)).size, 0);
try {
  await write(0, EVENTS, 1, 0);
  await write(0, EVENTS, 2, 1); // every other event replaced
  const before = logBytes();
  const files = fs.readdirSync(path.join(dir, 'events')).length;
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const rss0 = process.memoryUsage().rss;
  let rssPeak = rss0;
  const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 5);
  const t0 = performance.now();
  const r = await stores.events.compact();
  const ms = performance.now() - t0;
  clearInterval(sampler);
  delay.disable();
  console.log(`${EVENTS} events, every other one replaced: ${(before / 2 ** 20).toFixed(1)} MB in ${files} segment files`);
  console.log(
    `compaction: ${r.compacted.length} segments rewritten, ${r.removed.length} removed, ${(r.reclaimedBytes / 2 ** 20).toFixed(1)} MB reclaimed in ${(ms / 1000).toFixed(2)} s`,
  );
  console.log(
    `log now ${(logBytes() / 2 ** 20).toFixed(1)} MB; event loop held up at most ${(delay.max / 1e6).toFixed(1)} ms (p99 ${(delay.percentile(99) / 1e6).toFixed(1)} ms)`,
  );
  console.log(
    `resident memory ${(rss0 / 2 ** 20).toFixed(0)} MB before, at most ${(rssPeak / 2 ** 20).toFixed(0)} MB during (sampled every 5 ms)`,
  );
  for (const i of [0, 1, EVENTS - 2, EVENTS - 1]) {
    const got = await stores.events.get('acme', 'events', id(i));
    if (got?.json !== locationEvent(id(i), i + (i % 2 === 0 ? 1 : 0))) throw new Error(`event ${i} reads wrong after compaction`);
  }
} finally {
  await stores.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
