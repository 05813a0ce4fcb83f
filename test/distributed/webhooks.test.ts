/**
 * Webhooks on the distributed deployment: the subscriptions API served by the ingress and query
 * processes (behind the method router), subscriptions and deliveries kept in Redis, deliveries made
 * by `otm dispatcher` processes from the Redis change feed (written by the workers from Kafka), to
 * a receiver on 127.0.0.1 (OTM_WEBHOOK_ALLOW=127.0.0.1). Two dispatchers share the subscriptions by
 * their leases; when one is killed, the other takes its subscriptions over and nothing is lost.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled } from '../infra/services.js';
import { startReceiver, until, verifySignature, type Change, type Receiver } from '../../services/otm/test/receiver.js';
import { startCluster, type Cluster } from './cluster.js';

const uuid = (prefix: string, i: number) => `${prefix}-0000-4000-8000-${String(i).padStart(12, '0')}`;
const vehicleId = (i: number) => uuid('6e000000', i);
const auth = { authorization: 'Bearer writer-token-acme' };

const suite = 'webhooks on the distributed deployment';
describe.skipIf(!integrationEnabled(suite))(suite, () => {
  let cluster: Cluster;
  let rx: Receiver;
  beforeAll(async () => {
    rx = await startReceiver();
    cluster = await startCluster({ env: { OTM_WEBHOOK_ALLOW: '127.0.0.1', OTM_WEBHOOK_BATCH: '3' } });
  }, 180_000);
  afterAll(async () => {
    await cluster?.close();
    await rx?.close();
  });

  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${cluster.url}${path}`, {
      method,
      headers: { ...auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, text, json: (): any => JSON.parse(text) };
  };
  const put = async (i: number) => {
    const res = await call('PUT', '/api/v5/vehicles', { id: vehicleId(i), licensePlate: `D-${i}` });
    expect(res.status, res.text).toBe(200);
  };
  const subscribe = async (url: string) => {
    const res = await call('POST', '/api/v5/subscriptions', { url, kinds: ['vehicles'] });
    expect(res.status, res.text).toBe(201);
    return res.json() as { id: string; secret: string; cursor: string };
  };
  const changesOf = (id: string): Change[] =>
    rx.deliveries.filter((d) => d.status === 200 && d.body.subscription === id).flatMap((d) => d.body.changes);

  it('delivers signed batches of at most OTM_WEBHOOK_BATCH changes in feed order; replays from a cursor', { timeout: 90_000 }, async () => {
    const s = await subscribe(rx.url);
    for (let i = 1; i <= 7; i++) await put(i);
    const got = await until(
      () => changesOf(s.id),
      (c) => c.length >= 7,
      30_000,
      'seven changes',
    );
    // Different vehicles go through different Kafka partitions: the feed's order is the order the
    // workers applied them (one entity's changes in order), and deliveries follow the feed.
    expect(got.map((c) => c.id).sort()).toEqual(Array.from({ length: 7 }, (_, i) => vehicleId(i + 1)));
    expect(got.every((c) => c.op === 'put' && c.kind === 'vehicles' && c.document?.licensePlate?.startsWith('D-'))).toBe(true);
    for (const d of rx.deliveries.filter((x) => x.body.subscription === s.id)) {
      expect(d.body.changes.length).toBeLessThanOrEqual(3);
      expect(verifySignature(s.secret, d.headers['otm-signature'] as string, d.raw)).toBe(true);
    }
    // The items are those of GET /api/v5/changes (served by the query process).
    const feed = (await call('GET', `/api/v5/changes?kinds=vehicles&cursor=${encodeURIComponent(s.cursor)}`)).json();
    expect(got).toEqual(feed.items.slice(0, 7));
    const sub = await until(
      async () => (await call('GET', `/api/v5/subscriptions/${s.id}`)).json(),
      (x) => x.cursor === got[6]!.cursor,
      10_000,
      'the cursor',
    );
    expect(sub).toMatchObject({ state: 'active', secret: `****${s.secret.slice(-4)}` });
    const list = (await call('GET', `/api/v5/subscriptions/${s.id}/deliveries`)).json().items;
    expect(list.length).toBeGreaterThanOrEqual(3);
    expect(list.every((d: { outcome: string }) => d.outcome === 'delivered')).toBe(true);

    const replay = await call('POST', `/api/v5/subscriptions/${s.id}/replay?cursor=${encodeURIComponent(got[3]!.cursor)}`);
    expect(replay.status, replay.text).toBe(200);
    const again = await until(
      () => changesOf(s.id),
      (c) => c.length >= 10,
      30_000,
      'the replayed changes',
    );
    expect(again.slice(7)).toEqual(got.slice(4));
    expect((await call('DELETE', `/api/v5/subscriptions/${s.id}`)).status).toBe(204);
    expect((await call('GET', `/api/v5/subscriptions/${s.id}`)).status).toBe(404);
  });

  it('shares subscriptions among dispatchers; a killed one is taken over without losing a change', { timeout: 150_000 }, async () => {
    const held = async (name: string): Promise<number> => {
      const p = cluster.processes.get(name);
      if (!p) return 0;
      const text = await (await fetch(`${p.url}/metrics`)).text();
      return Number(/^otm_webhook_subscriptions_held (\d+)/m.exec(text)?.[1] ?? 0);
    };
    await cluster.startRole('dispatcher-2', ['dispatcher']);
    const subs = [];
    for (let i = 0; i < 4; i++) subs.push(await subscribe(`${rx.url}?n=${i}`));
    // Each dispatcher takes its share (2 of 4).
    await until(
      async () => [await held('dispatcher'), await held('dispatcher-2')],
      ([a, b]) => a === 2 && b === 2,
      30_000,
      'shares of 2',
    );
    for (let i = 20; i < 23; i++) await put(i);
    for (const s of subs)
      await until(
        () => changesOf(s.id),
        (c) => new Set(c.map((x) => x.id)).size >= 3,
        30_000,
        'the first changes',
      );

    // Killed: its leases expire, the other dispatcher takes its subscriptions and goes on from their cursors.
    await cluster.stopRole('dispatcher-2', 'SIGKILL');
    for (let i = 23; i < 26; i++) await put(i);
    await until(
      () => held('dispatcher'),
      (n) => n === 4,
      40_000,
      'the takeover',
    );
    for (const s of subs) {
      const got = await until(
        () => changesOf(s.id),
        // Distinct changes: a change delivered again after the takeover (at least once) counts once.
        (c) => new Set(c.map((x) => x.id)).size >= 6,
        40_000,
        'every change',
      );
      // At least once: every change arrived; any one twice is the same change again.
      expect([...new Set(got.map((c) => c.id))].sort()).toEqual(Array.from({ length: 6 }, (_, i) => vehicleId(20 + i)));
    }
    for (const s of subs) await call('DELETE', `/api/v5/subscriptions/${s.id}`);
  });
});
