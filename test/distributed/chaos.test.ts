/**
 * The distributed deployment under chaos (chaos.ts): the fixed sequence of faults, then a
 * schedule drawn from a seed (printed; OTM_CHAOS_SEED picks one), each under steady writes. Every
 * acknowledged write must be readable as sent and delivered to a webhook, and every process must
 * end with its consumers and loops running. bench/chaos.mjs runs the same for longer.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices } from '../infra/services.js';
import { FIXED_SEQUENCE, runChaos, schedule, summary, type ChaosResult } from './chaos.js';
import { startCluster, type Cluster } from './cluster.js';

const suite = 'the distributed deployment under chaos';

const expectClean = (r: ChaosResult) => {
  expect(r.refused.slice(0, 5)).toEqual([]);
  expect(r.lost.slice(0, 10), `${r.lost.length} acknowledged writes not readable`).toEqual([]);
  expect(r.undelivered.slice(0, 10), `${r.undelivered.length} acknowledged writes not delivered`).toEqual([]);
  expect(r.unhealthy).toEqual([]);
  expect(r.acknowledged).toBe(r.writes);
};

describe.skipIf(!integrationEnabled(suite))(suite, () => {
  let c: Cluster;
  beforeAll(async () => {
    requireServices(['kafka', 'clickhouse', 'redis']);
    c = await startCluster({ env: { OTM_WEBHOOK_ALLOW: '127.0.0.1' } });
  }, 180_000);
  afterAll(async () => c?.close(), 60_000);

  it('the fixed sequence (ClickHouse 15 s, Redis 10 s, worker and query SIGKILLed, Kafka 10 s): every acknowledged write visible', async () => {
    const r = await runChaos(c, { prefix: '7c000000', faults: FIXED_SEQUENCE, rate: 100, log: (l) => console.log(l) });
    console.log(summary(r));
    expectClean(r);
  }, 600_000);

  it('a random schedule of faults from a printed seed: every acknowledged write visible, no process left stalled', async () => {
    const seed = process.env.OTM_CHAOS_SEED ? Number(process.env.OTM_CHAOS_SEED) : Math.floor(Math.random() * 2 ** 31);
    console.log(`chaos seed ${seed} (OTM_CHAOS_SEED=${seed} runs this schedule again)`);
    const faults = schedule(seed, 6);
    const r = await runChaos(c, { prefix: '7c100000', faults, seed, rate: 60, log: (l) => console.log(l) });
    console.log(summary(r));
    expectClean(r);
  }, 900_000);
});
