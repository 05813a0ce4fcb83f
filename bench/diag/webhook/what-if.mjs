/**
 * What if reading the feed's documents cost less? Loaded into `otm serve` by rate.mjs's
 * `--what-if=<case>` (through OTM_CHILD_NODE_OPTIONS=--import), it changes query's Finder in that
 * process only, to estimate what a change to the stores would give the webhook row; nothing of it
 * is part of the service.
 *
 * - `free`: `Finder.documents` remembers what it answered by tenant and cursor, so that from the
 *   second round on (the same backlog delivered again) reading documents costs nothing: the
 *   ceiling of any faster document read.
 * - `events-first`: `Finder.version` of an event looks in the event store before the entity store,
 *   so that a telemetry event (the bench's) costs one lookup, not a miss in the entity store first.
 * - `coalesced`: `Finder.documents` reads the event log's documents of a page as the log holds them,
 *   one after the other: their positions looked up in its index, then one read (pread) of each run
 *   of adjacent records instead of one a document, the documents sliced out of it as bytes (no
 *   string made); what is not found that way is read as before. A sketch of a batched read in the
 *   embedded event log (packages/embedded/src/event-log/store.ts), reaching into its internals.
 */
import fs from 'node:fs';
import { Finder } from '@otm/query';

const which = process.env.OTM_WHAT_IF;
if (which === 'free') {
  const documents = Finder.prototype.documents;
  const memo = new Map();
  Finder.prototype.documents = async function (tenant, entries, want) {
    const out = new Array(entries.length);
    const missing = [];
    entries.forEach((e, i) => {
      const k = `${tenant}\u0000${e.cursor}`;
      if (memo.has(k)) out[i] = memo.get(k);
      else missing.push(i);
    });
    if (missing.length > 0) {
      const got = await documents.call(
        this,
        tenant,
        missing.map((i) => entries[i]),
        want,
      );
      missing.forEach((i, j) => {
        out[i] = got[j];
        memo.set(`${tenant}\u0000${entries[i].cursor}`, got[j]);
      });
    }
    return out;
  };
} else if (which === 'events-first') {
  Finder.prototype.version = async function (tenant, kind, key, rank) {
    if (kind === 'events')
      return (await this.deps.events.get(tenant, kind, key, rank)) ?? (await this.deps.entities.get(tenant, kind, key, rank));
    return this.deps.entities.get(tenant, kind, key, rank);
  };
} else if (which === 'coalesced') {
  const documents = Finder.prototype.documents;
  /** Most bytes between two records still read in one go. */
  const GAP = 4096;
  Finder.prototype.documents = async function (tenant, entries, want) {
    const events = this.deps.events;
    const out = new Array(entries.length);
    const found = [];
    const rest = [];
    entries.forEach((e, i) => {
      if (e.op === 'delete' || e.doc !== undefined || (want !== undefined && !want(e))) out[i] = e.doc;
      else if (e.kind !== 'events' || e.lifecycleRank === undefined) rest.push(i);
      else {
        const pos = events.writer.lookup(`${tenant}|events|${e.key}|${e.lifecycleRank}`);
        if (pos === undefined || pos.len < 0) rest.push(i);
        else found.push({ i, pos });
      }
    });
    found.sort((a, b) => a.pos.seg - b.pos.seg || a.pos.gen - b.pos.gen || a.pos.off - b.pos.off);
    for (let a = 0; a < found.length;) {
      const { seg, gen, off } = found[a].pos;
      let b = a + 1;
      let end = off + found[a].pos.len;
      while (
        b < found.length &&
        found[b].pos.seg === seg &&
        found[b].pos.gen === gen &&
        found[b].pos.off - end <= GAP &&
        found[b].pos.off + found[b].pos.len - off <= 1 << 20
      ) {
        end = Math.max(end, found[b].pos.off + found[b].pos.len);
        b++;
      }
      const buf = Buffer.allocUnsafe(end - off);
      const n = fs.readSync(events.segments.fdOf(seg, gen), buf, 0, buf.length, off);
      if (n !== buf.length) throw new Error('short read');
      for (let k = a; k < b; k++) out[found[k].i] = buf.subarray(found[k].pos.off - off, found[k].pos.off - off + found[k].pos.len);
      a = b;
    }
    if (rest.length > 0) {
      const got = await documents.call(
        this,
        tenant,
        rest.map((i) => entries[i]),
        want,
      );
      rest.forEach((i, j) => (out[i] = got[j]));
    }
    return out;
  };
} else if (which !== undefined) {
  throw new Error(`OTM_WHAT_IF=${which}: free, events-first or coalesced`);
}
