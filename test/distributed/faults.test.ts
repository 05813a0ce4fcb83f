/**
 * The distributed deployment under faults of the services it depends on, counted: every write
 * acknowledged (200) is checked against what the query answers at the end (0 lost), and each test
 * reports how long until the service answered normally again.
 *
 * - the Kafka broker gone for 20 s (SIGKILL, then started again on the same ports and data) in the
 *   middle of 8 concurrent writers: 503 with Retry-After meanwhile, writes resume without
 *   restarting any `otm` process;
 * - Redis gone for 10 s (SIGKILL; it runs with appendonly and appendfsync always, so it comes back
 *   with every acknowledged write) and started again on the same port and data;
 * - ClickHouse frozen for 10 s (SIGSTOP/SIGCONT): the worker's inserts wait or retry, and the
 *   telemetry acknowledged meanwhile is in ClickHouse at the end;
 * - ClickHouse stopped (SIGTERM, SIGKILL should it not exit within 10 s; test/infra/README.md)
 *   and started again 15 s after on the same port and data: PUTs go
 *   on being acknowledged (Kafka holds them), GETs of events answer 503 meanwhile, every
 *   acknowledged event is found by GET and in its vehicle's track at the end, and the worker,
 *   ingress and query processes are the same ones before and after;
 * - the query role killed with SIGKILL and started again: GETs answer 502 through the router
 *   meanwhile, 200 after.
 */
import { isDeepStrictEqual } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices } from '../infra/services.js';
import { startCluster, type Cluster } from './cluster.js';

const suite = 'the distributed deployment under faults of Kafka, Redis, ClickHouse and the query role';
const H = { authorization: 'Bearer writer-token-acme', 'content-type': 'application/json' };
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const secs = (ms: number) => (ms / 1000).toFixed(1);

interface Write {
  path: string;
  doc: Record<string, unknown>;
  status: number | 'error';
  retryAfter: boolean;
  start: number;
  end: number;
}

describe.skipIf(!integrationEnabled(suite))(suite, () => {
  let c: Cluster;
  beforeAll(async () => {
    requireServices(['kafka', 'clickhouse', 'redis']);
    c = await startCluster();
  }, 180_000);
  afterAll(async () => c?.close(), 60_000);

  let serial = 0;
  /** A new vehicle or location event (alternately), each with its own id. */
  const nextDoc = (prefix: string): { kind: string; doc: Record<string, unknown> } => {
    const n = serial++;
    const id = `${prefix}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
    if (n % 2 === 0) return { kind: 'vehicles', doc: { entityType: 'vehicle', id, name: `truck ${n}` } };
    return {
      kind: 'events',
      doc: {
        eventType: 'locationUpdateEvent',
        id,
        lifecycle: 'actual',
        creationDate: new Date(Date.UTC(2026, 10, 1) + n * 1000).toISOString(),
        geoReference: { type: 'latLonPointGeoReference', lat: 52 + (n % 100) / 1000, lon: 5 + (n % 77) / 1000 },
        vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: `${prefix}-0000-4000-8000-ffffffffffff` },
      },
    };
  };

  const putOne = async (prefix: string): Promise<Write> => {
    const { kind, doc } = nextDoc(prefix);
    const start = Date.now();
    try {
      const res = await fetch(`${c.url}/api/v5/${kind}`, {
        method: 'PUT',
        headers: H,
        body: JSON.stringify(doc),
        signal: AbortSignal.timeout(30_000),
      });
      await res.arrayBuffer();
      return {
        path: `/api/v5/${kind}/${doc.id as string}`,
        doc,
        status: res.status,
        retryAfter: /^\d+$/.test(res.headers.get('retry-after') ?? ''),
        start,
        end: Date.now(),
      };
    } catch {
      return { path: `/api/v5/${kind}/${doc.id as string}`, doc, status: 'error', retryAfter: false, start, end: Date.now() };
    }
  };

  /**
   * 8 writers PUTting until `done()` is true, each pausing 100 ms between writes (more after a
   * refusal); every write is pushed to `all` once answered (or failed), which the result is too.
   */
  const writers = (prefix: string, done: () => boolean, all: Write[] = []) => {
    const one = async () => {
      while (!done()) {
        const w = await putOne(prefix);
        all.push(w);
        await sleep(w.status === 200 ? 100 : 250);
      }
    };
    const finished = Promise.all(Array.from({ length: 8 }, one)).then(() => all);
    return finished;
  };

  const get = async (path: string): Promise<{ status: number | 'error'; body?: unknown }> => {
    try {
      const res = await fetch(`${c.url}${path}`, { headers: H, signal: AbortSignal.timeout(10_000) });
      return { status: res.status, body: res.status === 200 ? await res.json() : (await res.arrayBuffer(), undefined) };
    } catch {
      return { status: 'error' };
    }
  };

  /** The acknowledged writes that GET does not answer as sent within `ms` (`checks`: the passes it took). */
  let checks = 0;
  const lostOf = async (acked: Write[], ms = 90_000): Promise<Write[]> => {
    let pending = acked;
    const until = Date.now() + ms;
    checks = 0;
    for (;;) {
      checks++;
      const missing: Write[] = [];
      for (let i = 0; i < pending.length; i += 8) {
        const batch = pending.slice(i, i + 8);
        const got = await Promise.all(batch.map((w) => get(w.path)));
        batch.forEach((w, k) => {
          if (got[k]!.status !== 200 || !isDeepStrictEqual(got[k]!.body, w.doc)) missing.push(w);
        });
      }
      pending = missing;
      if (pending.length === 0 || Date.now() > until) return pending;
      await sleep(1_000);
    }
  };

  /** Polls `check` every 100 ms until true; the time it took, or throws after `ms`. */
  const waitFor = async (check: () => Promise<boolean>, ms: number, what: string): Promise<number> => {
    const from = Date.now();
    while (!(await check())) {
      if (Date.now() - from > ms) throw new Error(`${what} not within ${ms} ms`);
      await sleep(100);
    }
    return Date.now() - from;
  };

  /**
   * A new write PUT (retried until 200; an event or a vehicle, as asked) and then visible by GET:
   * the time from now.
   */
  const probe = async (prefix: string, what: 'event' | 'vehicle', ms: number): Promise<number> => {
    const from = Date.now();
    let w: Write;
    do {
      w = await putOne(prefix);
      if (w.status !== 200) await sleep(200);
      if (Date.now() - from > ms) throw new Error('probe PUT not accepted in time');
    } while (w.status !== 200 || w.path.includes('/events/') !== (what === 'event'));
    const path = w.path;
    await waitFor(async () => (await get(path)).status === 200, ms, `GET ${path}`);
    return Date.now() - from;
  };

  const tally = (ws: Write[]) => {
    const ok = ws.filter((w) => w.status === 200);
    const refused = ws.filter((w) => w.status === 503);
    const other = ws.filter((w) => w.status !== 200 && w.status !== 503);
    return { ok, refused, other, otherText: [...new Set(other.map((w) => String(w.status)))].join(',') || '-' };
  };

  it('Kafka broker gone for 20 s under 8 writers: 503 with Retry-After meanwhile, never a lost 200; writes resume on their own', async () => {
    let stopWriting = false;
    const running = writers('5a000000', () => stopWriting);
    await sleep(5_000);
    const downAt = Date.now();
    await c.kafka.kill();
    await sleep(20_000);
    // Started again on the same ports and data (restart() after kill() only starts it). It resolves
    // once the broker answers metadata: a write may get its 200 a little before that.
    const restartAt = Date.now();
    await c.kafka.restart();
    const backAt = Date.now();
    // Enough for the clients to reconnect, then a while of normal writing.
    await sleep(15_000);
    stopWriting = true;
    const all = await running;

    const { ok, refused, other, otherText } = tally(all);
    // The first 200 once the broker was started again (negative: before restart() saw it answer).
    const firstOk = ok.filter((w) => w.end > restartAt).sort((a, b) => a.end - b.end)[0];
    const lastRefusal = Math.max(backAt, ...all.filter((w) => w.status !== 200).map((w) => w.end));
    const duringOutage = all.filter((w) => w.start >= downAt + 1_000 && w.end <= restartAt);
    const slowest503 = Math.max(0, ...refused.map((w) => w.end - w.start));
    const lost = await lostOf(ok);
    console.log(
      `kafka gone 20 s, 8 writers: ${all.length} PUTs, ${ok.length} answered 200, ${refused.length} 503 ` +
        `(${refused.filter((w) => w.retryAfter).length} with Retry-After, slowest ${secs(slowest503)} s), ${other.length} other (${otherText}); ` +
        `${duringOutage.filter((w) => w.status === 200).length} 200s while it was down; ${lost.length} acknowledged writes lost (all visible by GET at check ${checks}); ` +
        `broker start ${secs(backAt - restartAt)} s; after its return: first 200 at ${firstOk ? secs(firstOk.end - backAt) : '-'} s, only 200s from ${secs(lastRefusal - backAt)} s`,
    );
    expect(lost.map((w) => w.path)).toEqual([]);
    expect(other.length, `statuses other than 200/503: ${otherText}`).toBe(0);
    expect(refused.filter((w) => !w.retryAfter)).toEqual([]);
    expect(refused.length).toBeGreaterThan(0);
    // Bounded by KAFKA_PUBLISH_TIMEOUT_MS (3 s in the cluster): nobody is left hanging.
    expect(slowest503).toBeLessThan(15_000);
    expect(duringOutage.filter((w) => w.status === 200)).toEqual([]);
    expect(firstOk).toBeDefined();
    // Writes flow normally again well before the end of the 15 s written after the return.
    expect(lastRefusal - backAt).toBeLessThan(12_000);
  }, 240_000);

  it('Redis gone for 10 s and started again on its port and data: writes before, during and after are all there', async () => {
    let stopWriting = false;
    const running = writers('5b000000', () => stopWriting);
    await sleep(3_000);
    const pid = c.redis.pid!;
    process.kill(pid, 'SIGKILL');
    await waitFor(
      async () => {
        try {
          process.kill(pid, 0);
          return false;
        } catch {
          return true;
        }
      },
      5_000,
      'redis-server gone',
    );
    const downAt = Date.now();
    await sleep(10_000);
    // restart() of a server that is gone only starts it again (appendonly: every acknowledged write is back).
    await c.redis.restart();
    const backAt = Date.now();
    const recovery = await probe('5b100000', 'vehicle', 60_000);
    await sleep(3_000);
    stopWriting = true;
    const all = await running;

    const { ok, refused, other, otherText } = tally(all);
    const during = ok.filter((w) => w.start >= downAt && w.end <= backAt);
    const lost = await lostOf(ok);
    console.log(
      `redis gone 10 s, 8 writers: ${all.length} PUTs, ${ok.length} answered 200 (${during.length} while it was down), ` +
        `${refused.length} 503, ${other.length} other (${otherText}); ${lost.length} acknowledged writes lost (all visible by GET at check ${checks}); ` +
        `a new write visible by GET ${secs(recovery)} s after its return`,
    );
    expect(lost.map((w) => w.path)).toEqual([]);
    expect(ok.length).toBeGreaterThan(0);
  }, 240_000);

  it('ClickHouse frozen for 10 s (SIGSTOP): telemetry acknowledged meanwhile is in ClickHouse at the end', async () => {
    let stopWriting = false;
    const running = writers('5c000000', () => stopWriting);
    await sleep(3_000);
    const pid = c.clickhouse.pid!;
    process.kill(pid, 'SIGSTOP');
    const downAt = Date.now();
    try {
      await sleep(10_000);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    const backAt = Date.now();
    // Recovery: an event written now, visible by GET (which reads ClickHouse).
    const from = Date.now();
    let probe: Write;
    do probe = await putOne('5c100000');
    while (probe.status !== 200 || !probe.path.includes('/events/'));
    const probePath = probe.path;
    await waitFor(async () => (await get(probePath)).status === 200, 90_000, `GET ${probePath}`);
    const recovery = Date.now() - from;
    await sleep(3_000);
    stopWriting = true;
    const all = await running;

    const { ok, refused, other, otherText } = tally(all);
    const events = ok.filter((w) => w.path.includes('/events/'));
    const during = events.filter((w) => w.start >= downAt && w.end <= backAt);
    const lost = await lostOf(ok);
    console.log(
      `clickhouse frozen 10 s, 8 writers: ${all.length} PUTs, ${ok.length} answered 200 (${events.length} events, ${during.length} while frozen), ` +
        `${refused.length} 503, ${other.length} other (${otherText}); ${lost.length} acknowledged writes lost (all visible by GET at check ${checks}); ` +
        `a new event visible by GET ${secs(recovery)} s after SIGCONT`,
    );
    expect(lost.map((w) => w.path)).toEqual([]);
    expect(during.length).toBeGreaterThan(0);
  }, 240_000);

  it('ClickHouse stopped for 15 s and started again on its ports and data: every acknowledged event is stored, the workers resume on their own', async () => {
    // cluster.ts types it as any URL service; the one startCluster starts is ours (startClickHouse).
    const ch = c.clickhouse;
    const pids = new Map([...c.processes].map(([name, r]) => [name, r.child.pid]));
    const prefix = '5e000000';
    const vehicle = `${prefix}-0000-4000-8000-ffffffffffff`;
    let stopWriting = false;
    const sink: Write[] = [];
    const running = writers(prefix, () => stopWriting, sink);
    await sleep(3_000);
    // An event stored before: what GET answers for it while ClickHouse is away.
    let before: Write;
    do before = await putOne('5e100000');
    while (before.status !== 200 || !before.path.includes('/events/'));
    const beforePath = before.path;
    await waitFor(async () => (await get(beforePath)).status === 200, 60_000, `GET ${beforePath}`);

    const downAt = Date.now();
    const ended = await ch.shutdown();
    const stoppedAt = Date.now();
    const meanwhile: Array<number | 'error'> = [];
    while (Date.now() - stoppedAt < 15_000) {
      meanwhile.push((await get(beforePath)).status);
      await sleep(1_000);
    }
    const restartAt = Date.now();
    await ch.restart();
    const backAt = Date.now();

    // Recovery: a new event written now, visible by GET (which reads ClickHouse); and every event
    // acknowledged until now, visible too (the worker's backlog applied).
    const backlog = sink.filter((w) => w.status === 200);
    const [visible, drained] = await Promise.all([
      probe('5e200000', 'event', 120_000),
      lostOf(backlog, 120_000).then((left) => (left.length === 0 ? Date.now() - backAt : Number.NaN)),
    ]);
    await sleep(3_000);
    stopWriting = true;
    const all = await running;

    const { ok, refused, other, otherText } = tally(all);
    const events = ok.filter((w) => w.path.includes('/events/'));
    const during = events.filter((w) => w.start >= downAt && w.end <= backAt);
    const lost = await lostOf(ok);
    // The vehicle's track: every acknowledged event of the stream, in event time order, as sent;
    // nothing that was never sent.
    const sent = new Map(all.filter((w) => w.path.includes('/events/')).map((w) => [w.doc.id as string, w]));
    const from = new Date(Date.UTC(2026, 10, 1)).toISOString();
    const to = new Date(Date.UTC(2026, 10, 2)).toISOString();
    const res = await fetch(`${c.url}/api/v5/vehicles/${vehicle}/track?from=${from}&to=${to}&format=ndjson`, { headers: H });
    expect(res.status).toBe(200);
    const track = (await res.text())
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const inTrack = new Set(track.map((d) => d.id as string));
    const missingFromTrack = events.filter((w) => !inTrack.has(w.doc.id as string)).map((w) => w.doc.id);
    const strangers = track.filter((d) => !isDeepStrictEqual(d, sent.get(d.id as string)?.doc)).map((d) => d.id);
    const times = track.map((d) => Date.parse(d.creationDate as string));
    const ordered = times.every((t, i) => i === 0 || times[i - 1]! <= t);
    const restarted = [...c.processes].filter(
      ([name, r]) => r.child.pid !== pids.get(name) || r.child.exitCode !== null || r.child.signalCode !== null,
    );
    console.log(
      `clickhouse stopped 15 s (SIGTERM: ${ended} after ${secs(stoppedAt - downAt)} s; started again in ${secs(backAt - restartAt)} s), 8 writers: ${all.length} PUTs, ` +
        `${ok.length} answered 200 (${events.length} events, ${during.length} while it was down), ${refused.length} 503, ${other.length} other (${otherText}); ` +
        `GET meanwhile answered ${[...new Set(meanwhile)].join(',')}; ${lost.length} acknowledged writes lost (all visible by GET at check ${checks}); ` +
        `track: ${track.length} points, ${missingFromTrack.length} acknowledged events missing; ` +
        `after its return: a new event visible by GET in ${secs(visible)} s, the ${backlog.length} writes acknowledged until then all visible in ${secs(drained)} s; ` +
        `processes restarted: ${restarted.map(([n]) => n).join(',') || 'none'}`,
    );
    expect(lost.map((w) => w.path)).toEqual([]);
    expect(missingFromTrack).toEqual([]);
    expect(strangers).toEqual([]);
    expect(ordered).toBe(true);
    expect(other.length, `statuses other than 200/503: ${otherText}`).toBe(0);
    expect(during.length).toBeGreaterThan(0);
    // Never a 404 for an event that is there: unavailable, retry.
    expect([...new Set(meanwhile)]).toEqual([503]);
    expect(restarted).toEqual([]);
    // A generous liveness bound, not a timing target.
    expect(visible).toBeLessThan(120_000);
    expect(drained).toBeLessThan(120_000);
  }, 300_000);

  it('the query role killed with SIGKILL: GETs answer 502 through the router meanwhile, 200 once it is started again', async () => {
    const v = { entityType: 'vehicle', id: '5d000000-0000-4000-8000-000000000001', name: 'read across a query crash' };
    const put = await fetch(`${c.url}/api/v5/vehicles`, { method: 'PUT', headers: H, body: JSON.stringify(v) });
    expect(put.status).toBe(200);
    const path = `/api/v5/vehicles/${v.id}`;
    await waitFor(async () => (await get(path)).status === 200, 30_000, `GET ${path}`);

    // Killed directly (its entry stays in the router's table until the new one replaces it).
    const old = c.processes.get('query')!;
    const killedAt = Date.now();
    old.child.kill('SIGKILL');
    await new Promise<void>((r) =>
      old.child.exitCode !== null || old.child.signalCode !== null ? r() : old.child.once('exit', () => r()),
    );
    const meanwhile: Array<number | 'error'> = [];
    for (let i = 0; i < 10; i++) {
      meanwhile.push((await get(path)).status);
      await sleep(100);
    }
    const startAt = Date.now();
    await c.startRole('query', ['query']);
    let after = 0;
    await waitFor(
      async () => {
        after++;
        return (await get(path)).status === 200;
      },
      30_000,
      'GET answered again',
    );
    const answeredAt = Date.now();
    const writes = await fetch(`${c.url}/api/v5/vehicles`, { method: 'PUT', headers: H, body: JSON.stringify({ ...v, name: 'after' }) });
    const statuses = [...new Set(meanwhile)].join(',');
    console.log(
      `query killed: ${meanwhile.length} GETs meanwhile answered ${statuses}; the new query answered 200 ` +
        `${secs(answeredAt - startAt)} s after its start (${secs(answeredAt - killedAt)} s after the kill, ${after} GETs), writes meanwhile: ${writes.status}`,
    );
    expect(meanwhile.every((s) => s === 502)).toBe(true);
    expect(writes.status).toBe(200);
    const latest = { ...v, name: 'after' };
    await waitFor(async () => isDeepStrictEqual((await get(path)).body, latest), 30_000, 'the write after, visible');
  }, 120_000);
});
