/**
 * The distributed deployment with a store that refuses writes (issue 42), end to end: Redis at
 * `maxmemory` with `noeviction` answers the worker's writes "OOM command not allowed". Writes go on
 * being acknowledged by the ingress (Kafka holds them); the worker retries without committing its
 * offsets, so its consumer lag grows and is in /metrics; its /readyz answers 503 naming
 * `store redis` and the cause; its /healthz stays 200 (a restart would not give Redis memory).
 * Once Redis has memory again, without restarting any process, every acknowledged write is
 * readable, the lag is back to 0 and /readyz is 200.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOPICS } from '@otm/core';
import { integrationEnabled, requireServices } from '../infra/services.js';
import { startCluster, type Cluster } from './cluster.js';

const suite = 'the distributed deployment while Redis refuses writes (maxmemory, noeviction)';
const H = { authorization: 'Bearer writer-token-acme', 'content-type': 'application/json' };
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function until<T>(what: string, check: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(250);
  }
}

describe.skipIf(!integrationEnabled(suite))(suite, () => {
  let c: Cluster;
  let admin: Redis;
  beforeAll(async () => {
    requireServices(['kafka', 'clickhouse', 'redis']);
    c = await startCluster();
    admin = new Redis(c.redis.url);
  }, 180_000);
  afterAll(async () => {
    await admin?.quit();
    await c?.close();
  }, 60_000);

  const worker = () => c.processes.get('worker')!.url;
  /** The worker's summed consumer lag on the entities topic. */
  const entityLag = async () => {
    const metrics = await (await fetch(`${worker()}/metrics`)).text();
    return [...metrics.matchAll(/^otm_consumer_lag\{([^}]*)\} (\d+)$/gm)]
      .filter((m) => m[1]!.includes(`topic="${TOPICS.entities}"`))
      .reduce((sum, m) => sum + Number(m[2]), 0);
  };
  const vehicle = (i: number) => ({
    entityType: 'vehicle',
    id: `0e000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`,
    name: `truck ${i} ${'x'.repeat(2000)}`,
  });
  const put = async (doc: { id: string }) => {
    const res = await fetch(`${c.url}/api/v5/vehicles`, { method: 'PUT', headers: H, body: JSON.stringify(doc) });
    await res.arrayBuffer();
    return res.status;
  };

  it('acknowledges writes, holds them in Kafka with the lag and /readyz saying why, and stores all once Redis has memory', async () => {
    const acknowledged: Array<{ id: string; name: string }> = [];
    for (let i = 0; i < 20; i++) {
      expect(await put(vehicle(i))).toBe(200);
      acknowledged.push(vehicle(i));
    }
    await until('the first writes stored', async () => ((await entityLag()) === 0 ? true : undefined));

    // Redis full: a little above what it uses now.
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', String(used + 256 * 1024));
    for (let i = 20; i < 420; i++) {
      expect(await put(vehicle(i))).toBe(200);
      acknowledged.push(vehicle(i));
    }

    // The worker says which store refuses, and why; it is not stalled.
    const down = await until('the worker not ready', async () => {
      const res = await fetch(`${worker()}/readyz`);
      const body = (await res.json()) as { down?: Array<{ name: string; kind: string; reason: string }> };
      return res.status === 503 ? body.down : undefined;
    });
    expect(down).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: 'store redis', kind: 'store', reason: expect.stringMatching(/out of memory/) }),
      ]),
    );
    expect((await fetch(`${worker()}/healthz`)).status).toBe(200);
    // The offsets are not committed: the lag shows the writes waiting.
    const lag = await until('the lag to show', async () => {
      const l = await entityLag();
      return l > 0 ? l : undefined;
    });
    expect(lag).toBeGreaterThan(0);
    const metrics = await (await fetch(`${worker()}/metrics`)).text();
    expect(metrics).toMatch(/^otm_writes_refused_total\{store="redis",cause="out-of-memory"\} [1-9]/m);
    const last = acknowledged.at(-1)!;
    expect((await fetch(`${c.url}/api/v5/vehicles/${last.id}`, { headers: H })).status).toBe(404);

    // Memory again: no process restarted, everything arrives, the probes are green.
    await admin.config('SET', 'maxmemory', '0');
    await until('the lag back to 0', async () => ((await entityLag()) === 0 ? true : undefined));
    await until('the worker ready', async () => ((await fetch(`${worker()}/readyz`)).status === 200 ? true : undefined));
    const missing: string[] = [];
    for (const doc of acknowledged) {
      const res = await fetch(`${c.url}/api/v5/vehicles/${doc.id}`, { headers: H });
      if (res.status !== 200 || ((await res.json()) as { name: string }).name !== doc.name) missing.push(doc.id);
    }
    expect(missing).toEqual([]);
  }, 240_000);
});
