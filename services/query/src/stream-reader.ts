/**
 * The shared reading of one tenant's feed in a process's stream hub (stream.ts says what it
 * promises): a loop that reads the tenant's feed through core's shared reading (shared-feed.ts)
 * and hands each change to the streams it concerns, and the meeting of a stream catching up with
 * it (`catchUp`).
 */
import type { KindSegment } from '@otm/model';
import { ErrorCode, OtmServiceError, backoffDelay, type FeedReader, type PartState, type SharedChange } from '@otm/core';
import { matches, type Client } from './stream-client.js';
import type { StreamHub } from './stream-hub.js';

/** Longest pause before a tenant's reading tries a failed round again (ms). */
export const READER_RETRY_CAP_MS = 5_000;

const addTo = <K>(index: Map<K, Set<Client>>, key: K, c: Client) => {
  let set = index.get(key);
  if (set === undefined) index.set(key, (set = new Set()));
  set.add(c);
};
const removeFrom = <K>(index: Map<K, Set<Client>>, key: K, c: Client) => {
  const set = index.get(key);
  if (set?.delete(c) && set.size === 0) index.delete(key);
};

/**
 * The shared reading of one tenant's feed in this process, and its streams. `cursor` is its
 * position: every change up to it has been handed to the attached streams, and the next read starts
 * after it. It changes only in `handOut`, synchronously, never across an await.
 */
export class TenantReader {
  cursor = '';
  readonly ready: Promise<void>;
  /** Every stream of the tenant: attached, catching up or waiting. */
  readonly streams = new Set<Client>();
  private stopped = false;
  /** Attached streams without a vehicle or trip filter, by kind ('*': every kind). */
  private readonly byKind = new Map<KindSegment | '*', Set<Client>>();
  private readonly byVehicle = new Map<string, Set<Client>>();
  /** Attached streams with a trip filter and no vehicle filter. */
  private readonly byTrip = new Map<string, Set<Client>>();
  private readonly waiting = new Map<string, Set<Client>>();
  /** The last REMEMBERED positions passed, oldest first (a Set keeps insertion order). */
  private readonly passed = new Set<string>();
  /** How many positions were forgotten so far. */
  forgotten = 0;
  /** Its state for the probes: down from a failed round until one works. */
  private readonly part: PartState;
  /** Its reader of the tenant's feed: every change, the documents of the kinds its streams take. */
  private readonly reader: FeedReader;

  constructor(
    readonly tenant: string,
    private readonly hub: StreamHub,
  ) {
    this.part = hub.readers.add(tenant);
    this.reader = hub.feed.join(tenant, undefined, () => this.wanted());
    this.ready = this.start();
  }

  private async start(): Promise<void> {
    this.cursor = await this.hub.source.feed.head(this.tenant);
    this.remember(this.cursor);
    if (this.stopped) return;
    void this.loop().catch((e: unknown) => {
      // Not expected (the loop catches every round's failure): its streams end and resume elsewhere.
      this.hub.readers.fail(
        this.part,
        e,
        this.hub.logger,
        { tenant: this.tenant },
        'stream: the reading of a tenant ended after a failure',
      );
      this.stop();
    });
  }

  add(c: Client): void {
    this.streams.add(c);
  }

  remove(c: Client): void {
    this.streams.delete(c);
    if (c.attached) this.unindex(c);
    if (c.waitingAt !== undefined) removeFrom(this.waiting, c.waitingAt, c);
    if (this.streams.size === 0) this.stop();
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.reader.close(this.hub.feed);
    this.hub.readers.remove(this.part);
    this.hub.forget(this);
    for (const c of [...this.streams]) c.end();
  }

  /** Whether the reading has been at `cursor` (as far as it remembers). */
  private knows(cursor: string): boolean {
    return cursor === this.cursor || this.passed.has(cursor);
  }

  private remember(cursor: string): void {
    this.passed.add(cursor);
    if (this.passed.size > this.hub.remembered) {
      for (const oldest of this.passed) {
        this.passed.delete(oldest);
        break;
      }
      this.forgotten++;
    }
  }

  /** From now on the stream gets every change after `cursor` from the reading. */
  attach(c: Client): void {
    if (c.closed || c.attached) return;
    c.attached = true;
    c.waitingAt = undefined;
    const f = c.filter;
    if (f.vehicle !== undefined) addTo(this.byVehicle, f.vehicle, c);
    else if (f.trip !== undefined) addTo(this.byTrip, f.trip, c);
    else if (f.kinds === undefined) addTo(this.byKind, '*', c);
    else for (const k of f.kinds) addTo(this.byKind, k, c);
  }

  private unindex(c: Client): void {
    const f = c.filter;
    if (f.vehicle !== undefined) removeFrom(this.byVehicle, f.vehicle, c);
    else if (f.trip !== undefined) removeFrom(this.byTrip, f.trip, c);
    else if (f.kinds === undefined) removeFrom(this.byKind, '*', c);
    else for (const k of f.kinds) removeFrom(this.byKind, k, c);
  }

  /** The stream is attached once the reading has handed out the change at `cursor`. */
  private waitAt(c: Client, cursor: string): void {
    c.waitingAt = cursor;
    addTo(this.waiting, cursor, c);
  }

  /** The kinds whose documents some stream needs; undefined: every kind. */
  private wanted(): Set<KindSegment> | undefined {
    const kinds = new Set<KindSegment>();
    for (const c of this.streams) {
      if (c.filter.kinds === undefined) return undefined;
      for (const k of c.filter.kinds) kinds.add(k);
    }
    return kinds;
  }

  /** Hands each change to the attached streams it concerns, moves the position, attaches the streams waiting there. */
  private handOut(changes: readonly SharedChange[]): void {
    for (const c of changes) {
      this.deliver(c);
      const at = c.entry.cursor;
      this.cursor = at;
      this.remember(at);
      const waiting = this.waiting.get(at);
      if (waiting !== undefined) {
        this.waiting.delete(at);
        for (const w of waiting) this.attach(w);
      }
    }
  }

  private deliver(c: SharedChange): void {
    const to = (set: Set<Client> | undefined) => {
      if (set !== undefined) for (const s of set) if (matches(s.filter, c)) s.send(c.event());
    };
    to(this.byKind.get('*'));
    to(this.byKind.get(c.entry.kind));
    if (this.byVehicle.size > 0 || this.byTrip.size > 0) {
      const named = c.facts();
      for (const v of named.vehicles) to(this.byVehicle.get(v));
      for (const t of named.trips) to(this.byTrip.get(t));
    }
  }

  /** The shared reading: runs while the tenant has streams here; a round that fails is tried again (see the top). */
  private async loop(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      let full: boolean;
      try {
        // A page with the documents of the kinds some stream takes (read again for the rest
        // should a stream of other kinds have come meanwhile), each change made once for all.
        const slice = await this.reader.read(this.cursor);
        if (this.stopped) return;
        this.handOut(slice.changes);
        full = slice.more;
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof OtmServiceError && e.code === ErrorCode.cursorExpired) {
          // The reading fell behind what the feed keeps (the store was away for longer than
          // OTM_FEED_RETENTION): every stream ends; each resumes from its own Last-Event-ID.
          this.hub.logger?.warn({ tenant: this.tenant }, 'stream: the change feed no longer holds what the streams were to get next');
          this.stop();
          return;
        }
        failures++;
        const delay = backoffDelay(failures, { initialMs: 200, maxMs: READER_RETRY_CAP_MS });
        this.hub.readers.fail(
          this.part,
          e,
          this.hub.logger,
          { tenant: this.tenant, attempt: failures, retryInMs: delay },
          'stream: reading the change feed failed; trying again',
        );
        await this.hub.sleep(delay);
        if (!this.stopped) this.hub.readers.restarted();
        continue;
      }
      failures = 0;
      this.part.up();
      if (!full) await this.hub.sleep(this.hub.pollMs);
    }
  }

  /**
   * A stream that resumes after `from` reads the feed on its own until it meets the shared
   * reading, then is attached to it. After each of its reads (the rest of this runs without an
   * await, so the reading's position `cursor` cannot move meanwhile):
   * - the reading's position is where the page started, or one of the page's changes: the stream
   *   gets the page up to that position and is attached: the reading hands it the rest;
   * - else it gets the whole page; a full page: read on;
   * - else the page went to the feed's end as it was when read. If the reading has passed that end
   *   (it remembers it), read again: the next page holds its position. If it has not, and it has
   *   forgotten nothing since before the read, it has not got there yet (whatever it handed out
   *   since then it still remembers, and nothing after that end existed before the read): the
   *   stream waits there and the reading attaches it when it hands out that change.
   * - A position the stream was given (its Last-Event-ID) but no read has confirmed may not be
   *   written as the reading writes it: look again shortly instead of waiting there.
   */
  async catchUp(c: Client, from: string): Promise<void> {
    let after = from;
    let confirmed = false;
    let idle = 0;
    while (!c.closed && !this.stopped) {
      await c.drained();
      if (c.closed || this.stopped) return;
      const forgotten = this.forgotten;
      // Read for this stream alone: what follows needs a read made after `forgotten` was taken.
      const page = await this.hub.feed.readAlone(this.tenant, after, c.filter.kinds);
      if (c.closed || this.stopped) return;
      // From here to the end of the round: no await.
      if (this.cursor === after) return this.attach(c);
      const meet = page.changes.findIndex((ch) => ch.entry.cursor === this.cursor);
      const upto = meet < 0 ? page.changes.length : meet + 1;
      for (let i = 0; i < upto; i++) {
        const change = page.changes[i]!;
        if (matches(c.filter, change)) c.send(change.event());
      }
      if (meet >= 0) return this.attach(c);
      if (page.next !== undefined) {
        after = page.next;
        confirmed = true;
      }
      if (page.more) continue;
      if (this.knows(after)) continue;
      if (confirmed && this.forgotten === forgotten) return this.waitAt(c, after);
      await this.hub.sleep(Math.min(1_000, this.hub.pollMs * 2 ** Math.min(idle++, 5)));
    }
  }
}
