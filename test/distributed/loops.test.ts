/**
 * The background loops that read Redis come back after Redis is killed (SIGKILL) and started again
 * on its port and data, and are reported down meanwhile (issue 36): the webhook dispatcher (its
 * scan and a subscription's loop, on Redis's subscriptions), a tenant's stream reading, and the
 * entity export (into a sink in memory: the failure is Redis's). Every change written before,
 * and after, the outage is delivered, streamed and copied.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Health, TOPICS, createLogger, parseAddressRanges, registry, type EntityChange, type Envelope, type EventStore } from '@otm/core';
import { RedisEntityStore } from '@otm/distributed';
import { Dispatcher } from '@otm/dispatcher';
import { MemoryStreamSlots } from '@otm/embedded';
import { Finder, StreamHub, type StreamSink } from '@otm/query';
import { EntityExporter, entityWorker } from '@otm/worker';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';

const silent = createLogger('silent');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const until = async (what: string, check: () => boolean | Promise<boolean>, ms = 30_000) => {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(20);
  }
};
const loopUp = async (loop: string) =>
  (await registry.getSingleMetric('otm_loop_up')!.get()).values.find((v) => v.labels.loop === loop)?.value;

/** A socket stand-in that keeps the ids of the events written to it. */
function sink(): StreamSink & { ids(): string[]; ended: boolean } {
  let text = '';
  const s = {
    writableLength: 0,
    ended: false,
    write: (chunk: Buffer) => ((text += chunk.toString('utf8')), true),
    end: () => void (s.ended = true),
    destroy: () => void (s.ended = true),
    once: () => s,
    ids: () => [...text.matchAll(/^id: (.+)$/gm)].map((m) => m[1]!),
  };
  return s;
}

/** A webhook receiver keeping the cursors of the changes it was sent, answering 204. */
async function receiver() {
  const cursors: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { changes: Array<{ cursor: string }> };
      cursors.push(...body.changes.map((c) => c.cursor));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    cursors,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const enabled = integrationEnabled('background loops on Redis (dispatcher, stream reading, entity export)');
describe.skipIf(!enabled)('background loops when Redis is killed and started again', () => {
  let redis: RedisService;
  let store: RedisEntityStore;
  let rx: Awaited<ReturnType<typeof receiver>>;
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis({ own: true });
    store = new RedisEntityStore({ url: redis.url, prefix: 'loops', commandTimeoutMs: 1_000 });
    rx = await receiver();
  });
  afterAll(async () => {
    await rx?.close();
    await store?.close();
    await redis?.stop();
  });

  let accepted = 1_000;
  const vehicles = async (n: number): Promise<string[]> => {
    const ids = Array.from({ length: n }, (_, i) => `0a000000-0000-4000-8000-${String(accepted + i).padStart(12, '0')}`);
    await entityWorker(store, { logger: silent })(
      ids.map((id): Envelope => ({
        topic: TOPICS.entities,
        key: id,
        message: { v: 1, op: 'put', tenant: 't', kind: 'vehicles', key: id, acceptedAt: ++accepted, doc: { id, name: id.slice(-4) } },
      })),
    );
    return ids;
  };

  it('each is down while Redis is gone, named in the probes, and delivers, streams and copies every change once it is back', async () => {
    // The query role's reads: the entity store only (vehicles), no event store needed.
    const finder = new Finder({ entities: store, events: {} as EventStore });
    const dispatcher = new Dispatcher(
      { store: store.subscriptions, source: finder, logger: silent },
      { allow: parseAddressRanges('127.0.0.1'), pollMs: 20, scanMs: 100, lingerMs: 20 },
    );
    const hub = new StreamHub(finder, { perToken: 10, slots: new MemoryStreamSlots(), pollMs: 20, heartbeatMs: 60_000 });
    const copied: EntityChange[] = [];
    const exporter = new EntityExporter(store, { writeEntityChanges: async (c) => (copied.push(...c), c.length) }, silent, {
      intervalMs: 50,
      maxBackoffMs: 500,
    });
    const health = new Health();
    health.watch(() => [...dispatcher.parts(), ...hub.parts(), ...exporter.parts()]);
    try {
      const first = await vehicles(5);
      const head = await store.feed.head('t');
      await store.subscriptions.create(
        {
          id: '00000000-0000-4000-8000-00000000aaaa',
          tenant: 't',
          url: rx.url,
          filter: {},
          secret: 'secret',
          state: 'active',
          cursor: head,
          createdAt: Date.now(),
          rev: 0,
        },
        10,
      );
      const stream = sink();
      (await hub.open({ tenant: 't', owner: 'o', filter: {}, sink: stream })).start();
      dispatcher.start();
      exporter.start();
      const before = await vehicles(5);
      await until(
        'before: delivered, streamed, copied',
        () => [rx.cursors.length, stream.ids().length].every((n) => n === 5) && copied.length === 10,
      );
      await until('all up', () => health.down().length === 0);

      // Gone: killed, its port closed.
      const pid = redis.pid!;
      process.kill(pid, 'SIGKILL');
      await until('redis-server gone', () => {
        try {
          process.kill(pid, 0);
          return false;
        } catch {
          return true;
        }
      });
      const goneAt = Date.now();
      const names = () => health.down().map((p) => p.name);
      await until('the loops down', () => ['dispatcher scan', 'stream reader t', 'entity export'].every((n) => names().includes(n)));
      const downAt = Date.now();
      expect(await loopUp('dispatcher-scan')).toBe(0);
      expect(await loopUp('stream-reader')).toBe(0);
      expect(await loopUp('entity-export')).toBe(0);
      for (const p of health.down()) expect(p.kind).toBe('loop');
      // The stream stays open meanwhile.
      expect(stream.ended).toBe(false);

      await redis.restart();
      const backAt = Date.now();
      const after = await vehicles(5);
      await until(
        'after: delivered, streamed, copied',
        () => [rx.cursors.length, stream.ids().length].every((n) => n >= 10) && copied.length >= 15,
      );
      await until('all up again', () => health.down().length === 0);
      // For the record (not a bound): how soon the three were seen down, and up again.
      console.log(`loops: all three down ${downAt - goneAt} ms after Redis was gone, all up ${Date.now() - backAt} ms after it was back`);
      expect(await loopUp('dispatcher-scan')).toBe(1);
      expect(await loopUp('stream-reader')).toBe(1);
      expect(await loopUp('entity-export')).toBe(1);

      // Every change after the subscription's and the stream's start, once each (the stream) and at least once (webhooks).
      const feed = await store.feed.read({ tenant: 't', limit: 100, after: head });
      const cursors = feed.entries.map((e) => e.cursor);
      expect(cursors).toHaveLength(10);
      expect(stream.ids()).toEqual(cursors);
      expect([...new Set(rx.cursors)]).toEqual(cursors);
      expect(new Set(copied.map((c) => c.key))).toEqual(new Set([...first, ...before, ...after]));
    } finally {
      await dispatcher.close();
      hub.close();
      await exporter.close();
    }
  }, 120_000);
});
