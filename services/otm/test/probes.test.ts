/**
 * /readyz and /healthz report the process's parts (core/health.ts): a consumer or loop that is
 * down makes the process unready at once, and not alive once it has been down the stall bound; a
 * store that refuses writes only makes it unready. /metrics counts the parts that are down.
 */
import { describe, expect, it } from 'vitest';
import { Health, PartState, TokenVerifier, createLogger } from '@otm/core';
import { createHttpApp } from '@otm/http';

function app(health: Health, ready: Record<string, boolean> = { bus: true }) {
  return createHttpApp({
    logger: createLogger('silent'),
    verifier: new TokenVerifier([]),
    bodyLimit: 1024,
    maxDepth: 8,
    readiness: () => Promise.resolve({ ...ready }),
    health,
    stallSeconds: 5,
  });
}

describe('the probes', () => {
  it('are green while every part is up', async () => {
    const health = new Health();
    health.add(new PartState('consumer otm-entity-worker/otm.entities.v1', 'loop'));
    const a = app(health);
    expect((await a.inject('/healthz')).json()).toEqual({ status: 'ok' });
    const ready = await a.inject('/readyz');
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ status: 'ready', checks: { bus: true } });
  });

  it('/readyz names a part that is down and why; /healthz turns red once it stayed down the stall bound', async () => {
    const health = new Health();
    const consumer = new PartState('consumer otm-telemetry-worker/otm.telemetry.v1', 'loop');
    health.add(consumer);
    const a = app(health);
    consumer.down('cannot start: Connection error');
    const ready = await a.inject('/readyz');
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toMatchObject({
      status: 'unavailable',
      checks: { bus: true, 'consumer otm-telemetry-worker/otm.telemetry.v1': false },
      down: [{ name: 'consumer otm-telemetry-worker/otm.telemetry.v1', kind: 'loop', reason: 'cannot start: Connection error' }],
    });
    // Down for less than the stall bound: alive (it may recover by itself).
    expect((await a.inject('/healthz')).statusCode).toBe(200);
    // Down longer than the bound: not alive, so that an orchestrator restarts the process.
    (consumer as unknown as { state: { since: number } }).state.since -= 6_000;
    const live = await a.inject('/healthz');
    expect(live.statusCode).toBe(503);
    expect(live.json()).toMatchObject({ status: 'stalled', stallSeconds: 5, down: [{ name: consumer.name }] });
    expect((await a.inject('/metrics')).body).toMatch(/^otm_parts_down\{kind="loop"\} 1$/m);
    consumer.up();
    expect((await a.inject('/healthz')).statusCode).toBe(200);
    expect((await a.inject('/readyz')).statusCode).toBe(200);
    expect((await a.inject('/metrics')).body).toMatch(/^otm_parts_down\{kind="loop"\} 0$/m);
  });

  it('a store refusing writes makes the process unready, never not alive', async () => {
    const health = new Health();
    const store = new PartState('event store writes', 'store');
    health.add(store);
    const a = app(health);
    store.down('the disk of /data is full');
    (store as unknown as { state: { since: number } }).state.since -= 600_000;
    expect((await a.inject('/readyz')).statusCode).toBe(503);
    expect((await a.inject('/healthz')).statusCode).toBe(200);
  });
});
