/**
 * Durability of the embedded deployment: every write answered 200 is still there after the
 * process is killed with SIGKILL in the middle of a stream of writes and started again; and what
 * the stores keep beside the documents (lists, the change feed, tracks, latest positions) agrees
 * with the documents after such a kill, whatever moment it hit.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe, stop, type Running } from './process.js';

const TOKEN = 'crash-test-token';
const env = (dataDir: string) => ({ OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:acme:read+write` });
const headers = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const running: Running[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const r of running) await stop(r, 'SIGKILL');
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

describe('kill -9 after a 200', () => {
  it('loses no acknowledged write', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-crash-'));
    dirs.push(dataDir);
    const first = await startServe(env(dataDir));
    running.push(first);

    const acknowledged = new Map<string, unknown>();
    let killed = false;
    const writer = async (w: number) => {
      for (let i = 0; !killed && i < 2000; i++) {
        // Half entities (entity store), half telemetry events (event store).
        const [kind, doc] =
          i % 2 === 0
            ? ['vehicles', { entityType: 'vehicle', name: `truck ${w}-${i}` }]
            : [
                'events',
                {
                  eventType: 'locationUpdateEvent',
                  lifecycle: 'actual',
                  geoReference: { type: 'latLonPointGeoReference', lat: 52 + w / 100, lon: 4 + i / 1000 },
                },
              ];
        try {
          const res = await fetch(`${first.url}/api/v5/${kind}`, { method: 'PUT', headers, body: JSON.stringify(doc) });
          if (res.status === 200) {
            const body = (await res.json()) as { id: string };
            acknowledged.set(`${kind}/${body.id}`, body);
          }
        } catch {
          return; // the connection died with the process: that write was never acknowledged
        }
      }
    };
    const writers = Array.from({ length: 16 }, (_, w) => writer(w));
    while (acknowledged.size < 300) await new Promise((r) => setTimeout(r, 5));
    killed = true;
    first.child.kill('SIGKILL');
    await Promise.all(writers);
    await stop(first);

    const second = await startServe(env(dataDir));
    running.push(second);
    let missing = 0;
    for (const [path, body] of acknowledged) {
      const res = await fetch(`${second.url}/api/v5/${path}`, { headers });
      if (res.status !== 200) missing++;
      else expect(await res.json()).toEqual(body);
    }
    expect(missing).toBe(0);
    expect(acknowledged.size).toBeGreaterThanOrEqual(300);
    await stop(second);
  });
});

/*
 * Kill -9 in the middle of a stream of writes, then the indexes kept beside the documents agree with
 * them. Writers PUT and DELETE vehicles, trips (with a status and a vehicle), association and update
 * events (applied to the trips, in the entity store) and location events of a fleet of vehicles (the
 * event log), each writer one request at a time; the process is killed with SIGKILL after a number
 * of acknowledged writes (or right after a bulk request's answer, while the event log's index is
 * still behind it), started again on the same folder, and read through the HTTP API only.
 *
 * Writes in flight at the kill (sent, not answered: at most one a writer) may or may not have been
 * applied. Each id is written by one writer only, and every write changes what it writes to, so
 * what GET answers for an id is either what its acknowledged writes made or what the write in flight
 * made; the check finds out which, and from then on takes it as fact: a write that was applied must
 * be so everywhere (its list entries, feed entries, track point, position), one that was not must be
 * nowhere; an association or update event and its effect on the trip are applied together or not at
 * all.
 *
 * Most location events carry their event time (`creationDate`); those of a few vehicles do not, and
 * are then at the time the service accepted them, which must not change when the event is indexed
 * only by the replay of the log at the next start.
 */

type Kind = 'vehicles' | 'trips' | 'events';
type Json = Record<string, any>;

/** One write's effect on one id: the document GET then answers, or gone. */
interface Change {
  readonly op: 'put' | 'delete';
  readonly doc?: Json;
  /** Order in which the writes were sent, across the stream. */
  seq?: number;
  /** When it was sent and answered (for one in flight that was applied: the kill), by this process's clock. */
  sentAt?: number;
  answeredAt?: number;
}

/** One id the stream writes, and what is known of it. */
class Entity {
  /** The changes acknowledged (or found applied after the kill), in the order they were made. */
  readonly history: Change[] = [];
  /** A change sent but not answered when the process was killed; `group`: the request it came with. */
  inFlight: { change: Change; group: object } | undefined;
  /** Written since the last check by GET. */
  written = true;
  constructor(
    readonly kind: Kind,
    readonly id: string,
    readonly owner: number,
    /** For a location event: its vehicle and event time (never changed by its updates; none: the time it is accepted). */
    readonly location?: { readonly vehicle: string; readonly time: number | undefined },
  ) {}

  /** The document GET answers by what is known (undefined: 404). */
  get current(): Json | undefined {
    const last = this.history[this.history.length - 1];
    return last?.op === 'put' ? last.doc : undefined;
  }

  /** The last put applied, deleted since or not. */
  get lastPut(): Change | undefined {
    return this.history.findLast((c) => c.op === 'put');
  }

  /** Kept in the event log (telemetry) rather than the entity store. */
  get telemetry(): boolean {
    return this.location !== undefined;
  }
}

const STATUSES = ['confirmed', 'inTransit', 'completed', 'cancelled'] as const;
const EVENT_TYPES = ['locationUpdateEvent', 'associationCreatedEvent', 'updateEvent'] as const;
const FLEET = 20;
/** The first vehicles of the fleet have location events without an event time, each written by one writer (of the same number). */
const CLOCKLESS = 4;
const WRITERS = 8;
const ref = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
const pick = <T>(a: readonly T[]): T => a[Math.floor(Math.random() * a.length)]!;
const coord = (x: number) => Math.round(x * 1e5) / 1e5;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One request of the stream and what it changes. */
interface Write {
  readonly method: 'PUT' | 'DELETE' | 'POST';
  readonly path: string;
  readonly body?: string;
  readonly contentType?: string;
  readonly changes: ReadonlyArray<readonly [Entity, Change]>;
}

/**
 * The shares of a writer's writes that go to the event log, as cumulative thresholds of a random
 * number: below `location` a new location event, then up to `correction` a correction of one, then
 * up to `deletion` a deletion of one; the rest are writes of entities and of events that change
 * them, in their usual proportions.
 */
interface Mix {
  readonly location: number;
  readonly correction: number;
  readonly deletion: number;
}
/** The thresholds nextWrite reads its random number against (a stream's mix is mapped onto them). */
const USUAL_MIX: Mix = { location: 0.4, correction: 0.45, deletion: 0.5 };

/** Maps `u` in [0, 1) piecewise linearly, so that [0, from[0]) becomes [0, to[0]), [from[0], from[1]) becomes [to[0], to[1]), and so on up to 1. */
function mapShares(u: number, from: readonly number[], to: readonly number[]): number {
  let a = 0;
  let b = 0;
  for (let i = 0; i <= from.length; i++) {
    const fa = from[i] ?? 1;
    const tb = to[i] ?? 1;
    if (u < fa) return b + ((u - a) / (fa - a)) * (tb - b);
    a = fa;
    b = tb;
  }
  return u;
}

class Stream {
  constructor(readonly mix: Mix = USUAL_MIX) {}

  readonly entities = new Map<string, Entity>();
  readonly fleet: string[] = Array.from({ length: FLEET }, () => randomUUID());
  /** Event times: a second apart, increasing in the order the events are made, before now. */
  readonly base = Math.floor(Date.now() / 1000) * 1000 - 6 * 3_600_000;
  private ticks = 0;
  private serial = 0;
  /** Writes acknowledged so far. */
  acked = 0;
  /** Set at the kill (and when): writers send nothing more. */
  killed = false;
  killedAt = 0;
  /** Answers that no write of the stream should get. */
  readonly unexpected: string[] = [];

  entity(kind: Kind, id: string, owner: number, location?: Entity['location']): Entity {
    const e = new Entity(kind, id, owner, location);
    this.entities.set(`${kind}/${id}`, e);
    return e;
  }

  isClockless(vehicle: string): boolean {
    const i = this.fleet.indexOf(vehicle);
    return i >= 0 && i < CLOCKLESS;
  }

  /** The owner's entities of a kind that are there (by what is known), not in flight. */
  live(owner: number, kind: Kind, telemetry: boolean): Entity[] {
    const out: Entity[] = [];
    for (const e of this.entities.values()) {
      if (e.owner === owner && e.kind === kind && e.telemetry === telemetry && e.current !== undefined && e.inFlight === undefined)
        out.push(e);
    }
    return out;
  }

  /**
   * The order of a vehicle's location events by event time: their event time, then id; for the
   * clockless vehicles, the order in which their last puts were sent (one writer, one at a time).
   */
  byTime(vehicle: string, lastPut: (e: Entity) => Change | undefined): (a: Entity, b: Entity) => number {
    if (this.isClockless(vehicle)) return (a, b) => lastPut(a)!.seq! - lastPut(b)!.seq!;
    return (a, b) => a.location!.time! - b.location!.time! || (a.id < b.id ? -1 : 1);
  }

  /** The newest location event of each vehicle, applied or sent. */
  newestByVehicle(): Map<string, Entity> {
    const sent = (x: Entity) => x.inFlight?.change ?? x.lastPut;
    const newest = new Map<string, Entity>();
    for (const x of this.entities.values()) {
      if (x.location === undefined || sent(x) === undefined) continue;
      const had = newest.get(x.location.vehicle);
      if (had === undefined || this.byTime(x.location.vehicle, sent)(x, had) > 0) newest.set(x.location.vehicle, x);
    }
    return newest;
  }

  locationEvent(owner: number, vehicle: string): { entity: Entity; doc: Json } {
    const time = this.isClockless(vehicle) ? undefined : this.base + ++this.ticks * 1000;
    const entity = this.entity('events', randomUUID(), owner, { vehicle, time });
    return { entity, doc: this.locationDoc(entity, 52 + Math.random(), 5 + Math.random()) };
  }

  locationDoc(e: Entity, lat: number, lon: number): Json {
    const { vehicle, time } = e.location!;
    return {
      id: e.id,
      eventType: 'locationUpdateEvent',
      lifecycle: 'actual',
      ...(time === undefined ? {} : { creationDate: new Date(time).toISOString() }),
      vehicle: ref('vehicle', vehicle),
      geoReference: { type: 'latLonPointGeoReference', lat: coord(lat), lon: coord(lon) },
    };
  }

  /**
   * The next write of writer `w`: a mix of every kind of change, on its own ids only. Each changes
   * what it writes to (names numbered across the whole stream, another position, status or
   * vehicle), so that after a kill GET tells whether a write in flight was applied.
   */
  nextWrite(w: number): Write {
    const n = ++this.serial;
    const put = (e: Entity, doc: Json): Write => ({
      method: 'PUT',
      path: `/api/v5/${e.kind}`,
      body: JSON.stringify(doc),
      changes: [[e, { op: 'put', doc }]],
    });
    const del = (e: Entity): Write => ({ method: 'DELETE', path: `/api/v5/${e.kind}/${e.id}`, changes: [[e, { op: 'delete' }]] });
    const m = this.mix;
    const r = mapShares(
      Math.random(),
      [m.location, m.correction, m.deletion],
      [USUAL_MIX.location, USUAL_MIX.correction, USUAL_MIX.deletion],
    );
    if (r < 0.4) {
      const vehicle = w < CLOCKLESS && r < 0.1 ? this.fleet[w]! : pick(this.fleet.slice(CLOCKLESS));
      const { entity, doc } = this.locationEvent(w, vehicle);
      return put(entity, doc);
    }
    if (r < 0.45) {
      // A correction of one of its location events: same event time, another position.
      const e = this.live(w, 'events', true);
      if (e.length > 0) {
        const target = pick(e);
        return put(target, this.locationDoc(target, 50 + Math.random(), 3 + Math.random()));
      }
    }
    if (r < 0.5) {
      // Not the newest of its vehicle: a deletion leaves the vehicle's latest position as it is.
      const newest = this.newestByVehicle();
      const e = this.live(w, 'events', true).filter((x) => newest.get(x.location!.vehicle) !== x);
      if (e.length > 0) return del(pick(e));
    }
    const trips = this.live(w, 'trips', false);
    if (r < 0.62 || trips.length === 0) {
      const trip = r < 0.56 || trips.length === 0 ? this.entity('trips', randomUUID(), w) : pick(trips);
      return put(trip, {
        id: trip.id,
        entityType: 'trip',
        name: `trip ${w}-${n}`,
        status: pick(STATUSES),
        vehicle: ref('vehicle', pick(this.fleet)),
      });
    }
    if (r < 0.7) {
      const trip = pick(trips);
      const vehicle = pick(this.fleet.filter((v) => v !== trip.current!.vehicle?.uuid));
      const event = this.entity('events', randomUUID(), w);
      const doc = {
        id: event.id,
        eventType: 'associationCreatedEvent',
        lifecycle: 'actual',
        entity1: ref('trip', trip.id),
        entity2: ref('vehicle', vehicle),
      };
      return {
        method: 'PUT',
        path: '/api/v5/events',
        body: JSON.stringify(doc),
        changes: [
          [event, { op: 'put', doc }],
          [trip, { op: 'put', doc: { ...trip.current!, vehicle: ref('vehicle', vehicle) } }],
        ],
      };
    }
    if (r < 0.77) {
      const trip = pick(trips);
      const status = pick(STATUSES.filter((s) => s !== trip.current!.status));
      const event = this.entity('events', randomUUID(), w);
      const doc = { id: event.id, eventType: 'updateEvent', lifecycle: 'actual', entity: { entityType: 'trip', id: trip.id, status } };
      return {
        method: 'PUT',
        path: '/api/v5/events',
        body: JSON.stringify(doc),
        changes: [
          [event, { op: 'put', doc }],
          [trip, { op: 'put', doc: { ...trip.current!, status } }],
        ],
      };
    }
    if (r < 0.82) return del(pick(trips));
    const vehicles = this.live(w, 'vehicles', false);
    if (r < 0.95 || vehicles.length === 0) {
      const v = r < 0.9 || vehicles.length === 0 ? this.entity('vehicles', randomUUID(), w) : pick(vehicles);
      return put(v, { id: v.id, entityType: 'vehicle', name: `van ${w}-${n}`, licensePlate: `W${w}-${n}` });
    }
    return del(pick(vehicles));
  }

  /** Sends one write; an answer 2xx makes it acknowledged, no answer leaves it in flight. */
  async send(url: string, write: Write): Promise<'answered' | 'died'> {
    // The changes of one request are applied together, but for a bulk request's items (independent).
    const group = {};
    const sentAt = Date.now();
    const seq = ++this.serial;
    for (const [e, change] of write.changes) {
      Object.assign(change, { seq, sentAt });
      e.inFlight = { change, group: write.method === 'POST' ? {} : group };
      e.written = true;
    }
    let res: Response;
    try {
      res = await fetch(`${url}${write.path}`, {
        method: write.method,
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': write.contentType ?? 'application/json' },
        ...(write.body === undefined ? {} : { body: write.body }),
      });
    } catch {
      return 'died'; // no answer: the process died with the write in flight
    }
    const answeredAt = Date.now();
    const text = await res.text().catch(() => '');
    if (res.status !== 200 && res.status !== 204) {
      // Not applied if the service said so (4xx); a mistake of the test either way.
      this.unexpected.push(`${write.method} ${write.path}: ${res.status} ${text.slice(0, 300)}`);
      if (res.status < 500) for (const [e] of write.changes) e.inFlight = undefined;
      return 'answered';
    }
    if (write.method === 'POST') {
      const answer = JSON.parse(text) as { accepted: number; rejected: number };
      if (answer.rejected !== 0) this.unexpected.push(`${write.path}: ${text.slice(0, 300)}`);
    } else if (write.method === 'PUT') {
      const doc = write.changes[0]![1].doc;
      if (!isDeepStrictEqual(JSON.parse(text), doc))
        this.unexpected.push(`${write.path}: answered ${text.slice(0, 300)}, sent ${write.body}`);
    }
    for (const [e, change] of write.changes) {
      change.answeredAt = answeredAt;
      e.history.push(change);
      e.inFlight = undefined;
    }
    this.acked += write.method === 'POST' ? write.changes.length : 1;
    return 'answered';
  }

  /** Runs writer `w` until the kill. */
  async writer(url: string, w: number): Promise<void> {
    for (let n = 0; !this.killed && n < 5_000; n++) if ((await this.send(url, this.nextWrite(w))) === 'died') return;
  }

  /** A bulk request of `count` location events of the fleet (with their event times), as NDJSON. */
  bulk(count: number): Write {
    const changes: Array<readonly [Entity, Change]> = [];
    for (let i = 0; i < count; i++) {
      const { entity, doc } = this.locationEvent(-1, this.fleet[CLOCKLESS + (i % (FLEET - CLOCKLESS))]!);
      changes.push([entity, { op: 'put', doc }]);
    }
    return {
      method: 'POST',
      path: '/api/v5/bulk/events',
      contentType: 'application/x-ndjson',
      body: changes.map(([, c]) => JSON.stringify(c.doc)).join('\n'),
      changes,
    };
  }

  /**
   * A bulk request that corrects up to `count` of the bulk requests' location events (another
   * position, the same event time), as NDJSON: the records of their earlier versions are then dead
   * in the event log, which compaction drops.
   */
  corrections(count: number): Write {
    const live = this.live(-1, 'events', true);
    // A random `count` of them (a partial Fisher-Yates shuffle), so that every segment gets some.
    for (let i = 0; i < Math.min(count, live.length); i++) {
      const j = i + Math.floor(Math.random() * (live.length - i));
      [live[i], live[j]] = [live[j]!, live[i]!];
    }
    const changes = live
      .slice(0, count)
      .map((e): readonly [Entity, Change] => [e, { op: 'put', doc: this.locationDoc(e, 50 + Math.random(), 3 + Math.random()) }]);
    return {
      method: 'POST',
      path: '/api/v5/bulk/events',
      contentType: 'application/x-ndjson',
      body: changes.map(([, c]) => JSON.stringify(c.doc)).join('\n'),
      changes,
    };
  }

  /** Kills the process: writers send nothing more. */
  kill(r: Running): void {
    this.killed = true;
    this.killedAt = Date.now();
    r.child.kill('SIGKILL');
  }

  /**
   * After the restart: finds out, by GET, which writes in flight at the kill were applied, and
   * checks every id written since the last check against what is known of it (the others were
   * checked so after their last write, and are again as the items of the lists, which are read as
   * GET reads). Returns the problems found.
   */
  async resolve(url: string): Promise<string[]> {
    const problems: string[] = [];
    const answers = new Map<Entity, Json | undefined>();
    await pool(
      [...this.entities.values()].filter((e) => e.written),
      16,
      async (e) => {
        e.written = false;
        const res = await fetch(`${url}/api/v5/${e.kind}/${e.id}`, { headers });
        if (res.status === 200) answers.set(e, (await res.json()) as Json);
        else if (res.status === 404) answers.set(e, undefined);
        else problems.push(`GET ${e.kind}/${e.id}: ${res.status} ${await res.text()}`);
      },
    );
    const applied = new Map<object, boolean[]>();
    for (const e of this.entities.values()) {
      if (!answers.has(e)) continue;
      const got = answers.get(e);
      const f = e.inFlight;
      if (f !== undefined) {
        e.inFlight = undefined;
        const landed = isDeepStrictEqual(got, f.change.op === 'put' ? f.change.doc : undefined);
        if (landed) e.history.push(Object.assign(f.change, { answeredAt: this.killedAt }));
        applied.set(f.group, [...(applied.get(f.group) ?? []), landed]);
      }
      if (!isDeepStrictEqual(got, e.current)) {
        const want = e.current === undefined ? '404' : JSON.stringify(e.current);
        problems.push(`GET ${e.kind}/${e.id}: ${got === undefined ? '404' : JSON.stringify(got)}, expected ${want}`);
      }
    }
    for (const landed of applied.values()) {
      if (landed.some((x) => x) && landed.some((x) => !x))
        problems.push(`a write in flight was applied in part: ${JSON.stringify(landed)}`);
    }
    return problems;
  }

  /** Checks lists, filters, the change feed, positions and tracks against the documents. Returns the problems found. */
  async check(url: string): Promise<string[]> {
    const problems: string[] = [];
    const all = [...this.entities.values()];
    const there = (kind: Kind, test: (doc: Json) => boolean = () => true) =>
      new Set(all.filter((e) => e.kind === kind && e.current !== undefined && test(e.current)).map((e) => e.id));
    const read = async (path: string): Promise<Json | undefined> => {
      const res = await fetch(`${url}${path}`, { headers });
      if (res.status === 200) return (await res.json()) as Json;
      problems.push(`${path}: ${res.status} ${await res.text()}`);
      return undefined;
    };

    // Lists: every page, exactly the documents GET finds, each once and as GET answers it; filters as
    // the documents say.
    const lists: Array<[string, Set<string>]> = [
      ['/api/v5/vehicles?limit=73', there('vehicles')],
      ['/api/v5/trips?limit=73', there('trips')],
      ['/api/v5/events?limit=250', there('events')],
      ...STATUSES.map((s): [string, Set<string>] => [`/api/v5/trips?status=${s}&limit=41`, there('trips', (d) => d.status === s)]),
      ...this.fleet.map((v): [string, Set<string>] => [
        `/api/v5/trips?vehicle=${v}&limit=17`,
        there('trips', (d) => d.vehicle?.uuid === v),
      ]),
      ...this.fleet.map((v): [string, Set<string>] => [
        `/api/v5/events?vehicle=${v}&limit=90`,
        there('events', (d) => d.vehicle?.uuid === v),
      ]),
      ...EVENT_TYPES.map((t): [string, Set<string>] => [
        `/api/v5/events?eventType=${t}&limit=200`,
        there('events', (d) => d.eventType === t),
      ]),
    ];
    await pool(lists, 4, async ([first, want]) => {
      const kind = /^\/api\/v5\/(\w+)\?/.exec(first)![1]!;
      const seen = new Set<string>();
      for (let next: string | null = first, pages = 0; next !== null; pages++) {
        const page = pages > 2_000 ? undefined : await read(next);
        if (page === undefined) break;
        for (const item of page.items as Json[]) {
          const id = item.id as string;
          if (seen.has(id)) problems.push(`${first}: ${id} twice`);
          else if (!want.has(id)) problems.push(`${first}: ${id}, which GET does not find or which does not match`);
          else if (!isDeepStrictEqual(item, this.entities.get(`${kind}/${id}`)!.current))
            problems.push(`${first}: ${JSON.stringify(item)}, expected ${JSON.stringify(this.entities.get(`${kind}/${id}`)!.current)}`);
          seen.add(id);
        }
        next = page.next as string | null;
      }
      for (const id of want) if (!seen.has(id)) problems.push(`${first}: ${id} missing`);
    });

    // The change feed from its start: every acknowledged change of an id in the order made, and its
    // last change as GET answers the id; no id GET does not know, unless deleted later.
    const feed = new Map<string, Json[]>();
    for (let next = '/api/v5/changes?limit=1000'; ;) {
      const page = await read(next);
      if (page === undefined || page.items.length === 0) break;
      for (const item of page.items as Json[]) {
        const k = `${item.kind}/${item.id}`;
        feed.set(k, [...(feed.get(k) ?? []), item]);
      }
      next = page.next as string;
    }
    for (const k of feed.keys()) if (!this.entities.has(k)) problems.push(`feed: ${k}, never written`);
    /** Where each change applied is in the feed. */
    const cursorOf = new Map<Change, number>();
    for (const e of all) {
      const entries = feed.get(`${e.kind}/${e.id}`) ?? [];
      // The entity store's puts carry the document written; the event log's are read as stored now.
      const same = (entry: Json, c: Change) =>
        entry.op === c.op && (c.op === 'delete' || e.telemetry || isDeepStrictEqual(entry.document, c.doc));
      let at = 0;
      for (const c of e.history) {
        while (at < entries.length && !same(entries[at]!, c)) at++;
        if (at === entries.length) {
          problems.push(
            `feed: ${e.kind}/${e.id}: ${c.op} ${JSON.stringify(c.doc ?? '')} missing or out of order in ${JSON.stringify(entries)}`,
          );
          break;
        }
        cursorOf.set(c, Number(entries[at]!.cursor));
        at++;
      }
      const last = entries[entries.length - 1];
      if (last === undefined) continue;
      if ((last.op === 'put') !== (e.current !== undefined)) {
        problems.push(`feed: ${e.kind}/${e.id} ends with a ${last.op}, but GET ${e.current === undefined ? 'does not find it' : 'does'}`);
      } else if (last.op === 'put' && !isDeepStrictEqual(last.document, e.current)) {
        problems.push(`feed: ${e.kind}/${e.id} ends with ${JSON.stringify(last.document)}, GET answers ${JSON.stringify(e.current)}`);
      }
    }

    // Across ids, the writes of one writer to the entity store are in the feed in the order they were
    // answered: a unit commits, feed numbers given inside, before its answer. (The event log's feed
    // entries are given when its index commits, up to 50 ms after the answer, or at the next start
    // for those a kill cut off: for them only the order of each id's own changes holds.)
    const byWriter = new Map<number, Map<number, number[]>>();
    for (const e of all) {
      if (e.telemetry) continue;
      for (const c of e.history) {
        const cursor = cursorOf.get(c);
        if (cursor === undefined) continue;
        const writes = byWriter.get(e.owner) ?? new Map<number, number[]>();
        byWriter.set(e.owner, writes.set(c.seq!, [...(writes.get(c.seq!) ?? []), cursor]));
      }
    }
    for (const [owner, writes] of byWriter) {
      let before = 0;
      for (const [seq, cursors] of [...writes].sort((a, b) => a[0] - b[0])) {
        if (Math.min(...cursors) < before) problems.push(`feed: writer ${owner}'s write ${seq} at ${cursors.join(',')}, before ${before}`);
        before = Math.max(before, ...cursors);
      }
    }

    // When a location event happened: its creationDate, else when its last version was accepted.
    const timeOk = (e: Entity, time: string) => {
      const put = e.lastPut!;
      if (e.location!.time !== undefined) return time === put.doc!.creationDate;
      const t = Date.parse(time);
      return t >= put.sentAt! && t <= put.answeredAt!;
    };

    // Latest positions: each vehicle's newest location event by event time (a deletion leaves it).
    const positions = new Map((((await read('/api/v5/vehicles/positions'))?.items ?? []) as Json[]).map((p) => [p.vehicle as string, p]));
    for (const p of positions.keys()) if (!this.fleet.includes(p)) problems.push(`positions: ${p}, not a vehicle of the fleet`);
    for (const vehicle of this.fleet) {
      const events = all
        .filter((e) => e.location?.vehicle === vehicle && e.lastPut !== undefined)
        .sort(this.byTime(vehicle, (e) => e.lastPut));
      const newest = events[events.length - 1];
      const p = positions.get(vehicle);
      if (newest === undefined) {
        if (p !== undefined) problems.push(`positions: ${vehicle} at ${JSON.stringify(p)}, but it has no location event`);
        continue;
      }
      const doc = newest.lastPut!.doc!;
      const want = { eventId: newest.id, lat: doc.geoReference.lat, lon: doc.geoReference.lon };
      const got = p && { eventId: p.eventId, lat: p.lat, lon: p.lon };
      if (!isDeepStrictEqual(got, want) || !timeOk(newest, p!.time)) {
        problems.push(`positions: ${vehicle} at ${JSON.stringify(p)}, expected ${JSON.stringify(doc)} (${JSON.stringify(newest.lastPut)})`);
      }
    }

    // Tracks: every location event of the vehicle GET finds, in event time order, as GET answers it;
    // for the clockless vehicles also when each happened (CSV).
    const window = `from=${new Date(this.base).toISOString()}&to=${new Date(this.base + 12 * 3_600_000).toISOString()}`;
    await pool(this.fleet, 4, async (vehicle) => {
      const want = all
        .filter((e) => e.location?.vehicle === vehicle && e.current !== undefined)
        .sort(this.byTime(vehicle, (e) => e.lastPut));
      const res = await fetch(`${url}/api/v5/vehicles/${vehicle}/track?${window}&format=ndjson`, { headers });
      const got = (await res.text())
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Json);
      if (got.length !== want.length || got.some((d, i) => !isDeepStrictEqual(d, want[i]!.current))) {
        problems.push(`track of ${vehicle}: ${got.map((d) => d.id as string).join(' ')}, expected ${want.map((e) => e.id).join(' ')}`);
      }
      if (!this.isClockless(vehicle)) return;
      const csv = await (await fetch(`${url}/api/v5/vehicles/${vehicle}/track?${window}&format=csv`, { headers })).text();
      const rows = csv
        .trim()
        .split(/\r?\n/)
        .slice(1)
        .map((l) => l.split(','));
      rows.forEach((row, i) => {
        const e = want[i];
        if (e === undefined || row[5] !== e.id || !timeOk(e, row[0]!)) {
          problems.push(
            `track of ${vehicle}: ${row.join(',')} at ${i}, expected ${e?.id} (${e?.lastPut?.sentAt}-${e?.lastPut?.answeredAt} ${new Date(e?.lastPut?.sentAt ?? 0).toISOString()} killed ${this.killedAt})`,
          );
        }
      });
    });
    return problems;
  }
}

/** Runs `fn` on every item, `n` at a time. */
async function pool<T>(items: readonly T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  let i = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (i < items.length) await fn(items[i++]!);
    }),
  );
}

/** The fleet's vehicles, PUT before the stream starts. */
async function putFleet(s: Stream, url: string): Promise<void> {
  for (const [i, id] of s.fleet.entries()) {
    const doc = { id, entityType: 'vehicle', name: `truck ${i}`, licensePlate: `FL-${i}` };
    await s.send(url, {
      method: 'PUT',
      path: '/api/v5/vehicles',
      body: JSON.stringify(doc),
      changes: [[s.entity('vehicles', id, -1), { op: 'put', doc }]],
    });
  }
}

/**
 * After `s.kill`: waits for the writers, starts the service again on the same folder (`start`:
 * `otm serve`) and checks everything.
 */
async function restartAndCheck(
  s: Stream,
  r: Running,
  writers: Promise<void>[],
  dataDir: string,
  start: (dataDir: string) => Promise<Running> = (d) => startServe(env(d)),
): Promise<Running> {
  await Promise.all(writers);
  await stop(r);
  const next = await start(dataDir);
  running.push(next);
  const problems = [...(await s.resolve(next.url)), ...(await s.check(next.url))];
  expect(s.unexpected).toEqual([]);
  expect(problems.slice(0, 20)).toEqual([]);
  s.killed = false;
  return next;
}

describe('kill -9 in the middle of a stream of writes', () => {
  it('then the lists, feed, tracks and positions agree with the documents', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-crash-'));
    dirs.push(dataDir);
    const s = new Stream();
    let r = await startServe(env(dataDir));
    running.push(r);
    await putFleet(s, r.url);
    // Three kills on the same folder, each after another number of acknowledged writes.
    for (const threshold of [250, 400, 150]) {
      const from = s.acked;
      const writers = Array.from({ length: WRITERS }, (_, w) => s.writer(r.url, w));
      let stopped = false; // the writers gave up (which the checks then show)
      void Promise.all(writers).finally(() => (stopped = true));
      while (s.acked - from < threshold && !stopped) await sleep(2);
      s.kill(r);
      r = await restartAndCheck(s, r, writers, dataDir);
    }
    await stop(r);
  }, 90_000);

  it('right after a bulk request was answered, while the event index is behind it', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-crash-'));
    dirs.push(dataDir);
    const s = new Stream();
    let r = await startServe(env(dataDir));
    running.push(r);
    await putFleet(s, r.url);
    // The index commit follows a write by ~50 ms, in chunks of 1,000 changes (index-writer.ts):
    // killed at once (none of the bulk indexed), then a little later (in the middle of its chunks),
    // with other writes going on.
    for (const delay of [0, 45, 60]) {
      const writers = Array.from({ length: 4 }, (_, w) => s.writer(r.url, w));
      await sleep(100);
      expect(await s.send(r.url, s.bulk(1_000))).toBe('answered');
      expect(await s.send(r.url, s.bulk(3_000))).toBe('answered');
      if (delay > 0) await sleep(delay);
      s.kill(r);
      r = await restartAndCheck(s, r, writers, dataDir);
    }
    await stop(r);
  }, 90_000);
});

/*
 * Kill -9 in the middle of a compaction of the event log. `otm serve` keeps the event log in
 * segments of 64 MB and looks for segments worth compacting every 10 minutes by default; here it
 * runs with segments of 16 KB compacted every 100 ms (OTM_EVENT_SEGMENT_BYTES,
 * OTM_EVENT_COMPACTION_INTERVAL). Each round writes location events in bulk and then corrects most
 * of them (another position, the same event time), while writers go on with the usual mix (more
 * corrections and deletions of location events than usual): the sealed segments are then mostly
 * dead, and compaction rewrites them. The process is killed with SIGKILL at a moment of the
 * compaction: when two generations of one segment are on disk (the new one being written, or the
 * index moving to it, or the old file not removed yet; compaction.ts), at once or a few
 * milliseconds later; or some time after the corrections were answered, without looking. Then it
 * is started again on the same folder and everything is checked as above (every acknowledged write
 * read back as its last version, deletions 404, lists, feed, tracks, positions).
 */

const SEGMENT_BYTES = 16 * 1024;

/** `otm serve` on `dataDir` with event segments of 16 KB compacted every 100 ms; resolves once it listens. */
const startCompacting = (dataDir: string): Promise<Running> =>
  startServe({ ...env(dataDir), OTM_EVENT_SEGMENT_BYTES: String(SEGMENT_BYTES), OTM_EVENT_COMPACTION_INTERVAL: '100ms' });

/** Segments of the event log in `dataDir` with two generations on disk: a compaction of them under way. */
function compactingNow(dataDir: string): string[] {
  const gens = new Map<string, number>();
  for (const f of fs.readdirSync(path.join(dataDir, 'events'))) {
    const m = /^(\d{10})(?:\.\d+)?\.log$/.exec(f);
    if (m) gens.set(m[1]!, (gens.get(m[1]!) ?? 0) + 1);
  }
  return [...gens].filter(([, n]) => n > 1).map(([seg]) => seg);
}

/** What the event log's recovery said at a start (its warnings), in short. */
function recoveryNotes(stdout: string): string[] {
  const notes: string[] = [];
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    const msg = (JSON.parse(line) as { msg?: string }).msg ?? '';
    if (/^event log/.test(msg)) notes.push(msg.replace(/, (left by|which) .*$/, '').replace(/^event log:? /, ''));
  }
  return notes;
}

describe('kill -9 in the middle of a compaction of the event log', () => {
  it('then every acknowledged write reads back as its last version, deletions are 404, and lists, feed, tracks and positions agree', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-crash-compaction-'));
    dirs.push(dataDir);
    // Twice the usual share of location events, mostly corrections and deletions of them.
    const s = new Stream({ location: 0.2, correction: 0.55, deletion: 0.7 });
    const restarts: Array<{ listening: number; answered: number }> = [];
    /** Starts the service again, and times it: until it listens, and until a GET is answered 200. */
    const start = async (dir: string): Promise<Running> => {
      const from = Date.now();
      const r = await startCompacting(dir);
      const listening = Date.now() - from;
      for (;;) {
        const res = await fetch(`${r.url}/api/v5/vehicles/${s.fleet[0]}`, { headers }).catch(() => undefined);
        if (res?.status === 200) break;
        if (Date.now() - from > 120_000) throw new Error(`no GET answered 200 within 120 s of the start: ${res?.status}`);
        await sleep(5);
      }
      restarts.push({ listening, answered: Date.now() - from });
      return r;
    };
    let r = await startCompacting(dataDir);
    running.push(r);
    await putFleet(s, r.url);
    // When each round kills: ms after two generations of a segment were first seen, or (blind) ms
    // after the corrections were answered.
    const moments: Array<{ seen: number } | { blind: number }> = [
      { seen: 0 },
      { seen: 0 },
      { seen: 2 },
      { seen: 5 },
      { seen: 10 },
      { seen: 25 },
      { blind: 30 },
      { blind: 120 },
      { blind: 250 },
    ];
    const rounds: string[] = [];
    for (const [i, moment] of moments.entries()) {
      const writers = Array.from({ length: 4 }, (_, w) => s.writer(r.url, w));
      expect(await s.send(r.url, s.bulk(600))).toBe('answered');
      expect(await s.send(r.url, s.corrections(500))).toBe('answered');
      let seen: string[] = [];
      if ('seen' in moment) {
        const until = Date.now() + 15_000;
        while ((seen = compactingNow(dataDir)).length === 0 && Date.now() < until) await sleep(1);
        if (moment.seen > 0) await sleep(moment.seen);
      } else {
        await sleep(moment.blind);
      }
      // What is on disk right before the kill (a step may still end in between).
      const atKill = compactingNow(dataDir);
      const files = fs.readdirSync(path.join(dataDir, 'events')).length;
      s.kill(r);
      const killed = r;
      r = await restartAndCheck(s, r, writers, dataDir, start);
      running.push(r);
      const t = restarts[restarts.length - 1]!;
      const notes = recoveryNotes(r.stdout());
      const segs = (list: string[]) => (list.length === 0 ? 'none' : list.map(Number).join(','));
      rounds.push(
        `kill ${i + 1} (${'seen' in moment ? `${moment.seen} ms after a compaction was seen, of segment ${segs(seen)}` : `${moment.blind} ms after the corrections, blind`}): ` +
          `in two generations at the kill: ${segs(atKill)}; ${files} files; ${s.acked} writes acknowledged so far; ` +
          `restart: listening in ${(t.listening / 1000).toFixed(2)} s, first GET 200 in ${(t.answered / 1000).toFixed(2)} s; ` +
          `recovery: ${notes.join('; ') || 'nothing to say'}`,
      );
      expect(killed.child.signalCode).toBe('SIGKILL');
      if ('seen' in moment) expect(seen, `round ${i + 1}: no compaction seen under way within 15 s`).not.toEqual([]);
      // A generous liveness bound, not a timing target.
      expect(t.answered).toBeLessThan(120_000);
    }
    const log = fs.readdirSync(path.join(dataDir, 'events')).map((f) => fs.statSync(path.join(dataDir, 'events', f)).size);
    console.log(
      `compaction crash: ${moments.length} kills, ${s.acked} writes acknowledged, ${s.entities.size} ids, all found as acknowledged after every restart\n` +
        `${rounds.join('\n')}\n` +
        `the log is ${log.length} files, ${Math.round(log.reduce((a, b) => a + b, 0) / 1024)} KB at the end`,
    );
    await stop(r);
  }, 240_000);
});

describe('a generated token', () => {
  it('is created, kept, named (not printed: the output is not a terminal) and used again after a restart', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-token-'));
    dirs.push(dataDir);
    const first = await startServe({ OTM_DATA_DIR: dataDir });
    running.push(first);
    const file = path.join(dataDir, 'token');
    const token = fs.readFileSync(file, 'utf8').split(':')[0]!;
    expect(token.length).toBeGreaterThanOrEqual(16);
    expect(first.stdout()).toContain('created');
    expect(first.stdout()).toContain(file);
    expect(first.stdout()).not.toContain(token);
    expect((fs.statSync(path.join(dataDir, 'token')).mode & 0o777).toString(8)).toBe('600');
    const put = await fetch(`${first.url}/api/v5/vehicles`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"entityType":"vehicle"}',
    });
    expect(put.status).toBe(200);
    await stop(first);
    const second = await startServe({ OTM_DATA_DIR: dataDir });
    running.push(second);
    expect(second.stdout()).not.toContain(token);
    expect(second.stdout()).toContain('using');
    const get = await fetch(`${second.url}/api/v5/vehicles/${((await put.json()) as { id: string }).id}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(get.status).toBe(200);
    await stop(second);
  });

  it('a bad setting stops the start with the name of the variable', async () => {
    await expect(startServe({ OTM_TOKENS: 'x:y', OTM_DATA_DIR: os.tmpdir() })).rejects.toThrow(/OTM_TOKENS/);
  });
});
