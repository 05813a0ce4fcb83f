/**
 * Following the change feed as it happens: `GET /api/v5/stream`, Server-Sent Events, one event per
 * change of the feed (`id:` its cursor, `event: put|delete`, `data:` the item `GET /api/v5/changes`
 * answers), resumable with `Last-Event-ID`; and `POST /api/v5/stream/tickets`, short-lived tickets
 * for clients that cannot send an Authorization header (a browser's EventSource).
 *
 * One reading of the feed per tenant and process (`TenantReader`): a loop, running while the tenant
 * has streams open here, that reads 1,000 changes at a time after its cursor (waiting `pollMs` when
 * there is nothing new), reads each change's document once, and hands each change to the streams
 * whose filters take it, with the event's text made once and shared. Streams that follow one
 * vehicle (or one trip) are indexed by it, so a change costs the streams it concerns, not all.
 *
 * A stream that resumes from an older cursor first reads the feed on its own (catching up), then
 * joins the shared reading exactly where it is, so that nothing is missed and nothing comes twice,
 * each stream's changes in feed order (`catchUp` says how). A stream whose client does not read
 * (more than `maxPendingBytes` waiting in its socket's buffer) is cut off: it resumes with its
 * Last-Event-ID, rather than holding up the others or growing memory. `otm_streams_open` counts the
 * streams open in the process (no tenant label: its values have no bound).
 *
 * Each stream holds one of its token's OTM_STREAMS_PER_TOKEN slots (`StreamSlots`): in the process
 * (embedded `MemoryStreamSlots`), or in Redis, where every query process counts the same slots. A slot is
 * taken before the stream opens (429 beyond the limit), renewed on the heartbeat, held for three
 * heartbeats at a time (so the slots of a process that died free themselves), and released when
 * the stream closes. Should the slots' store fail when a stream opens, the stream opens anyway
 * (they fail open, like the quotas) and its slot is written at the next renewal that gets through.
 *
 * The stream follows the change feed, that is what is stored, not the bus: a client that receives
 * an event can GET what it names, and the same cursors resume the stream and `GET /api/v5/changes`.
 *
 * Recovery (issue 36; core health.ts and loops.ts). A tenant's reading runs for as long as the
 * tenant has streams here, whatever fails: a read of the feed or of the documents that fails (the
 * store unavailable), or anything else in a round, is tried again from the reading's position
 * (nothing handed out twice, nothing skipped) after a jittered pause doubling from 200 ms to
 * READER_RETRY_CAP_MS, and the reading is down until a round works: `stream reader <tenant>` in
 * /readyz (and /healthz once it stays down OTM_STALL_SECONDS), `otm_loop_up{loop="stream-reader"}`
 * 0 while any reading is down, `otm_loop_restarts_total{loop="stream-reader"}` for each retry. Its
 * streams stay open meanwhile (heartbeats go on) and get what they missed once it reads again. A
 * socket that fails ends its own stream only. Failures are logged once per 10 s per cause for all
 * readings, as are the failures that end a stream (catching up, its snapshot).
 */
import { createHmac, hash, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { KindSegment } from '@otm/model';
import {
  ErrorCode,
  LoopKind,
  OtmServiceError,
  ThrottledLog,
  backoffDelay,
  changeFacts,
  changeItem,
  filterValues,
  parseChangeDocument,
  reasonOf,
  storageKey,
  streamsOpen,
  tooManyStreams,
  unavailable,
  type ChangeFacts,
  type FeedEntry,
  type Logger,
  type Monitored,
  type PartState,
  type Principal,
  type StreamSlot,
  type StreamSlots,
  type TokenEntry,
} from '@otm/core';
import { JSON_TYPE, clip, onlyQuery } from '@otm/http';
import type { Finder } from './find.js';
import { bad, kindsParam } from './find-params.js';
import { positionJson } from './routes.js';

/** How long a stream ticket is good for. */
export const TICKET_TTL_MS = 60_000;

/** Changes read at a time, by the shared reading and by a stream catching up. */
const PAGE = 1_000;
/** Positions (cursors) the shared reading remembers having passed, so that a stream catching up can tell whether it is behind it. */
const REMEMBERED = 10_000;
/** A stream catching up reads on only once its socket's buffer is below this. */
const CATCH_UP_HIGH_WATER = 1024 * 1024;
/** Longest Last-Event-ID taken. */
const CURSOR_MAX = 100;
/** Longest id of a vehicle or trip filter. */
const ID_MAX = 1_000;

const HEARTBEAT = Buffer.from(': keep-alive\n\n');

/** Longest pause before a tenant's reading tries a failed round again (ms). */
export const READER_RETRY_CAP_MS = 5_000;

export interface StreamOptions {
  /** Most streams one token may hold open (OTM_STREAMS_PER_TOKEN), as `slots` counts them; one more is a 429. */
  readonly perToken: number;
  /**
   * Where the streams of each token are counted: Redis (shared by every query process) with the
   * Redis entity store, else the process's own (embedded `MemoryStreamSlots`).
   */
  readonly slots: StreamSlots;
  /** How often a comment goes to every stream, so that proxies and clients see it alive, and its slot is renewed (default 15 s). */
  readonly heartbeatMs?: number;
  /** How long a slot is held from each renewal (default three heartbeats). */
  readonly slotTtlMs?: number;
  /** How long the shared reading waits when the feed has nothing new (default 50 ms). */
  readonly pollMs?: number;
  /** Most bytes waiting in a stream's socket buffer before it is cut off (default 8 MiB). */
  readonly maxPendingBytes?: number;
  /** The `retry:` a stream starts with: how long an EventSource waits before it reconnects (default 2 s). */
  readonly retryMs?: number;
  /** The `Retry-After` of a 429 (seconds, default 10). */
  readonly retryAfterSeconds?: number;
  /** Changes read at a time (default 1,000), and positions a reading remembers (default 10,000): for tests. */
  readonly pageSize?: number;
  readonly remembered?: number;
  readonly logger?: Logger;
}

/** What the stream reads: Finder's feed, documents, versions and positions. */
export type StreamSource = Pick<Finder, 'feed' | 'documents' | 'version' | 'positions'>;

/** Where a stream's events go: the HTTP response (its socket), or a stand-in in tests. */
export interface StreamSink {
  write(chunk: Buffer): boolean;
  /** Bytes written but not yet taken by the socket. */
  readonly writableLength: number;
  end(): void;
  destroy(): void;
  once(event: 'drain' | 'close', listener: () => void): unknown;
}

/** Which changes a stream takes; ids as storage keys. */
export interface StreamFilter {
  readonly kinds?: ReadonlySet<KindSegment>;
  /** Changes whose document names this vehicle: the vehicle itself, trips with it as their vehicle, events linked to it. */
  readonly vehicle?: string;
  /** The trip itself, and events linked to it. */
  readonly trip?: string;
}

// ---------------------------------------------------------------------------------------------
// Tickets
// ---------------------------------------------------------------------------------------------

/**
 * The key stream tickets are signed with, the same in every process of a deployment: from
 * OTM_STREAM_TICKET_SECRET when set, else from the configured tokens (their SHA-256 digests with
 * tenant and scopes, sorted): HKDF-SHA256. Without either, a random key: such a process's tickets
 * are good only on itself (and no ticket can be made without a key nobody else has).
 */
export function streamTicketKey(tokens: readonly TokenEntry[], secret?: string): Buffer {
  let material: Buffer;
  if (secret !== undefined && secret !== '') material = Buffer.from(secret, 'utf8');
  else if (tokens.length > 0) {
    const parts = tokens.map((t) => Buffer.concat([t.digest, Buffer.from(`:${t.tenant}:${[...t.scopes].sort().join('+')}\n`)]));
    material = Buffer.concat(parts.sort((a, b) => Buffer.compare(a, b)));
  } else material = randomBytes(32);
  return Buffer.from(hkdfSync('sha256', material, 'otm stream tickets', 'v1', 32));
}

interface TicketBody {
  /** What it is good for. */
  readonly p: 'stream';
  readonly t: string;
  readonly s: string[];
  /** The token's reference (StreamTickets.ref). */
  readonly k: string;
  /** Expiry, ms since the epoch. */
  readonly e: number;
}

const isTicketBody = (v: unknown): v is TicketBody => {
  if (typeof v !== 'object' || v === null) return false;
  const b = v as Record<string, unknown>;
  return (
    b.p === 'stream' &&
    typeof b.t === 'string' &&
    typeof b.k === 'string' &&
    typeof b.e === 'number' &&
    Array.isArray(b.s) &&
    b.s.every((s) => s === 'read' || s === 'write')
  );
};

/**
 * Stream tickets: `<payload>.<signature>`, the payload base64url JSON of the tenant, the scopes, a
 * reference to the token and the expiry; the signature HMAC-SHA256 of the payload with the key of
 * `streamTicketKey`, compared in constant time. Self-contained: any process with the same key
 * takes them, none keeps them. Good for `GET /api/v5/stream` only, for TICKET_TTL_MS; a stream
 * opened with one stays open after it expires.
 */
export class StreamTickets {
  /** The token references of principals that came from a ticket. */
  private readonly refs = new WeakMap<Principal, string>();

  constructor(
    private readonly key: Buffer,
    private readonly ttlMs = TICKET_TTL_MS,
  ) {}

  /**
   * Which token a principal came from, as streams are counted: a keyed hash of its id (the token's
   * SHA-256; `fallback` when it has none), so that a ticket, which travels in a URL, shows nothing
   * derived from the token that could be checked against guesses of it without the key.
   */
  ref(principal: Principal, fallback: string): string {
    return (
      this.refs.get(principal) ??
      this.mac(`token\n${principal.id ?? fallback}`)
        .subarray(0, 18)
        .toString('base64url')
    );
  }

  issue(principal: Principal, ref: string, now = Date.now()): { ticket: string; expiresAt: string } {
    const expires = now + this.ttlMs;
    const body: TicketBody = { p: 'stream', t: principal.tenant, s: [...principal.scopes].sort(), k: ref, e: expires };
    const payload = Buffer.from(JSON.stringify(body)).toString('base64url');
    return { ticket: `${payload}.${this.mac(`ticket\n${payload}`).toString('base64url')}`, expiresAt: new Date(expires).toISOString() };
  }

  /** The principal of a ticket that this key signed and that has not expired, else undefined. */
  verify(ticket: string, now = Date.now()): Principal | undefined {
    if (ticket.length > 2_048) return undefined;
    const dot = ticket.indexOf('.');
    if (dot <= 0) return undefined;
    const payload = ticket.slice(0, dot);
    const given = Buffer.from(ticket.slice(dot + 1), 'base64url');
    const expected = this.mac(`ticket\n${payload}`);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    let body: unknown;
    try {
      body = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    } catch {
      return undefined;
    }
    if (!isTicketBody(body) || !(body.e > now)) return undefined;
    const principal: Principal = { tenant: body.t, scopes: new Set(body.s) };
    this.refs.set(principal, body.k);
    return principal;
  }

  private mac(text: string): Buffer {
    return createHmac('sha256', this.key).update(text).digest();
  }
}

// ---------------------------------------------------------------------------------------------
// Changes as events
// ---------------------------------------------------------------------------------------------

/** The vehicles and trips a change names (storage keys): core facets.ts `changeFacts`. */
type Facts = Pick<ChangeFacts, 'vehicles' | 'trips'>;

const factsOf = (e: FeedEntry, doc: string | Buffer | undefined): Facts =>
  changeFacts(e.kind, e.key, e.kind === 'vehicles' ? undefined : parseChangeDocument(doc));

/**
 * The event of a change: `id: <cursor>`, `event: put|delete`, `data: <item>`. A document's text is
 * JSON, where a line break can only stand between tokens: should one be there, the rest goes on a
 * `data:` line of its own (which the client joins with a line break again).
 */
function changeEvent(e: FeedEntry, doc: string | Buffer | undefined): Buffer {
  const item = changeItem(e, doc);
  const data =
    item.includes(0x0a) || item.includes(0x0d)
      ? Buffer.from(
          item
            .toString('utf8')
            .split(/\r\n|\r|\n/)
            .join('\ndata: '),
        )
      : item;
  return Buffer.concat([Buffer.from(`id: ${e.cursor}\nevent: ${e.op}\ndata: `), data, Buffer.from('\n\n')]);
}

/** A change with its document, read once; its facts and event text made once, when first needed. */
class Change {
  private facts?: Facts;
  private event?: Buffer;

  constructor(
    readonly entry: FeedEntry,
    readonly doc: string | Buffer | undefined,
  ) {}

  named(): Facts {
    return (this.facts ??= factsOf(this.entry, this.doc));
  }

  text(): Buffer {
    return (this.event ??= changeEvent(this.entry, this.doc));
  }
}

function matches(f: StreamFilter, c: Change): boolean {
  if (f.kinds !== undefined && !f.kinds.has(c.entry.kind)) return false;
  if (f.vehicle !== undefined && !c.named().vehicles.includes(f.vehicle)) return false;
  if (f.trip !== undefined && !c.named().trips.includes(f.trip)) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Streams and the shared reading
// ---------------------------------------------------------------------------------------------

/** One open stream. */
class Client {
  closed = false;
  /** Its answer's head is written: events may go. */
  started = false;
  /** Handed every change by the tenant's reading (else catching up, or waiting to be). */
  attached = false;
  /** Where it waits for the reading to come by (TenantReader.waitAt). */
  waitingAt: string | undefined;
  /** While the position snapshot is written: changes wait here. */
  private held: Buffer[] | undefined;
  private heldBytes = 0;
  private wake: (() => void) | undefined;

  constructor(
    readonly filter: StreamFilter,
    readonly sink: StreamSink,
    private readonly maxPending: number,
    private readonly onClose: (c: Client) => void,
  ) {}

  /** The kinds whose documents it needs. */
  wants(e: FeedEntry): boolean {
    return this.filter.kinds === undefined || this.filter.kinds.has(e.kind);
  }

  get holding(): boolean {
    return this.held !== undefined;
  }

  send(chunk: Buffer): void {
    if (this.closed) return;
    if (this.held !== undefined) {
      this.held.push(chunk);
      this.heldBytes += chunk.length;
      if (this.heldBytes > this.maxPending) this.cutOff();
      return;
    }
    try {
      this.sink.write(chunk);
    } catch {
      // Its socket failed: this stream ends (the client resumes), not the tenant's reading.
      this.cutOff();
      return;
    }
    if (this.sink.writableLength > this.maxPending) this.cutOff();
  }

  hold(): void {
    this.held ??= [];
  }

  release(): void {
    const held = this.held;
    this.held = undefined;
    this.heldBytes = 0;
    if (held !== undefined && held.length > 0) this.send(Buffer.concat(held));
  }

  /** Resolves once its socket took all but CATCH_UP_HIGH_WATER bytes (or it closed). */
  async drained(limit = CATCH_UP_HIGH_WATER): Promise<void> {
    while (!this.closed && this.sink.writableLength > limit) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        this.sink.once('drain', resolve);
      });
      this.wake = undefined;
    }
  }

  /** A client that does not read: its connection is closed; it resumes with its Last-Event-ID. */
  cutOff(): void {
    if (this.closed) return;
    this.sink.destroy();
    this.close();
  }

  /**
   * Ends the stream (the service stops): what is written is flushed, unless the client does not
   * read. One not started yet has nothing written: its request is answered by whoever opens it.
   */
  end(): void {
    if (this.closed) return;
    if (this.started) {
      this.sink.end();
      if (this.sink.writableLength > 0) this.sink.destroy();
    }
    this.close();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.held = undefined;
    this.wake?.();
    this.onClose(this);
  }
}

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
class TenantReader {
  cursor = '';
  readonly ready: Promise<void>;
  /** Every stream of the tenant: attached, catching up or waiting. */
  readonly streams = new Set<Client>();
  /** Streams added so far (the documents a page needs depend on who is there). */
  private added = 0;
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

  constructor(
    readonly tenant: string,
    private readonly hub: StreamHub,
  ) {
    this.part = hub.readers.add(tenant);
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
    this.added++;
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

  /**
   * The page's changes with their documents, each read once for every stream: those of the kinds
   * some stream takes. Read again for the rest should a stream of other kinds have come meanwhile.
   */
  private async prepare(entries: FeedEntry[]): Promise<Change[]> {
    const docs: Array<string | Buffer | undefined> = entries.map(() => undefined);
    const read = new Set<KindSegment>();
    let readAll = false;
    for (;;) {
      const added = this.added;
      const want = this.wanted();
      const got = await this.hub.source.documents(
        this.tenant,
        entries,
        (e) => !readAll && !read.has(e.kind) && (want === undefined || want.has(e.kind)),
      );
      got.forEach((d, i) => {
        if (d !== undefined) docs[i] = d;
      });
      if (want === undefined) readAll = true;
      else for (const k of want) read.add(k);
      if (this.added === added || readAll) break;
      // Streams came meanwhile: are the kinds they take read?
      const now = this.wanted();
      if (now !== undefined && [...now].every((k) => read.has(k))) break;
    }
    return entries.map((e, i) => new Change(e, docs[i]));
  }

  /** Hands each change to the attached streams it concerns, moves the position, attaches the streams waiting there. */
  private handOut(changes: readonly Change[]): void {
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

  private deliver(c: Change): void {
    const to = (set: Set<Client> | undefined) => {
      if (set !== undefined) for (const s of set) if (matches(s.filter, c)) s.send(c.text());
    };
    to(this.byKind.get('*'));
    to(this.byKind.get(c.entry.kind));
    if (this.byVehicle.size > 0 || this.byTrip.size > 0) {
      const named = c.named();
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
        const page = await this.hub.source.feed.read({ tenant: this.tenant, after: this.cursor, limit: this.hub.pageSize });
        if (this.stopped) return;
        const changes = page.entries.length === 0 ? [] : await this.prepare(page.entries);
        if (this.stopped) return;
        this.handOut(changes);
        full = changes.length >= this.hub.pageSize;
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
      const page = await this.hub.source.feed.read({ tenant: this.tenant, after, limit: this.hub.pageSize });
      const docs = await this.hub.source.documents(this.tenant, page.entries, (e) => c.wants(e));
      if (c.closed || this.stopped) return;
      // From here to the end of the round: no await.
      if (this.cursor === after) return this.attach(c);
      const meet = page.entries.findIndex((e) => e.cursor === this.cursor);
      const upto = meet < 0 ? page.entries.length : meet + 1;
      for (let i = 0; i < upto; i++) {
        const change = new Change(page.entries[i]!, docs[i]);
        if (matches(c.filter, change)) c.send(change.text());
      }
      if (meet >= 0) return this.attach(c);
      if (page.next !== undefined) {
        after = page.next;
        confirmed = true;
      }
      if (page.entries.length >= this.hub.pageSize) continue;
      if (this.knows(after)) continue;
      if (confirmed && this.forgotten === forgotten) return this.waitAt(c, after);
      await this.hub.sleep(Math.min(1_000, this.hub.pollMs * 2 ** Math.min(idle++, 5)));
    }
  }
}

/** One open stream, as the route holds it. */
export interface OpenStream {
  /** Starts sending (after the answer's head is written). */
  start(): void;
  /** The client went away. */
  close(): void;
}

/**
 * The streams of this process: a reading per tenant with streams open, the slot each stream holds,
 * the heartbeat (which renews the slots too).
 */
export class StreamHub {
  readonly pollMs: number;
  readonly pageSize: number;
  readonly remembered: number;
  readonly logger: Logger | undefined;
  private readonly heartbeatMs: number;
  private readonly maxPending: number;
  private readonly retry: Buffer;
  private readonly retryAfter: number;
  private readonly slots: StreamSlots;
  private readonly slotTtlMs: number;
  private readonly reading = new Map<string, TenantReader>();
  /** The tenants' readings as the probes and metrics see them. */
  readonly readers = new LoopKind('stream-reader', 'stream reader');
  /** Failures that end a stream, logged a line a while. */
  private readonly endings = new ThrottledLog(10_000);
  /** Every open stream, with the slot it holds. */
  private readonly clients = new Map<Client, StreamSlot>();
  private heartbeat: NodeJS.Timeout | undefined;
  /** A renewal of the slots is under way (the next heartbeat does not start another). */
  private renewing = false;
  /** When a failure of the slots' store was last logged (at most once a minute). */
  private slotWarnedAt = -Infinity;
  /** Wakes each pending `sleep`. */
  private readonly sleeping = new Set<() => void>();
  private closed = false;

  constructor(
    readonly source: StreamSource,
    private readonly opts: StreamOptions,
  ) {
    this.pollMs = opts.pollMs ?? 50;
    this.pageSize = opts.pageSize ?? PAGE;
    this.remembered = opts.remembered ?? REMEMBERED;
    this.heartbeatMs = opts.heartbeatMs ?? 15_000;
    this.maxPending = opts.maxPendingBytes ?? 8 * 1024 * 1024;
    this.retry = Buffer.from(`retry: ${opts.retryMs ?? 2_000}\n\n`);
    this.retryAfter = opts.retryAfterSeconds ?? 10;
    this.slots = opts.slots;
    this.slotTtlMs = opts.slotTtlMs ?? 3 * this.heartbeatMs;
    this.logger = opts.logger;
  }

  /** What /readyz and /healthz read: the tenants' readings that are down. */
  parts(): Monitored[] {
    return this.readers.monitored();
  }

  /** Streams open now (all tenants). */
  get size(): number {
    return this.clients.size;
  }

  /** Waits `ms`, or less when the hub closes (which clears every timer). */
  sleep(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.sleeping.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.sleeping.add(wake);
    });
  }

  forget(reader: TenantReader): void {
    if (this.reading.get(reader.tenant) === reader) this.reading.delete(reader.tenant);
  }

  /**
   * Opens a stream of `tenant` for the token `owner` (a reference, never the token): it takes one
   * of the token's OTM_STREAMS_PER_TOKEN slots (429 beyond them; let through uncounted should the
   * slots' store fail), starts from `from` (a cursor: 400 when it is not one of this feed, 410 when
   * older than the feed keeps) or from the feed's end. Fails before anything is written, its slot
   * released; `start` it once the answer's head is.
   */
  async open(o: {
    tenant: string;
    owner: string;
    filter: StreamFilter;
    from?: string;
    snapshot?: boolean;
    sink: StreamSink;
  }): Promise<OpenStream> {
    if (this.closed) throw unavailable('the service is stopping', 1);
    const slot: StreamSlot = { owner: o.owner, id: randomBytes(12).toString('base64url') };
    if (!(await this.acquire(slot))) {
      throw tooManyStreams(
        `this token has ${this.opts.perToken} streams open, the most allowed (OTM_STREAMS_PER_TOKEN): close one, or try again later`,
        this.retryAfter,
      );
    }
    if (this.closed) {
      this.release(slot);
      throw unavailable('the service is stopping', 1);
    }
    let reader = this.reading.get(o.tenant);
    if (reader === undefined) this.reading.set(o.tenant, (reader = new TenantReader(o.tenant, this)));
    const r = reader;
    const client = new Client(o.filter, o.sink, this.maxPending, (c) => {
      this.clients.delete(c);
      streamsOpen.dec();
      this.release(slot);
      r.remove(c);
      if (this.clients.size === 0) this.stopHeartbeat();
    });
    this.clients.set(client, slot);
    streamsOpen.inc();
    r.add(client);
    try {
      await r.ready;
      // A cursor that is not one of this feed's, or one older than it keeps, is answered now.
      if (o.from !== undefined) await this.source.feed.read({ tenant: o.tenant, after: o.from, limit: 1 });
    } catch (e) {
      client.close();
      throw e;
    }
    if (client.closed) throw unavailable('the service is stopping', 1);
    return {
      start: () => void this.start(r, client, o.from, o.snapshot === true),
      close: () => client.close(),
    };
  }

  private async start(r: TenantReader, c: Client, from: string | undefined, snapshot: boolean): Promise<void> {
    if (c.closed) return;
    c.started = true;
    c.send(this.retry);
    this.startHeartbeat();
    try {
      if (from === undefined) {
        // From the reading's position: that is "now". A snapshot is read after the stream is
        // attached, so that no position moved by a later change is missed; those changes wait.
        if (snapshot) c.hold();
        r.attach(c);
        if (snapshot) {
          await this.positions(r.tenant, c);
          c.release();
        }
      } else {
        if (snapshot) await this.positions(r.tenant, c);
        await r.catchUp(c, from);
      }
    } catch (e) {
      if (c.closed) return;
      const err = reasonOf(e);
      const { log, skipped } = this.endings.take(err);
      if (log)
        this.logger?.warn({ err, tenant: r.tenant, ...(skipped > 0 ? { alsoEnded: skipped } : {}) }, 'stream: ended after a failure');
      c.end();
    }
  }

  /** The latest positions of the vehicles the stream follows (all, that of its vehicle, those of its trip), as `position` events. */
  private async positions(tenant: string, c: Client): Promise<void> {
    let all = await this.source.positions(tenant, undefined, undefined);
    const f = c.filter;
    if (f.vehicle !== undefined) all = all.filter((p) => p.vehicle === f.vehicle);
    else if (f.trip !== undefined) {
      const trip = parseChangeDocument((await this.source.version(tenant, 'trips', f.trip, undefined))?.json);
      const vehicles = new Set(trip === undefined ? [] : filterValues('trips', trip, 'vehicle'));
      all = all.filter((p) => vehicles.has(p.vehicle));
    }
    const head = Buffer.from('event: position\ndata: ');
    const tail = Buffer.from('\n\n');
    let parts: Buffer[] = [];
    let size = 0;
    const flush = async () => {
      if (parts.length === 0 || c.closed) return;
      c.sink.write(Buffer.concat(parts, size));
      parts = [];
      size = 0;
      await c.drained();
    };
    for (const p of all) {
      const json = positionJson(p);
      parts.push(head, json, tail);
      size += head.length + json.length + tail.length;
      if (size >= 256 * 1024) await flush();
    }
    await flush();
  }

  /** Takes the stream's slot; true as well when the slots' store failed (they fail open). */
  private async acquire(slot: StreamSlot): Promise<boolean> {
    try {
      return await this.slots.acquire(slot, this.opts.perToken, this.slotTtlMs);
    } catch (err) {
      this.slotFailure(err, 'stream: counting the streams of a token failed: streams open uncounted until it works again');
      return true;
    }
  }

  /** Frees the slot; should that fail, it expires within slotTtlMs. */
  private release(slot: StreamSlot): void {
    // Nothing waits for it: a failure is logged, and the slot expires by itself.
    void this.slots
      .release(slot)
      .catch((err: unknown) => this.slotFailure(err, 'stream: freeing the slot of a stream failed: it expires by itself'));
  }

  /** Renews the slot of every open stream (on the heartbeat); one renewal at a time. */
  private renew(): void {
    if (this.renewing || this.clients.size === 0) return;
    this.renewing = true;
    // Nothing waits for it: a failure is logged, and the next heartbeat renews them all again.
    void this.slots
      .renew([...this.clients.values()], this.slotTtlMs)
      .catch((err: unknown) => this.slotFailure(err, 'stream: renewing the slots of the open streams failed; trying again'))
      .finally(() => {
        this.renewing = false;
      });
  }

  private slotFailure(err: unknown, message: string): void {
    const now = Date.now();
    if (now - this.slotWarnedAt < 60_000) return;
    this.slotWarnedAt = now;
    this.logger?.warn({ err }, message);
  }

  private startHeartbeat(): void {
    if (this.heartbeat !== undefined || this.closed) return;
    this.heartbeat = setInterval(() => {
      for (const c of this.clients.keys()) if (c.started && !c.holding) c.send(HEARTBEAT);
      this.renew();
    }, this.heartbeatMs);
    this.heartbeat.unref();
  }

  private stopHeartbeat(): void {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }

  /** Ends every stream and reading, at once (clients resume elsewhere with their Last-Event-ID). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const wake of [...this.sleeping]) wake();
    this.stopHeartbeat();
    for (const r of [...this.reading.values()]) r.stop();
    for (const c of [...this.clients.keys()]) c.end();
  }
}

// ---------------------------------------------------------------------------------------------
// Routes
// ---------------------------------------------------------------------------------------------

/** Which token a request's principal came from (StreamTickets.ref). */
const ownerOf = (tickets: StreamTickets, principal: Principal, authorization: string | undefined): string =>
  tickets.ref(principal, hash('sha256', authorization ?? '', 'hex'));

/** A vehicle or trip id, as a storage key. */
function idParam(name: string, raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  if (raw === '' || raw.length > ID_MAX) throw bad(name, `must be an id of 1 to ${ID_MAX} characters`);
  return storageKey(raw);
}

/**
 * `GET /api/v5/stream?kinds=&vehicle=&trip=&snapshot=positions&lastEventId=` (and `?ticket=`
 * instead of the Authorization header). Closes its streams when the app closes.
 */
export function registerStreamRoutes(app: FastifyInstance, hub: StreamHub, tickets: StreamTickets): void {
  app.get(
    '/api/v5/stream',
    { config: { scope: 'read', ticket: (t: string) => tickets.verify(t) }, exposeHeadRoute: false },
    async (req, reply) => {
      const q = onlyQuery(req.query, ['kinds', 'vehicle', 'trip', 'snapshot', 'lastEventId', 'ticket']);
      const kinds = kindsParam(q.kinds);
      const vehicle = idParam('vehicle', q.vehicle);
      const trip = idParam('trip', q.trip);
      if (q.snapshot !== undefined && q.snapshot !== 'positions') throw bad('snapshot', `must be positions; got '${clip(q.snapshot)}'`);
      // The header wins: an EventSource that reconnects sends the id it got last, its URL the first.
      const header = req.headers['last-event-id'];
      const [from, field] = header !== undefined ? [String(header), 'Last-Event-ID'] : [q.lastEventId, 'lastEventId'];
      if (from !== undefined && (from === '' || from.length > CURSOR_MAX || !/^[\x21-\x7e]+$/.test(from))) {
        throw bad(field, 'is not an id this stream sent');
      }
      const principal = req.principal!;
      let stream: OpenStream;
      try {
        stream = await hub.open({
          tenant: principal.tenant,
          owner: ownerOf(tickets, principal, req.headers.authorization),
          filter: {
            ...(kinds === undefined ? {} : { kinds }),
            ...(vehicle === undefined ? {} : { vehicle }),
            ...(trip === undefined ? {} : { trip }),
          },
          ...(from === undefined ? {} : { from }),
          snapshot: q.snapshot === 'positions',
          sink: reply.raw,
        });
      } catch (e) {
        if (e instanceof OtmServiceError && e.code === ErrorCode.invalidDocument) throw bad(field, 'is not an id this stream sent');
        throw e;
      }
      const res = reply.raw;
      if (res.destroyed || req.raw.socket.destroyed) {
        stream.close();
        return reply.hijack();
      }
      reply.hijack();
      res.on('close', () => stream.close());
      res.on('error', () => stream.close());
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store',
        // nginx and other proxies: pass each event on as it comes.
        'x-accel-buffering': 'no',
      });
      stream.start();
    },
  );
  app.addHook('preClose', (done) => {
    hub.close();
    done();
  });
}

/**
 * `POST /api/v5/stream/tickets`: a ticket for `GET /api/v5/stream?ticket=`, good for a minute. Any
 * process with the deployment's configuration can give one (the ingress too: it takes the POSTs).
 */
export function registerStreamTicketRoute(app: FastifyInstance, tickets: StreamTickets): void {
  app.post('/api/v5/stream/tickets', { config: { scope: 'read', bodyless: true } }, async (req, reply) => {
    onlyQuery(req.query, []);
    const principal = req.principal!;
    const ticket = tickets.issue(principal, ownerOf(tickets, principal, req.headers.authorization));
    return reply.code(200).type(JSON_TYPE).send(JSON.stringify(ticket));
  });
}
