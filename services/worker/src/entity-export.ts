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
 *   410 cursorExpired): the changes in between are lost to analytics. The exporter logs a warning
 *   naming the tenant and goes on from the oldest change kept.
 * - Several telemetry workers: one exports at a time, the one holding the store's lease
 *   (`FeedExport.lease`), renewed as it works; the others look every `intervalMs` whether it is
 *   free, so one takes over within `leaseMs` when the holder dies (at once when it stops cleanly).
 * - Failures (Redis or ClickHouse unavailable): the pass stops, is counted
 *   (`otm_entity_export_failures_total`) and logged, and the next one starts after a pause that
 *   doubles up to `maxBackoffMs`, from the saved cursors.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { KINDS, type KindSegment } from '@otm/model';
import {
  ErrorCode,
  OtmServiceError,
  entityExportFailures,
  entityExportLag,
  entityExportRows,
  type EntityChange,
  type EntityChangeSink,
  type EntityStore,
  type EventStore,
  type FeedEntry,
  type FeedExport,
  type FeedPage,
  type Logger,
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
  /** Longest pause after failed passes (ms, default 30000). */
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
  /** By tenant: the age (s) of the oldest change not yet copied when its feed was last read. */
  private readonly lags = new Map<string, number>();
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
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
    if (this.closed || this.timer !== undefined || this.running !== undefined) return;
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    this.timer = setTimeout(() => void this.tick(), ms);
    // The exporter alone never keeps a process alive (the worker's bus does).
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    this.timer = undefined;
    const pass = this.pass().then(
      ({ more }) => {
        this.failures = 0;
        return more ? 0 : this.intervalMs;
      },
      (e: unknown) => {
        this.failures++;
        entityExportFailures.inc();
        const wait = Math.min(this.maxBackoffMs, this.intervalMs * 2 ** Math.min(this.failures - 1, 20));
        this.logger.warn({ err: errorText(e), failures: this.failures, retryInMs: wait }, 'entity export: pass failed, trying again');
        return wait;
      },
    );
    this.running = pass;
    const wait = await pass;
    this.running = undefined;
    this.schedule(wait);
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
    let renewed = Date.now();
    const tenants = await this.source.tenants();
    for (const t of [...this.lags.keys()]) if (!tenants.includes(t)) this.lags.delete(t);
    let more = false;
    let rows = 0;
    for (const tenant of tenants) {
      if (this.closed) break;
      if (Date.now() - renewed > this.leaseMs / 3) {
        if (!(await this.source.lease(this.owner, this.leaseMs))) {
          this.holding = false;
          return { more: false, rows };
        }
        renewed = Date.now();
      }
      const done = await this.exportTenant(tenant);
      rows += done.rows;
      more ||= done.more;
      entityExportLag.set(Math.max(0, ...this.lags.values()));
    }
    return { more, rows };
  }

  /** Copies up to `pagesPerTenant` pages of the tenant's feed after its saved cursor. */
  private async exportTenant(tenant: string): Promise<{ more: boolean; rows: number }> {
    let after = await this.source.cursor(tenant);
    let rows = 0;
    for (let page = 0; page < this.pagesPerTenant; page++) {
      if (this.closed) return { more: false, rows };
      let read: FeedPage;
      try {
        read = await this.read(tenant, after);
      } catch (e) {
        if (after === undefined || !isCursorExpired(e)) throw e;
        this.logger.warn(
          { tenant, cursor: after },
          'entity export: the change feed no longer holds the changes after the saved cursor (the export was stopped for longer than OTM_FEED_RETENTION): the changes in between are missing from analytics; going on from the oldest change kept',
        );
        after = undefined;
        await this.source.saveCursor(tenant, undefined);
        read = await this.read(tenant, undefined);
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
      after = read.next;
    }
    return { more: true, rows };
  }

  private read(tenant: string, after: string | undefined): Promise<FeedPage> {
    return this.entities.feed.read({ tenant, limit: this.pageSize, kinds: EXPORTED_KINDS, ...(after === undefined ? {} : { after }) });
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
      const base = { tenant, kind: e.kind, key: e.key, at: e.at, version: this.source.versionOf(e.cursor) };
      if (e.op === 'delete') changes.push({ ...base, op: 'delete', lifecycleRank: 0 });
      else if (docs[i] !== undefined) changes.push({ ...base, op: 'put', lifecycleRank: e.lifecycleRank ?? 0, json: docs[i] });
    });
    return changes;
  }

  /** Stops the loop, lets a pass in hand finish, and gives the lease up. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
    if (this.holding) {
      this.holding = false;
      await this.source.release(this.owner).catch((e: unknown) => {
        this.logger.warn({ err: errorText(e) }, 'entity export: could not give the lease up (it expires by itself)');
      });
    }
  }
}
