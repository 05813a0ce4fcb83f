/**
 * What the event log's index thread runs (index-thread.ts starts it and says why): each task the
 * event loop sends, in order, in one LMDB write transaction of its own, answered with
 * what it stored (the latest positions, for the event loop's copies of them) or why it failed
 * (nothing of that task is then written: the transaction is aborted).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { open } from 'lmdb';
import { FEED_DB, FEED_META_DB, FeedSeq } from '../feed.js';
import { LmdbPositions, POSITIONS_DB, type Fix } from '../positions.js';
import { EventEffects, type EventChange } from './effects.js';
import { openIndexDbs } from './index-keys.js';
import type { IndexReply, IndexTask, IndexThreadData, SentEntry } from './index-thread.js';
import { CHECKPOINT, encodePos } from './pos.js';

const data = workerData as IndexThreadData;
const port = parentPort!;
const root = open({
  path: data.path,
  maxDbs: data.maxDbs,
  compression: false,
  ...(data.mapSize === undefined ? {} : { mapSize: data.mapSize }),
});
const { index, meta } = openIndexDbs(root);
const str = (name: string) => root.openDB<string, string>({ name, encoding: 'string' });
const effects = new EventEffects(
  root,
  data.telemetry ? { seq: new FeedSeq(str(FEED_DB), str(FEED_META_DB)), positions: new LmdbPositions(str(POSITIONS_DB)) } : undefined,
);
/** Where positions are encoded: LMDB copies a value inside the put, in a write transaction. */
const POS = Buffer.allocUnsafeSlow(16);

/** The changes the entries carry, in order; a put's with where its record went (its feed entry keeps it). */
function* changesOf(entries: readonly SentEntry[]): Generator<EventChange> {
  for (const e of entries) {
    const c = e.change;
    if (c === undefined) continue;
    if (c.op === 'put') c.where = { seg: e.seg, gen: e.gen, off: e.off, len: e.len };
    yield c;
  }
}

/**
 * One task in one write transaction (lmdb-js's `childTransaction`, as the event loop made them:
 * its callback runs here when lmdb-js's write thread has the transaction open, then that thread
 * commits, and flushes to disk overlapping the next commit; a synchronous transaction, flushed at
 * every commit, slowed the log's own durable writes to two thirds). Tasks commit in the order sent.
 */
async function run(task: Exclude<IndexTask, { t: 'close' }>): Promise<Fix[]> {
  let stored: Fix[] = [];
  await root.childTransaction(() => {
    switch (task.t) {
      case 'commit':
        for (const e of task.entries) void (e.len < 0 ? index.remove(e.k) : index.put(e.k, encodePos(e, POS)));
        stored = effects.apply(changesOf(task.entries));
        void meta.put(CHECKPOINT, task.checkpoint);
        break;
      case 'move':
        for (const m of task.moves) void index.put(m.k, encodePos(m.pos, POS));
        break;
      case 'checkpoint':
        void meta.put(CHECKPOINT, task.checkpoint);
        break;
    }
  });
  return stored;
}

/** Tasks still in LMDB's hands: closing waits for them. */
let running: Promise<unknown> = Promise.resolve();

port.on('message', (task: IndexTask) => {
  if (task.t === 'close') {
    port.close();
    void running.then(() => root.flushed).then(() => root.close());
    return;
  }
  const done = run(task).then(
    (stored): IndexReply => ({ id: task.id, ok: true, stored }),
    (e: unknown): IndexReply => ({ id: task.id, ok: false, message: (e as Error)?.message ?? String(e) }),
  );
  running = done;
  void done.then((reply) => port.postMessage(reply));
});
