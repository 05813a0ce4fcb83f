/**
 * An upper bound, not a mode of the service: loaded into `otm serve` with `--import`, it makes the
 * embedded event store skip its LMDB index. Index changes stay in the store's in-memory map of
 * positions (`recent`, where reads look first) and are never handed to LMDB, so the run pays
 * nothing for the index: no LMDB put an event on the event loop, no LMDB commit on libuv's
 * threads. Nothing of the index reaches the disk and its checkpoint never moves, so the map grows
 * with every event and the next start replays the whole log; no real store can run so. It answers
 * "how far could the embedded bulk row go if the index cost nothing?". After
 * `npm run build`:
 *
 *   OTM_CHILD_NODE_OPTIONS="--import $PWD/bench/diag/no-event-index.mjs" \
 *     node --import ./bench/lib/register-ts.mjs bench/run.mjs --only bulk
 *   OTM_CHILD_NODE_OPTIONS="--import $PWD/bench/diag/no-event-index.mjs" OTM_DIAG_BULK_WARMUP=20000 \
 *     node --import ./bench/lib/register-ts.mjs bench/diag/bulk-threads.mjs 1 200000 1
 *
 * The bench's own baselines (raw LMDB puts, the event store alone) run in the bench process, which
 * does not load this file: only the service is changed. `--only bulk` also starts the distributed
 * roles with the same NODE_OPTIONS; they load this file but never use this store. It replaces
 * `applyIndex` (packages/embedded/src/event-log.ts), a private method, so it must follow that
 * method's fields (`indexTimer`, `indexQueue`) if they are renamed.
 */
import { LogEventStore } from '../../packages/embedded/dist/index.js';

const proto = LogEventStore.prototype;
if (typeof proto.applyIndex !== 'function') throw new Error('no-event-index: LogEventStore has no applyIndex any more; update this file');
proto.applyIndex = function applyIndexSkipped() {
  clearTimeout(this.indexTimer);
  this.indexTimer = undefined;
  // The queued entries stay in `recent`, which every read consults before LMDB.
  this.indexQueue = [];
};
process.stderr.write('no-event-index: the event store keeps its index in memory only (a diagnostic upper bound)\n');
