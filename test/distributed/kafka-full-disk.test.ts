/**
 * The Kafka broker's disk full (issue 42), for real: the broker's log folder on a small tmpfs of its
 * own, filled by bulk writes through the ingress. Once Kafka cannot append (KAFKA_STORAGE_ERROR
 * while the log folder fails; then no broker at all, as Kafka stops a broker whose every log folder
 * failed), the ingress answers 503 with Retry-After in the model's error format, and never 200 for
 * a write Kafka did not take. With room again (the tmpfs made larger) and the broker started again
 * on its data, every write answered 200 is readable: none lost. Needs root to mount (CI runs as
 * root); skipped, and said so, where mounting is refused.
 */
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices } from '../infra/services.js';
import { canMountTmpfs, mountTmpfs } from '../tmpfs.js';
import { startCluster, type Cluster } from './cluster.js';

const suite = "the distributed deployment when the Kafka broker's disk is full (a 12 MB tmpfs)";
const H = { authorization: 'Bearer writer-token-acme', 'content-type': 'application/json' };
/** KFD_LOG=1: what the test does, with the time, on stderr. */
const say = (line: string) => {
  if (process.env.KFD_LOG === '1') process.stderr.write(`${new Date().toISOString().slice(11, 23)} ${line}\n`);
};
/** `df`'s line for the folder (said with each bulk). */
const df = (dir: string) => execFileSync('df', ['-k', dir], { encoding: 'utf8' }).split('\n')[1];
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const location = (n: number) => ({
  eventType: 'locationUpdateEvent',
  id: `0d000000-0000-4000-8000-${n.toString(16).padStart(12, '0')}`,
  lifecycle: 'actual',
  creationDate: new Date(Date.UTC(2026, 10, 1) + n * 1000).toISOString(),
  geoReference: { type: 'latLonPointGeoReference', lat: 52 + (n % 100) / 1000, lon: 5 + (n % 77) / 1000 },
  vehicle: {
    associationType: 'reference',
    entityType: 'vehicle',
    uuid: `0d000000-0000-4000-8000-${(n % 20).toString(16).padStart(12, '0')}`,
  },
  name: `fill ${n} ${'x'.repeat(1500)}`,
});

describe.skipIf(!integrationEnabled(suite) || !canMountTmpfs())(suite, () => {
  let disk: { dir: string; unmount: () => void } | undefined;
  let c: Cluster;
  beforeAll(async () => {
    requireServices(['kafka', 'clickhouse', 'redis']);
    disk = mountTmpfs('12m');
    c = await startCluster({ kafka: { base: disk.dir } });
  }, 180_000);
  afterAll(async () => {
    await c?.close();
    disk?.unmount();
  }, 60_000);

  it('answers 503 with Retry-After while the broker has no room, and loses no write it answered 200', async () => {
    const acknowledged = new Set<string>();
    let next = 0;
    let refusals = 0;
    let firstRefusal: { status: number; retryAfter: string | null; body: unknown } | undefined;
    // Bulks of 200 events of about 1.7 KB until the ingress has refused three in a row.
    for (let i = 0; i < 400 && refusals < 3; i++) {
      const docs = Array.from({ length: 200 }, () => location(next++));
      const res = await fetch(`${c.url}/api/v5/bulk/events`, {
        method: 'POST',
        headers: H,
        body: JSON.stringify(docs),
        signal: AbortSignal.timeout(60_000),
      });
      const body = (await res.json()) as { items?: Array<{ id?: string; errors?: Array<{ type: string; message: string }> }> };
      say(`bulk ${i}: ${res.status} ${df(disk!.dir)}`);
      if (res.status === 200) {
        for (const d of docs) acknowledged.add(d.id);
        refusals = 0;
        continue;
      }
      expect(res.status).toBe(503);
      firstRefusal ??= { status: res.status, retryAfter: res.headers.get('retry-after'), body };
      // A bulk that is not atomic may have had some items taken before the disk filled.
      for (const item of body.items ?? []) if (item.id !== undefined && item.errors === undefined) acknowledged.add(item.id);
      refusals++;
    }
    expect(refusals).toBe(3);
    say(`first refusal: ${JSON.stringify(firstRefusal).slice(0, 600)}`);
    expect(Number(firstRefusal!.retryAfter)).toBeGreaterThan(0);
    expect(JSON.stringify(firstRefusal!.body)).toMatch(/"type":"(unavailable|insufficientStorage)"/);
    say('a single PUT');
    // A single PUT is refused the same way.
    const one = await fetch(`${c.url}/api/v5/events`, {
      method: 'PUT',
      headers: H,
      body: JSON.stringify(location(next++)),
      signal: AbortSignal.timeout(60_000),
    });
    expect(one.status).toBe(503);
    expect(Number(one.headers.get('retry-after'))).toBeGreaterThan(0);
    const items = (await one.json()) as Array<{ type: string; message: string }>;
    expect(items[0]).toMatchObject({ type: expect.stringMatching(/^(unavailable|insufficientStorage)$/), message: expect.any(String) });
    expect(acknowledged.size).toBeGreaterThan(2000);

    // Room again; the broker started again on its data (it stops itself once its log folder failed).
    say('room again; the broker killed and started again');
    execFileSync('mount', ['-o', 'remount,size=512m', disk!.dir]);
    await c.kafka.kill();
    await c.kafka.restart();
    say('the broker is back');
    // Every acknowledged event listed (pages of 1,000: a GET each would take minutes on 18.16).
    const listed = async () => {
      const ids = new Set<string>();
      for (let next: string | null = '/api/v5/events?limit=1000'; next !== null;) {
        const res = await fetch(`${c.url}${next}`, { headers: H, signal: AbortSignal.timeout(30_000) });
        if (res.status !== 200) return ids;
        const page = (await res.json()) as { items: Array<{ id: string }>; next: string | null };
        for (const e of page.items) ids.add(e.id);
        next = page.next;
      }
      return ids;
    };
    const deadline = Date.now() + 120_000;
    let missing = [...acknowledged];
    while (missing.length > 0 && Date.now() < deadline) {
      const ids = await listed();
      missing = [...acknowledged].filter((id) => !ids.has(id));
      say(`missing ${missing.length} of ${acknowledged.size}`);
      if (missing.length > 0) await sleep(1_000);
    }
    expect(missing).toEqual([]);
    // And the ingress takes writes again.
    const after = await fetch(`${c.url}/api/v5/events`, { method: 'PUT', headers: H, body: JSON.stringify(location(next++)) });
    expect(after.status).toBe(200);
  }, 420_000);
});
