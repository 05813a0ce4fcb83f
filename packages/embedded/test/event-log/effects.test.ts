/**
 * What the event log records in its index commit besides the index (effects.ts): tracks, lists of
 * events, latest positions and feed entries; and that a start after a crash records them again.
 */
import { describe, expect, it } from 'vitest';
import {
  eventFacts,
  type DocumentWrite,
  type FeedEntry,
  type LatestPosition,
  type ListScan,
  type TrackPoint,
  type TrackScan,
} from '@otm/core';
import { binaryDb, decodeVehicleEntry, keyCodecOf, vehicleBase } from '../../src/event-log/effects.js';
import { INDEX_CHUNK } from '../../src/event-log/index-writer.js';
import { clearIndex, failCommits, useTempStores, withLmdb, type EmbeddedStores } from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

const V1 = '00000000-0000-4000-8000-0000000000a1';
const V2 = '00000000-0000-4000-8000-0000000000a2';
const T0 = Date.UTC(2025, 0, 1);

/** A location event of `vehicle` at `time`, linked as clients do (inline, or in `references`). */
function location(key: string, vehicle: string, time: number, lat = 50, lon = 4, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    id: key,
    eventType: 'locationUpdateEvent',
    creationDate: new Date(time).toISOString(),
    vehicle: { associationType: 'reference', uuid: vehicle, entityType: 'vehicle' },
    geoReference: { type: 'latLonPointGeoReference', lat, lon, speed: { value: 10, unit: 'm/s' }, heading: { value: 90, unit: 'deg' } },
    ...extra,
  });
}
const put = (key: string, json: string, rank = 0, acceptedAt = 1000, tenant = 't'): DocumentWrite => ({
  op: 'put',
  tenant,
  doc: { kind: 'events', key, lifecycleRank: rank, json, stamp: { modified: 0, acceptedAt } },
});
/** A put as a bulk request hands it over: the text only, no value and no stamp. */
const bare = (key: string, json: string): DocumentWrite => ({
  op: 'put',
  tenant: 't',
  doc: { kind: 'events', key, lifecycleRank: 0, json },
});
const del = (key: string, tenant = 't'): DocumentWrite => ({ op: 'delete', tenant, kind: 'events', key });
const indexed = (s: EmbeddedStores) => (s.events as unknown as { writer: { flush(): Promise<void> } }).writer.flush();

async function track(s: EmbeddedStores, scan: Partial<TrackScan> = {}): Promise<TrackPoint[]> {
  const out: TrackPoint[] = [];
  for await (const p of s.events.track({ tenant: 't', vehicle: V1, from: 0, to: 4e12, ...scan })) out.push(p);
  return out;
}
const keysOf = (ps: ReadonlyArray<{ key: string }>) => ps.map((p) => p.key);
const k = (i: number) => `e${String(i).padStart(3, '0')}`;

async function feed(s: EmbeddedStores): Promise<FeedEntry[]> {
  return (await s.entities.feed.read({ tenant: 't', limit: 10_000 })).entries;
}

describe('event log tracks, lists, positions and feed', () => {
  it('answers a track in event time order within its window, after a point, up to a limit', async () => {
    const s = openAt(tmp());
    // Written out of order, with another vehicle's and a non-location event among them.
    const order = Array.from({ length: 40 }, (_, i) => (i * 17) % 40);
    await s.events.write(order.map((i) => put(k(i), location(k(i), V1, T0 + i * 1000, 50 + i / 100))));
    await s.events.write([
      put('other', location('other', V2, T0 + 5000)),
      put('sensor', JSON.stringify({ id: 'sensor', eventType: 'sensorUpdateEvent' })),
    ]);
    await indexed(s);

    const all = await track(s);
    expect(keysOf(all)).toEqual(Array.from({ length: 40 }, (_, i) => k(i)));
    expect(all[3]).toMatchObject({ time: T0 + 3000, key: k(3), lifecycleRank: 0, lat: 50.03, lon: 4, speedKmh: 36, heading: 90 });
    expect(Buffer.from(all[3]!.doc).toString()).toBe(location(k(3), V1, T0 + 3000, 50.03));
    expect(keysOf(await track(s, { from: T0 + 10_000, to: T0 + 15_000 }))).toEqual([k(10), k(11), k(12), k(13), k(14)]);
    expect(keysOf(await track(s, { after: { time: T0 + 37_000, key: k(37) } }))).toEqual([k(38), k(39)]);
    // `after` before the window: the window counts.
    expect(keysOf(await track(s, { from: T0 + 38_000, after: { time: T0, key: k(0) } }))).toEqual([k(38), k(39)]);
    expect(keysOf(await track(s, { limit: 3, after: { time: T0 + 5000, key: k(5) } }))).toEqual([k(6), k(7), k(8)]);
    expect(await track(s, { limit: 0 })).toEqual([]);
    expect(keysOf(await track(s, { vehicle: V2 }))).toEqual(['other']);
    expect(await track(s, { tenant: 'u' })).toEqual([]);
  });

  it('reads a long track a chunk at a time, whole and in order', async () => {
    const s = openAt(tmp());
    for (let b = 0; b < 3; b++)
      await s.events.write(
        Array.from({ length: 700 }, (_, j) => put(`p${b * 700 + j}`, location(`p${b * 700 + j}`, V1, T0 + (b * 700 + j) * 1000))),
      );
    await indexed(s);
    const all = await track(s);
    expect(all).toHaveLength(2100);
    for (let i = 1; i < all.length; i++) expect(all[i]!.time).toBeGreaterThan(all[i - 1]!.time);
    expect(await track(s, { limit: 1000 })).toHaveLength(1000);
  });

  it('moves a point when its event is put again with another time or vehicle, and removes it on delete', async () => {
    const s = openAt(tmp());
    await s.events.write([
      put('a', location('a', V1, T0 + 1000)),
      put('b', location('b', V1, T0 + 2000)),
      put('c', location('c', V1, T0 + 3000)),
    ]);
    await indexed(s);
    // Moved in time, in the same index commit as another put of it.
    await s.events.write([put('a', location('a', V1, T0 + 5000)), put('a', location('a', V1, T0 + 4000))]);
    await s.events.write([put('b', location('b', V2, T0 + 2000))]);
    await s.events.write([del('c')]);
    await indexed(s);
    expect((await track(s)).map((p) => [p.key, p.time])).toEqual([['a', T0 + 4000]]);
    expect(keysOf(await track(s, { vehicle: V2 }))).toEqual(['b']);
    // A later version without a position takes the point out.
    await s.events.write([put('a', JSON.stringify({ id: 'a', eventType: 'locationUpdateEvent', lifecycle: 'actual' }), 4)]);
    await indexed(s);
    expect(await track(s)).toEqual([]);
    // The point's document is the event's latest version.
    await s.events.write([put('d', location('d', V1, T0, 1, 2, { lifecycle: 'planned' }), 2), put('d', location('d', V1, T0, 1, 2), 0)]);
    await indexed(s);
    const [d] = await track(s);
    expect(d).toMatchObject({ key: 'd', lifecycleRank: 2 });
    expect(String(d!.doc)).toContain('planned');
  });

  it("lists events at their event time: all of them, or a vehicle's; any other facet answers all", async () => {
    const s = openAt(tmp());
    // Accepted in another order than their event times.
    await s.events.write([put('a', location('a', V1, T0 + 3000), 0, 1000), put('b', location('b', V2, T0 + 1000), 0, 2000)]);
    await s.events.write([
      put('s', JSON.stringify({ id: 's', eventType: 'sensorUpdateEvent', creationDate: new Date(T0 + 2000).toISOString() }), 0, 3000),
      // No event time: listed at when it was accepted.
      put('n', JSON.stringify({ id: 'n', eventType: 'sensorUpdateEvent', externalIdentifiers: [{ id: 'X|1' }] }), 0, 4000),
    ]);
    await indexed(s);
    const list = (facet: string, more: Partial<ListScan> = {}) => s.events.list({ tenant: 't', kind: 'events', facet, limit: 10, ...more });
    const all = [
      { at: 4000, key: 'n' },
      { at: T0 + 1000, key: 'b' },
      { at: T0 + 2000, key: 's' },
      { at: T0 + 3000, key: 'a' },
    ];
    expect(await list('')).toEqual(all);
    expect(await list(`vehicle=${V1}`)).toEqual([{ at: T0 + 3000, key: 'a' }]);
    expect(await list(`vehicle=${V2}`)).toEqual([{ at: T0 + 1000, key: 'b' }]);
    expect(await list('vehicle=00000000-0000-4000-8000-0000000000ff')).toEqual([]);
    expect(await list('vehicle=a|b')).toEqual([]);
    // Not indexed: every event is a candidate, the query checks the document.
    for (const facet of ['eventType=locationUpdateEvent', 'lifecycle=actual', 'externalId=X|1']) expect(await list(facet)).toEqual(all);
    // Keyset bounds on event time.
    expect(await list('', { limit: 1, after: { at: T0 + 1000, key: 'b' } })).toEqual([{ at: T0 + 2000, key: 's' }]);
    expect(await list('', { after: { at: T0 + 1000, key: 'a' } })).toEqual(all.slice(1));
    expect(keysOf(await list('', { since: T0 + 1000, before: T0 + 3000 }))).toEqual(['b', 's']);
    expect(keysOf(await list('', { limit: 2 }))).toEqual(['n', 'b']);
    expect(await list('', { limit: 0 })).toEqual([]);
    // Other tenants and kinds: nothing.
    expect(await s.events.list({ tenant: 'u', kind: 'events', facet: '', limit: 10 })).toEqual([]);
    expect(await s.events.list({ tenant: 't', kind: 'trips', facet: '', limit: 10 })).toEqual([]);
    // A bulk write's text (no value, no acceptance time), parsed once: at its event time, or else when it was written.
    const before = Date.now();
    await s.events.write([bare('z', location('z', V1, T0 + 9000)), bare('y', JSON.stringify({ id: 'y', eventType: 'weighEvent' }))]);
    await indexed(s);
    expect((await list(`vehicle=${V1}`)).at(-1)).toEqual({ at: T0 + 9000, key: 'z' });
    expect((await list('', { since: before })).map((e) => e.key)).toEqual(['y']);
  });

  it('moves an event in its lists when it is put again with another time or vehicle, and removes it on delete', async () => {
    const s = openAt(tmp());
    await s.events.write([
      put('a', location('a', V1, T0 + 1000)),
      put('b', location('b', V1, T0 + 2000)),
      put('c', location('c', V1, T0 + 3000)),
    ]);
    await indexed(s);
    await s.events.write([put('a', location('a', V1, T0 + 4000))]);
    await s.events.write([put('b', location('b', V2, T0 + 2000))]);
    await s.events.write([del('c'), del('never')]);
    // A planned version put last: its time and vehicle count (only the latest put's do).
    await s.events.write([
      put('d', location('d', V1, T0 + 500)),
      put('d', location('d', V2, T0 + 600, 50, 4, { lifecycle: 'planned' }), 2),
    ]);
    await indexed(s);
    const list = (facet: string) => s.events.list({ tenant: 't', kind: 'events', facet, limit: 10 });
    expect(await list('')).toEqual([
      { at: T0 + 600, key: 'd' },
      { at: T0 + 2000, key: 'b' },
      { at: T0 + 4000, key: 'a' },
    ]);
    expect(keysOf(await list(`vehicle=${V1}`))).toEqual(['a']);
    expect(keysOf(await list(`vehicle=${V2}`))).toEqual(['d', 'b']);
    // A later version without a vehicle leaves the vehicle's list; put again unchanged, it stays once.
    await s.events.write([
      put('a', JSON.stringify({ id: 'a', eventType: 'locationUpdateEvent', creationDate: new Date(T0 + 4000).toISOString() }), 4),
    ]);
    await s.events.write([put('b', location('b', V2, T0 + 2000))]);
    await indexed(s);
    expect(keysOf(await list(`vehicle=${V1}`))).toEqual([]);
    expect(keysOf(await list(`vehicle=${V2}`))).toEqual(['d', 'b']);
    expect(keysOf(await list(''))).toEqual(['d', 'b', 'a']);
    await s.events.write([del('a'), del('b'), del('d')]);
    await indexed(s);
    expect(await list('')).toEqual([]);
    expect(await list(`vehicle=${V2}`)).toEqual([]);
    // Nothing is left behind: the three databases are empty.
    const effects = (s.events as unknown as { effects: Record<'byTime' | 'byVehicle' | 'records', { getKeys(): Iterable<unknown> }> })
      .effects;
    for (const db of [effects.byTime, effects.byVehicle, effects.records]) expect([...db.getKeys()]).toEqual([]);
  });

  it("keeps in a vehicle's entries what its track needs: rank, type, position; only located location events are points", async () => {
    const s = openAt(tmp());
    const vehicle = { associationType: 'reference', uuid: V1, entityType: 'vehicle' };
    const at = (ms: number) => new Date(T0 + ms).toISOString();
    await s.events.write([
      put('loc', location('loc', V1, T0 + 1000, 51.5, -0.1), 4),
      put('nopos', JSON.stringify({ id: 'nopos', eventType: 'locationUpdateEvent', creationDate: at(2000), vehicle })),
      put(
        'sensor',
        JSON.stringify({
          id: 'sensor',
          eventType: 'sensorUpdateEvent',
          creationDate: at(3000),
          vehicle,
          geoReference: { type: 'latLonPointGeoReference', lat: 1, lon: 2 },
        }),
      ),
      put('odd', JSON.stringify({ id: 'odd', eventType: 'weird|type %', creationDate: at(4000), vehicle })),
      put('none', JSON.stringify({ id: 'none', creationDate: at(5000), vehicle })),
      put('bare', location('bare', V1, T0 + 6000, 10, 20, { geoReference: { type: 'latLonPointGeoReference', lat: 10, lon: 20 } })),
    ]);
    await indexed(s);
    const effects = (s.events as unknown as { effects: { byVehicle: { getRange(o: object): Iterable<{ key: Buffer; value: Buffer }> } } })
      .effects;
    const base = vehicleBase('t', V1);
    const entries = [...effects.byVehicle.getRange({ start: base, end: Buffer.concat([base, Buffer.from([255])]) })].map((e) =>
      decodeVehicleEntry(e.key, base.length, e.value),
    );
    expect(entries).toEqual([
      { time: T0 + 1000, key: 'loc', rank: 4, eventType: 'locationUpdateEvent', lat: 51.5, lon: -0.1, speedKmh: 36, heading: 90 },
      { time: T0 + 2000, key: 'nopos', rank: 0, eventType: 'locationUpdateEvent', lat: null, lon: null, speedKmh: null, heading: null },
      { time: T0 + 3000, key: 'sensor', rank: 0, eventType: 'sensorUpdateEvent', lat: 1, lon: 2, speedKmh: null, heading: null },
      { time: T0 + 4000, key: 'odd', rank: 0, eventType: 'weird|type %', lat: null, lon: null, speedKmh: null, heading: null },
      { time: T0 + 5000, key: 'none', rank: 0, eventType: undefined, lat: null, lon: null, speedKmh: null, heading: null },
      { time: T0 + 6000, key: 'bare', rank: 0, eventType: 'locationUpdateEvent', lat: 10, lon: 20, speedKmh: null, heading: null },
    ]);
    expect((await track(s)).map((p) => [p.key, p.lat, p.lon, p.speedKmh, p.heading])).toEqual([
      ['loc', 51.5, -0.1, 36, 90],
      ['bare', 10, 20, null, null],
    ]);
  });

  it('counts only points against a limit, and pages past long runs of other events of the vehicle', async () => {
    const s = openAt(tmp());
    const vehicle = { associationType: 'reference', uuid: V1, entityType: 'vehicle' };
    // 1,300 sensor events of the vehicle between points (more than a chunk of entries read at once).
    const sensors = Array.from({ length: 1300 }, (_, i) =>
      put(
        `s${i}`,
        JSON.stringify({ id: `s${i}`, eventType: 'sensorUpdateEvent', creationDate: new Date(T0 + 2000 + i).toISOString(), vehicle }),
      ),
    );
    await s.events.write([
      put('p1', location('p1', V1, T0 + 1000)),
      ...sensors,
      put('p2', location('p2', V1, T0 + 5000)),
      put('p3', location('p3', V1, T0 + 6000)),
    ]);
    await indexed(s);
    expect(keysOf(await track(s))).toEqual(['p1', 'p2', 'p3']);
    expect(keysOf(await track(s, { limit: 2 }))).toEqual(['p1', 'p2']);
    expect(keysOf(await track(s, { limit: 1, after: { time: T0 + 1000, key: 'p1' } }))).toEqual(['p2']);
    expect(keysOf(await track(s, { after: { time: T0 + 2500, key: 's500' } }))).toEqual(['p2', 'p3']);
    expect(keysOf(await track(s, { from: T0 + 1001, to: T0 + 6000 }))).toEqual(['p2']);
    expect(await track(s, { from: T0 + 6000, to: T0 + 6000 })).toEqual([]);
    expect(await s.events.list({ tenant: 't', kind: 'events', facet: `vehicle=${V1}`, limit: 2000 })).toHaveLength(1303);
  });

  it('moves latest positions forward only: a later event time wins, then the later key; a delete leaves them', async () => {
    const s = openAt(tmp());
    await s.events.write([put('m', location('m', V1, T0 + 5000, 51)), put('n', location('n', V2, T0, 52))]);
    await indexed(s);
    // Read once: from here on answered from the copy in memory, which must follow.
    expect((await s.entities.positions.positions('t')).map((p) => p.eventKey)).toEqual(['m', 'n']);
    await s.events.write([put('older', location('older', V1, T0 + 1000, 10))]);
    await s.events.write([put('tie-a', location('tie-a', V2, T0 + 7000, 20)), put('tie-b', location('tie-b', V2, T0 + 7000, 21))]);
    await s.events.write([put('tie-0', location('tie-0', V2, T0 + 7000, 22))]);
    await indexed(s);
    const expected: LatestPosition[] = [
      { vehicle: V1, time: T0 + 5000, lat: 51, lon: 4, speedKmh: 36, heading: 90, eventKey: 'm' },
      { vehicle: V2, time: T0 + 7000, lat: 21, lon: 4, speedKmh: 36, heading: 90, eventKey: 'tie-b' },
    ];
    expect(await s.entities.positions.positions('t')).toEqual(expected);
    await s.events.write([del('m'), del('tie-b')]);
    await indexed(s);
    expect(await s.entities.positions.positions('t')).toEqual(expected);
    expect(await s.entities.positions.positions('u')).toEqual([]);
  });

  it('beside another entity store: positions come through the telemetry side effects, newest wins, also for 10,000 vehicles', async () => {
    const s = openAt(tmp(), { telemetryEffects: false });
    await s.events.write([put('m', location('m', V1, T0 + 5000))]);
    await indexed(s);
    expect(await s.entities.positions.positions('t')).toEqual([]);
    // The event log keeps its track all the same.
    expect(keysOf(await track(s))).toEqual(['m']);
    const fix = (vehicle: string, time: number, eventKey: string, tenant = 't') => ({
      tenant,
      vehicle,
      time,
      lat: 1,
      lon: 2,
      speedKmh: null,
      heading: null,
      eventKey,
    });
    const n = 10_000;
    const vehicle = (i: number) => `v${String(i).padStart(5, '0')}`;
    await s.entities.telemetry.updatePositions(Array.from({ length: n }, (_, i) => fix(vehicle(i), T0 + i, `a${i}`)));
    const first = await s.entities.positions.positions('t');
    expect(first).toHaveLength(n);
    expect(first[0]).toEqual({ vehicle: 'v00000', time: T0, lat: 1, lon: 2, speedKmh: null, heading: null, eventKey: 'a0' });
    // Older, equal and newer fixes, out of order, in one call and across calls.
    await s.entities.telemetry.updatePositions([
      fix('v00001', T0 + 50, 'newer'),
      fix('v00001', T0 + 40, 'between'),
      fix('v00002', T0 - 1, 'older'),
    ]);
    await s.entities.telemetry.updatePositions([
      fix('v00001', T0 + 50, 'newest'),
      fix('v00003', T0 + 3, 'a2'),
      fix('v00009', T0, 'x', 'u'),
    ]);
    const after = await s.entities.positions.positions('t');
    expect(after).toHaveLength(n);
    expect(after.slice(0, 4).map((p) => [p.vehicle, p.eventKey])).toEqual([
      ['v00000', 'a0'],
      ['v00001', 'newest'],
      ['v00002', 'a2'],
      ['v00003', 'a3'],
    ]);
    expect((await s.entities.positions.positions('u')).map((p) => p.eventKey)).toEqual(['x']);
  });

  it('keeps tracks, lists, positions and the feed across a reopen', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write([put('a', location('a', V1, T0 + 1000)), put('b', location('b', V1, T0 + 2000))]);
    await closeIt(s);
    const again = openAt(dir);
    expect(keysOf(await track(again))).toEqual(['a', 'b']);
    expect(keysOf(await again.events.list({ tenant: 't', kind: 'events', facet: '', limit: 5 }))).toEqual(['a', 'b']);
    expect((await again.entities.positions.positions('t')).map((p) => p.eventKey)).toEqual(['b']);
    expect((await feed(again)).map((e) => e.key)).toEqual(['a', 'b']);
  });

  it('records them again at start when a crash lost the index commit: each once, as the log says', async () => {
    const dir = tmp();
    const s = openAt(dir, { warn: () => {} });
    await s.events.write([put('a', location('a', V1, T0 + 1000)), put('gone', location('gone', V1, T0 + 1500))]);
    await indexed(s);
    // From here on no index commit reaches LMDB (the process dies before: kill -9).
    const restore = failCommits(s);
    await s.events.write([put('b', location('b', V1, T0 + 2000)), put('a', location('a', V2, T0 + 3000))]);
    await s.events.write([del('gone'), put('c', JSON.stringify({ id: 'c', eventType: 'sensorUpdateEvent' }))]);
    await closeIt(s);
    restore();

    const again = openAt(dir);
    expect(keysOf(await track(again))).toEqual(['b']);
    expect(keysOf(await track(again, { vehicle: V2 }))).toEqual(['a']);
    // At their event times; 'c' has none: at when it was accepted (1000), which its record keeps,
    // as the index commit the crash lost would have listed it; not at the time of the replay.
    expect(await again.events.list({ tenant: 't', kind: 'events', facet: '', limit: 10 })).toEqual([
      { at: 1000, key: 'c' },
      { at: T0 + 2000, key: 'b' },
      { at: T0 + 3000, key: 'a' },
    ]);
    expect(keysOf(await again.events.list({ tenant: 't', kind: 'events', facet: `vehicle=${V1}`, limit: 10 }))).toEqual(['b']);
    expect((await again.entities.positions.positions('t')).map((p) => [p.vehicle, p.eventKey])).toEqual([
      [V1, 'b'],
      [V2, 'a'],
    ]);
    const changes = (await feed(again)).map((e) => `${e.op} ${e.key}`);
    expect(changes).toEqual(['put a', 'put gone', 'put b', 'put a', 'delete gone', 'put c']);
    // And nothing twice after another start.
    await closeIt(again);
    const third = openAt(dir);
    expect((await feed(third)).length).toBe(6);
    expect(keysOf(await track(third))).toEqual(['b']);
  });

  it('lists, tracks and positions an event without an event time at when it was accepted, also when only the replay at start records it', async () => {
    const dir = tmp();
    const s = openAt(dir, { warn: () => {} });
    const timeless = (key: string, lat: number) => {
      const { creationDate: _none, ...rest } = JSON.parse(location(key, V1, 0, lat)) as Record<string, unknown>;
      return JSON.stringify(rest);
    };
    await s.events.write([put('a', location('a', V1, T0 + 1000)), put('t1', timeless('t1', 51), 0, T0 + 1500)]);
    await indexed(s);
    // From here on no index commit reaches LMDB (the process dies before: kill -9).
    const restore = failCommits(s);
    await s.events.write([put('t2', timeless('t2', 52), 0, T0 + 2500), put('b', location('b', V1, T0 + 2000))]);
    await s.events.write([put('t1', timeless('t1', 53), 0, T0 + 3500)]);
    const expected = async (store: EmbeddedStores) => {
      expect((await track(store)).map((p) => [p.key, p.time, p.lat])).toEqual([
        ['a', T0 + 1000, 50],
        ['b', T0 + 2000, 50],
        ['t2', T0 + 2500, 52],
        ['t1', T0 + 3500, 53],
      ]);
      expect(await store.events.list({ tenant: 't', kind: 'events', facet: `vehicle=${V1}`, limit: 10 })).toEqual([
        { at: T0 + 1000, key: 'a' },
        { at: T0 + 2000, key: 'b' },
        { at: T0 + 2500, key: 't2' },
        { at: T0 + 3500, key: 't1' },
      ]);
      expect((await store.entities.positions.positions('t')).map((p) => [p.eventKey, p.time, p.lat])).toEqual([['t1', T0 + 3500, 53]]);
      expect(await store.events.get('t', 'events', 't1')).toMatchObject({ json: timeless('t1', 53) });
      expect(await store.events.get('t', 'events', 'b')).toMatchObject({ json: location('b', V1, T0 + 2000) });
    };
    await closeIt(s);
    restore();
    const again = openAt(dir);
    await expected(again);
    // And the same from the whole log, when the index is lost with all it records.
    await closeIt(again);
    await clearIndex(dir);
    await expected(openAt(dir));
  });

  it('lists an event whose facts were read already (a bulk request checked on a thread) as it lists one read from its text', async () => {
    const s = openAt(tmp());
    const { creationDate: _none, ...timeless } = JSON.parse(location('c', V1, 0, 53)) as Record<string, unknown>;
    const docs: Array<[string, string]> = [
      ['a', location('a', V1, T0 + 1000, 51, 4.5)],
      ['b', location('b', V2, T0 + 2000, 52)],
      ['c', JSON.stringify(timeless)],
      [
        'd',
        JSON.stringify({
          id: 'd',
          eventType: 'startEngineEvent',
          creationDate: new Date(T0 + 500).toISOString(),
          vehicle: { associationType: 'reference', uuid: V1, entityType: 'vehicle' },
        }),
      ],
      ['e', JSON.stringify({ id: 'e', eventType: 'sensorUpdateEvent', lastModified: new Date(T0 + 700).toISOString() })],
    ];
    // Tenant 'p' parses each text; tenant 'f' gets each event's facts with it, as a TextPut carries them.
    const write = (tenant: string, withFacts: boolean): DocumentWrite[] =>
      docs.map(([key, json]) => ({
        op: 'put',
        tenant,
        doc: {
          kind: 'events',
          key,
          lifecycleRank: 0,
          json,
          stamp: { modified: 0, acceptedAt: T0 + 3000 },
          ...(withFacts ? { facts: eventFacts(JSON.parse(json) as Record<string, unknown>) } : {}),
        },
      }));
    await s.events.write(write('p', false));
    await s.events.write(write('f', true));
    await indexed(s);
    const seen = async (tenant: string) => ({
      track: (await track(s, { tenant })).map(({ doc: _doc, ...p }) => p),
      all: await s.events.list({ tenant, kind: 'events', facet: '', limit: 10 }),
      v1: await s.events.list({ tenant, kind: 'events', facet: `vehicle=${V1}`, limit: 10 }),
      positions: await s.entities.positions.positions(tenant),
    });
    const parsed = await seen('p');
    expect(parsed.track.map((p) => [p.key, p.time, p.lat, p.speedKmh, p.heading])).toEqual([
      ['a', T0 + 1000, 51, 36, 90],
      ['c', T0 + 3000, 53, 36, 90],
    ]);
    expect(parsed.v1.map((e) => e.key)).toEqual(['d', 'a', 'c']);
    expect(parsed.all.map((e) => e.key)).toEqual(['d', 'e', 'a', 'b', 'c']);
    expect(parsed.positions.map((p) => p.eventKey).sort()).toEqual(['b', 'c']);
    const fromFacts = await seen('f');
    expect(fromFacts).toEqual(parsed);
  });

  it('commits a large write in several transactions, each with its checkpoint: a crash between them replays only the rest', async () => {
    const dir = tmp();
    const s = openAt(dir, { warn: () => {} });
    // Three transactions.
    const n = 2 * INDEX_CHUNK + 500;
    // The first index transaction commits; the ones after it are lost (the process dies), in order.
    const root = (s.events as unknown as { opts: { root: { childTransaction: (fn: () => unknown) => Promise<unknown> } } }).opts.root;
    const real = root.childTransaction.bind(root);
    let calls = 0;
    let first: Promise<unknown> | undefined;
    root.childTransaction = (fn) => (++calls === 1 ? (first = real(fn)) : first!.then(() => Promise.reject(new Error('killed'))));
    await s.events.write(Array.from({ length: n }, (_, i) => put(k(i), location(k(i), V1, T0 + i * 1000))));
    await indexed(s);
    expect(calls).toBeGreaterThan(1);
    const committed = (await feed(s)).length;
    expect(committed).toBeGreaterThan(0);
    expect(committed).toBeLessThan(n);
    await closeIt(s);

    const again = openAt(dir);
    const changes = await feed(again);
    expect(changes).toHaveLength(n);
    expect(new Set(changes.map((e) => e.key)).size).toBe(n);
    expect(keysOf(await track(again))).toEqual(Array.from({ length: n }, (_, i) => k(i)));
    expect(await again.events.list({ tenant: 't', kind: 'events', facet: `vehicle=${V1}`, limit: 10_000 })).toHaveLength(n);
    for (const i of [0, INDEX_CHUNK - 1, INDEX_CHUNK, n - 1])
      expect(JSON.parse((await again.events.get('t', 'events', k(i)))!.json)).toMatchObject({ id: k(i) });
  });

  it('rebuilds tracks, lists and positions with the index from the whole log, when they are lost with it', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write([put('a', location('a', V1, T0 + 1000)), put('b', location('b', V1, T0 + 2000))]);
    await s.events.write([put('a', location('a', V1, T0 + 3000)), del('b')]);
    await closeIt(s);
    await clearIndex(dir);
    await withLmdb(dir, (root) => {
      for (const name of ['event-time', 'event-vehicle', 'event-records', 'positions']) root.openDB({ name }).clearSync();
    });
    const again = openAt(dir);
    expect((await track(again)).map((p) => [p.key, p.time])).toEqual([['a', T0 + 3000]]);
    expect(keysOf(await again.events.list({ tenant: 't', kind: 'events', facet: '', limit: 10 }))).toEqual(['a']);
    expect((await again.entities.positions.positions('t')).map((p) => p.eventKey)).toEqual(['a']);
  });

  it("encodes keys as lmdb-js does (ordered-binary), byte for byte, and reads them back; a database either way reads the other's", async () => {
    const dir = tmp();
    const strings = [
      't|events|00000000-0000-4000-8000-0000000000a1|4',
      't|001735689600000|e001',
      `acme|${V1}|001735689600000|${'f'.repeat(36)}`,
      'x'.repeat(63),
      'x'.repeat(64),
      '',
      'a\u0003b|k',
      '\u001bx|k',
      '~',
      'café|k',
      'truck 🚚|k',
      'lone \ud800 surrogate',
      `${'x'.repeat(62)}\u0001`,
    ];
    await withLmdb(dir, (root) => {
      const codec = keyCodecOf(root)!;
      const theirs = root as unknown as {
        writeKey(k: unknown, t: Buffer, p: number): number;
        readKey(b: Buffer, s: number, e: number): unknown;
      };
      expect(codec).toBeDefined();
      for (const key of strings) {
        const a = Buffer.alloc(512);
        const b = Buffer.alloc(512);
        const end = codec.writeKey(key, a, 0);
        expect(a.subarray(0, end), key).toEqual(b.subarray(0, theirs.writeKey(key, b, 0)));
        expect(codec.readKey(a, 0, end)).toBe(theirs.readKey(b, 0, end));
      }
      // A database written through lmdb-js's own encoding is read in order through the codec, and
      // the other way round (the same bytes, compared alike).
      const ordered = [...strings].filter((k) => k !== '').sort((x, y) => Buffer.from(x).compare(Buffer.from(y)));
      const mine = root.openDB<Buffer, string>(binaryDb('mine', codec));
      for (const k of strings) if (k !== '') mine.putSync(k, Buffer.from([1]));
      expect([...mine.getKeys()].filter((k) => !k.includes('\ud800'))).toEqual(ordered.filter((k) => !k.includes('\ud800')));
    });
    await withLmdb(dir, (root) => {
      const theirs = root.openDB<Buffer, string>({ name: 'mine', encoding: 'binary' });
      expect([...theirs.getKeys()]).toHaveLength(strings.length - 1);
      for (const k of strings) if (k !== '' && !k.includes('\ud800')) expect(theirs.get(k), k).toEqual(Buffer.from([1]));
    });
  });
});
