/**
 * The entity export: the telemetry worker's loop that copies the changes of entities (trips,
 * consignments, vehicles, actions, ...) from the entity store's change feed into the event store,
 * for analysts (ClickHouse's otm_entities, docs/analytics.md "Entity tables"). It runs where both
 * stores offer it: an entity store with a `feedExport` (Redis) and an event store that is an
 * `EntityChangeSink` (ClickHouse).
 *
 * The feed is a transactional outbox: a unit of work adds its feed entries in its own commit
 * (packages/distributed/src/redis/feed.ts), so a change is in the feed exactly when it is in the
 * store. Every `intervalMs` the exporter reads each tenant's feed after the cursor it saved, a page
 * (`pageSize` changes) at a time, reads the version each put names, writes the page's changes in
 * one insert and only then saves the page's cursor: at least once (a crash or a failed save copies
 * the page again; the table's ReplacingMergeTree keeps one row per version, the highest `version`,
 * which grows with the feed's order, so a later change always wins).
 *
 * A tenant without a saved cursor (its first export, or a cursor the feed no longer holds, see
 * below) starts with a snapshot, since the feed keeps only the changes of the last
 * OTM_FEED_RETENTION and an entity that did not change within it (stored before the export was
 * turned on, say) would otherwise never be copied:
 * 1. `head`: the tenant's end of the feed (`ChangeFeed.head`), taken first.
 * 2. Every entity of every copied kind as stored now: the kind's list of all its entities (`list`
 *    with facet `''`, `pageSize` entities a page, in keyset order), each entity's highest version
 *    and, for an action, each lower lifecycle version it has; one insert per page, every row with
 *    the version of `head` (`FeedExport.versionOf`) and the time its version was accepted.
 * 3. `head` saved as the cursor; the feed is read after it as above.
 * Why this is right: every version read in step 2 was read after `head` was taken, so it is at
 * least as new as every change up to `head`, and its version is not lower than theirs (a row
 * copied from the change at `head` itself has the same version and the same document, unless the
 * version was replaced since, and then a later change is in the feed). A change after `head` is in the feed after it, has a
 * higher version, and wins over the snapshot row, also when the snapshot read the entity before
 * that change or did not find it (an entity that changed moves on in its list, and one deleted
 * meanwhile is not read): the feed copies it. Nothing is saved before step 3: a crash, a failed
 * insert, a lost lease or a `close()` during the snapshot leave the tenant without a cursor, and
 * the next pass takes the snapshot again from the start (the same rows again, harmless). A
 * snapshot takes the tenant's turn of the pass until it is done, however many pages, renewing the
 * lease between pages. Only what the lists hold is copied: an entity not listed is not.
 *
 * - What is copied: every kind the entity store keeps except events. Telemetry events are in
 *   otm_events already, and the feed does not tell a telemetry event's entry (appended by the
 *   telemetry worker) from an update or association event's (a unit's) but by reading the event
 *   from Redis, a read per telemetry event for nothing; what update and association events change
 *   is copied anyway, as the new versions of the entities they change.
 * - A put names a version; the exporter reads that version as it is now. Had it been replaced
 *   since, the later put is further on in the feed (and wins); had the entity been deleted since
 *   (nothing to read), the delete is, and the put is left out. Within a page only the last change
 *   of each version is copied.
 * - A cursor the feed no longer holds (the exporter stopped for longer than OTM_FEED_RETENTION;
 *   410 cursorExpired): the changes in between are gone from the feed. The exporter logs a
 *   warning naming the tenant, forgets the cursor and takes a snapshot, which brings every entity
 *   stored now up to date in the table. What the snapshot cannot bring back are the deletes of the
 *   gap: an entity deleted then keeps its last copied rows as live rows (`deleted = 0`).
 * - Several telemetry workers: one exports at a time, the one holding the store's lease
 *   (`FeedExport.lease`), renewed as it works; the others look every `intervalMs` whether it is
 *   free, so one takes over within `leaseMs` when the holder dies (at once when it stops cleanly).
 * - Failures (Redis or ClickHouse unavailable, or anything else): the pass stops, is counted
 *   (`otm_entity_export_failures_total`) and logged with its attempt, and the next one starts from
 *   the saved cursors after a pause drawn between half and all of a bound that doubles from
 *   `intervalMs` up to `maxBackoffMs` (core health.ts `supervise`), for as long as the exporter
 *   runs. From its start and from each failure until a pass works, or a page of one is written
 *   (a first snapshot may take many pages: it is not down meanwhile), the export is down: `entity export` in
 *   /readyz (and /healthz once it stays down OTM_STALL_SECONDS), `otm_loop_up{loop="entity-export"}`
 *   0, each new start counted in `otm_loop_restarts_total{loop="entity-export"}`. A pass that finds
 *   the lease held by another process works (this one stands by, up); a lease lost because the
 *   store was away is taken again by the first pass that finds it free.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { KINDS, type KindSegment } from '@otm/model';
import {
  ErrorCode,
  LoopKind,
  OtmServiceError,
  entityExportFailures,
  entityExportLag,
  entityExportRows,
  supervise,
  type EntityChange,
  type EntityChangeSink,
  type EntityStore,
  type EventStore,
  type FeedEntry,
  type FeedExport,
  type FeedPage,
  type ListPosition,
  type Logger,
  type Monitored,
  type StoredDocument,
  type Supervised,
} from '@otm/core';

export interface EntityExportOptions {
  /** Pause between passes once every feed is copied (ms, default 1000). */
  readonly intervalMs?: number;
  /** Changes read from a feed at once, and so most changes of one insert (default 1000). */
  readonly pageSize?: number;
  /** Pages of one tenant in a pass before the next tenant's turn (default 10). */
  readonly pagesPerTenant?: number;
  /** How long the lease lasts unless renewed (ms, default 30000). */
  readonly leaseMs?: number;
  /** Longest pause after failed passes (ms, default 30000; the first is about `intervalMs`). */
  readonly maxBackoffMs?: number;
}

/** The kinds copied: all but events (see the top of this file). */
export const EXPORTED_KINDS: ReadonlySet<KindSegment> = new Set(KINDS.map((k) => k.segment).filter((k) => k !== 'events'));

type ExportingEntityStore = EntityStore & { readonly feedExport: FeedExport };

const exportsFeed = (store: EntityStore): store is ExportingEntityStore => {
  const fx = (store as { feedExport?: Partial<FeedExport> }).feedExport;
  return typeof fx === 'object' && fx !== null && typeof fx.tenants === 'function';
};

const takesEntityChanges = (store: EventStore): store is EventStore & EntityChangeSink =>
  typeof (store as Partial<EntityChangeSink>).writeEntityChanges === 'function';

const isCursorExpired = (e: unknown): boolean => e instanceof OtmServiceError && e.code === ErrorCode.cursorExpired;

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** Waits `ms`, or less once `signal` aborts; the timer alone does not keep the process alive. */
const pause = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    timer.unref();
    signal.addEventListener('abort', done, { once: true });
  });

/**
 * The export of these stores, started; undefined when they do not offer it (an embedded store, or
 * an entity store without a feed export).
 */
export function startEntityExport(
  entities: EntityStore,
  events: EventStore,
  deps: { readonly logger: Logger },
  opts: EntityExportOptions = {},
): EntityExporter | undefined {
  if (!exportsFeed(entities) || !takesEntityChanges(events)) return undefined;
  const exporter = new EntityExporter(entities, events, deps.logger, opts);
  exporter.start();
  return exporter;
}

export class EntityExporter {
  private readonly intervalMs: number;
  private readonly pageSize: number;
  private readonly pagesPerTenant: number;
  private readonly leaseMs: number;
  private readonly maxBackoffMs: number;
  private readonly source: FeedExport;
  /** Who this exporter is, in the lease. */
  readonly owner = `${os.hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`;
  private holding = false;
  /** When the lease was last taken or renewed (ms since the epoch). */
  private renewed = 0;
  /** By tenant: the age (s) of the oldest change not yet copied when its feed was last read. */
  private readonly lags = new Map<string, number>();
  /** The loop of passes, supervised: started again after any failure. */
  private loop: Supervised | undefined;
  private readonly kind = new LoopKind('entity-export', 'entity export');
  private metrics: ReturnType<LoopKind['supervision']> | undefined;
  /** Told of each page written: the export works (up), also within a long pass such as a first snapshot. */
  private progress: () => void = () => {};
  private closed = false;

  constructor(
    private readonly entities: ExportingEntityStore,
    private readonly sink: EntityChangeSink,
    private readonly logger: Logger,
    opts: EntityExportOptions = {},
  ) {
    this.intervalMs = opts.intervalMs ?? 1_000;
    this.pageSize = opts.pageSize ?? 1_000;
    this.pagesPerTenant = opts.pagesPerTenant ?? 10;
    this.leaseMs = opts.leaseMs ?? 30_000;
    this.maxBackoffMs = opts.maxBackoffMs ?? 30_000;
    this.source = entities.feedExport;
  }

  /** Starts the loop: a first pass at once, then one every `intervalMs` (at once while feeds have more). */
  start(): void {
    if (this.closed || this.loop !== undefined) return;
    this.metrics = this.kind.supervision();
    this.loop = supervise('entity export', (signal, up) => this.passes(signal, up), {
      logger: this.logger,
      backoff: { initialMs: Math.max(1, this.intervalMs), maxMs: Math.max(this.intervalMs, this.maxBackoffMs) },
      onChange: this.metrics.onChange,
      onRestart: this.metrics.onRestart,
    });
  }

  /** What /readyz and /healthz read: the loop, once started. */
  parts(): Monitored[] {
    return this.loop === undefined ? [] : [this.loop];
  }

  /** Passes until stopped; a pass that fails ends it, and `supervise` starts it again after a backoff. */
  private async passes(signal: AbortSignal, up: () => void): Promise<void> {
    this.progress = up;
    while (!signal.aborted) {
      let more: boolean;
      try {
        ({ more } = await this.pass());
      } catch (e) {
        entityExportFailures.inc();
        throw e;
      }
      up();
      if (!more) await pause(this.intervalMs, signal);
    }
  }

  /**
   * One pass: takes (or renews) the lease, asks for the tenants, and copies each tenant's feed, up
   * to `pagesPerTenant` pages each. `more`: some feed has more to copy now.
   */
  async pass(): Promise<{ more: boolean; rows: number }> {
    if (!(await this.source.lease(this.owner, this.leaseMs))) {
      if (this.holding) this.logger.info('entity export: another process holds the lease now');
      this.holding = false;
      this.lags.clear();
      entityExportLag.set(0);
      return { more: false, rows: 0 };
    }
    if (!this.holding) {
      this.holding = true;
      this.logger.info({ owner: this.owner }, 'entity export: this process copies entity changes to the event store');
    }
    this.renewed = Date.now();
    const tenants = await this.source.tenants();
    for (const t of [...this.lags.keys()]) if (!tenants.includes(t)) this.lags.delete(t);
    let more = false;
    let rows = 0;
    for (const tenant of tenants) {
      if (this.closed) break;
      if (!(await this.keepLease())) return { more: false, rows };
      const done = await this.exportTenant(tenant);
      rows += done.rows;
      if (done.stopped) return { more: false, rows };
      more ||= done.more;
      entityExportLag.set(Math.max(0, ...this.lags.values()));
    }
    return { more, rows };
  }

  /** Renews the lease once a third of it has passed; false when another process took it meanwhile. */
  private async keepLease(): Promise<boolean> {
    if (Date.now() - this.renewed <= this.leaseMs / 3) return true;
    if (!(await this.source.lease(this.owner, this.leaseMs))) {
      this.holding = false;
      return false;
    }
    this.renewed = Date.now();
    return true;
  }

  /**
   * Copies up to `pagesPerTenant` pages of the tenant's feed after its saved cursor; first a
   * snapshot when there is none. `stopped`: the exporter was closed or lost the lease in a snapshot.
   */
  private async exportTenant(tenant: string): Promise<{ more: boolean; rows: number; stopped?: true }> {
    let rows = 0;
    let after = await this.source.cursor(tenant);
    if (after === undefined) {
      const snap = await this.snapshot(tenant);
      rows += snap.rows;
      if (snap.head === undefined) return { more: false, rows, stopped: true };
      after = snap.head;
    }
    for (let page = 0; page < this.pagesPerTenant; page++) {
      if (this.closed) return { more: false, rows };
      let read: FeedPage;
      try {
        read = await this.read(tenant, after);
      } catch (e) {
        if (!isCursorExpired(e)) throw e;
        this.logger.warn(
          { tenant, cursor: after },
          'entity export: the change feed no longer holds the changes after the saved cursor (the export was stopped for longer than OTM_FEED_RETENTION); copying every entity of the tenant as stored now, which brings them up to date in analytics, then going on with the feed. Entities deleted in between may remain as live rows (deleted = 0)',
        );
        await this.source.saveCursor(tenant, undefined);
        const snap = await this.snapshot(tenant);
        rows += snap.rows;
        if (snap.head === undefined) return { more: false, rows, stopped: true };
        after = snap.head;
        // Expired again only if the snapshot took longer than the retention: the pass fails, and
        // the next one finds the cursor expired and takes a snapshot again.
        read = await this.read(tenant, after);
      }
      if (read.next === undefined || read.next === after) {
        this.lags.set(tenant, 0);
        return { more: false, rows };
      }
      const oldest = read.entries[0]?.at;
      this.lags.set(tenant, oldest === undefined ? 0 : Math.max(0, (Date.now() - oldest) / 1000));
      const changes = await this.changesOf(tenant, read.entries);
      if (changes.length > 0) {
        const written = await this.sink.writeEntityChanges(changes);
        rows += written;
        entityExportRows.inc(written);
      }
      // Only once the rows are in the event store.
      await this.source.saveCursor(tenant, read.next);
      this.progress();
      after = read.next;
    }
    return { more: true, rows };
  }

  private read(tenant: string, after: string): Promise<FeedPage> {
    return this.entities.feed.read({ tenant, limit: this.pageSize, kinds: EXPORTED_KINDS, after });
  }

  /**
   * The snapshot of a tenant without a saved cursor (the top of this file): the feed's head, then
   * every entity of every copied kind as stored now, written at the head's version, a page of
   * entities an insert; then the head saved as the cursor. `head` undefined: stopped before the
   * end (closed, or the lease lost), nothing saved.
   */
  private async snapshot(tenant: string): Promise<{ head?: string; rows: number }> {
    const head = await this.entities.feed.head(tenant);
    const version = this.source.versionOf(head);
    let rows = 0;
    for (const kind of EXPORTED_KINDS) {
      let after: ListPosition | undefined;
      for (;;) {
        if (this.closed || !(await this.keepLease())) return { rows };
        const listed = await this.entities.list({
          tenant,
          kind,
          facet: '',
          limit: this.pageSize,
          ...(after === undefined ? {} : { after }),
        });
        if (listed.length === 0) break;
        // A list may name an entity twice (at an old and a new position): read it once a page.
        const keys = [...new Set(listed.map((p) => p.key))];
        const versions = (await Promise.all(keys.map((key) => this.versionsOf(tenant, kind, key)))).flat();
        const now = Date.now();
        const changes = versions.map((d): EntityChange => ({
          tenant,
          op: 'put',
          kind,
          key: d.key,
          lifecycleRank: d.lifecycleRank,
          at: d.stamp?.acceptedAt ?? now,
          version,
          json: d.json,
        }));
        if (changes.length > 0) {
          const written = await this.sink.writeEntityChanges(changes);
          rows += written;
          entityExportRows.inc(written);
        }
        this.progress();
        if (listed.length < this.pageSize) break;
        after = listed[listed.length - 1];
      }
    }
    // Only once every entity is in the event store.
    await this.source.saveCursor(tenant, head);
    this.logger.info(
      { tenant, rows },
      'entity export: copied every entity of the tenant as stored now (it had no saved cursor); going on with the changes after it',
    );
    return { head, rows };
  }

  /** Every version of the entity as stored now: the highest rank, and each lower one it has; none when it is not stored. */
  private async versionsOf(tenant: string, kind: KindSegment, key: string): Promise<StoredDocument[]> {
    const top = await this.entities.get(tenant, kind, key);
    if (top === undefined) return [];
    const lower = await Promise.all(Array.from({ length: top.lifecycleRank }, (_, rank) => this.entities.get(tenant, kind, key, rank)));
    return [...lower.filter((d): d is StoredDocument => d !== undefined), top];
  }

  /**
   * The changes of a page to write: the last change of each version (a put followed in the page by
   * a put of the same rank or a delete of the entity is left out, and a delete followed by another
   * delete), each put with the version it names as stored now (left out when there is none: the
   * entity was deleted since, and that delete follows in the feed).
   */
  private async changesOf(tenant: string, entries: readonly FeedEntry[]): Promise<EntityChange[]> {
    const kept: FeedEntry[] = [];
    const deletedLater = new Set<string>();
    const putLater = new Set<string>();
    for (let i = entries.length - 1; i >= 0; i--) {
      const e = entries[i]!;
      const entity = `${e.kind}\0${e.key}`;
      if (deletedLater.has(entity)) continue;
      if (e.op === 'delete') {
        deletedLater.add(entity);
        kept.push(e);
        continue;
      }
      const version = `${entity}\0${e.lifecycleRank ?? 0}`;
      if (putLater.has(version)) continue;
      putLater.add(version);
      kept.push(e);
    }
    kept.reverse();
    const docs = await Promise.all(
      kept.map(async (e) => {
        if (e.op === 'delete') return undefined;
        if (e.doc !== undefined) return e.doc.toString();
        return (await this.entities.get(tenant, e.kind, e.key, e.lifecycleRank ?? 0))?.json;
      }),
    );
    const changes: EntityChange[] = [];
    kept.forEach((e, i) => {
      // Members named: a spread followed by more members costs far more in V8 (docs/PERFORMANCE.md, object spreads).
      const version = this.source.versionOf(e.cursor);
      if (e.op === 'delete') changes.push({ tenant, op: 'delete', kind: e.kind, key: e.key, lifecycleRank: 0, at: e.at, version });
      else if (docs[i] !== undefined)
        changes.push({
          tenant,
          op: 'put',
          kind: e.kind,
          key: e.key,
          lifecycleRank: e.lifecycleRank ?? 0,
          at: e.at,
          version,
          json: docs[i],
        });
    });
    return changes;
  }

  /** Stops the loop, lets a pass in hand finish, and gives the lease up. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.loop?.stop();
    this.metrics?.release();
    if (this.holding) {
      this.holding = false;
      await this.source.release(this.owner).catch((e: unknown) => {
        this.logger.warn({ err: errorText(e) }, 'entity export: could not give the lease up (it expires by itself)');
      });
    }
  }
}
