/**
 * bench/peers.mjs: a run's ingest figures per vCPU beside the peers' published figures; and
 * bench/lib/capacity.mjs with bench/capacity.mjs: CPU per operation by process, and the cores a
 * rate of location events needs, beside the peers' vCPUs for the same rate.
 */
import { describe, expect, it } from 'vitest';
// @ts-expect-error: plain ESM without type declarations
import { PEERS, peerRows } from '../bench/peers.mjs';
// @ts-expect-error: plain ESM without type declarations
import { capacityEntry, capacityOf, sizing } from '../bench/lib/capacity.mjs';
// @ts-expect-error: plain ESM without type declarations
import { peerSizing } from '../bench/capacity.mjs';

const run = {
  machine: { nproc: 2 },
  rows: [
    { scenario: 'PUT locationUpdateEvent (404 B), 50 conn, embedded', figure: 24_000, unit: 'req/s' },
    { scenario: 'PUT trip with inline entities (3546 B), embedded', figure: 8_000, unit: 'req/s' },
    { scenario: 'bulk ingest 200,000 location events → visible by GET, embedded (batches of 5,000)', figure: 100_000, unit: 'events/s' },
    { scenario: 'PUT locationUpdateEvent, 50 conn, distributed ingress (answered after Kafka acks=-1)', figure: 5_000, unit: 'req/s' },
  ],
};

describe('bench peers', () => {
  it('divides by the processors for per-vCPU peers, not for per-server ones, and skips rows the run lacks', () => {
    const rows = peerRows(run);
    // Embedded PUT beside ThingsBoard's HTTP API (per vCPU) and REST platforms (the machine).
    expect(rows[0]).toMatchObject({
      ours: expect.stringContaining('PUT'),
      perVcpu: 12_000,
      theirs: PEERS.tbHttp.perVcpu,
      perServer: false,
    });
    expect(rows[0].factor).toBeCloseTo(12_000 / 240);
    expect(rows[1].factor).toBeCloseTo(24_000 / 220);
    // The distributed PUT row, then the embedded bulk row; no distributed bulk row in this run.
    expect(rows.map((r: { ours: string }) => r.ours)).toEqual([
      'one event a request (PUT), embedded',
      'one event a request (PUT), embedded',
      'one event a request (PUT), distributed (all on these cores)',
      'one event a request (PUT), distributed (all on these cores)',
      'bulk ingest, visible by GET, embedded',
      'bulk ingest, visible by GET, embedded',
    ]);
    expect(rows[4].factor).toBeCloseTo(50_000 / 2_500);
    expect(rows[5]).toMatchObject({ perServer: true });
    expect(rows[5].factor).toBeCloseTo(100_000 / 8_000);
  });

  it('refuses results that do not name the processors', () => {
    expect(() => peerRows({ rows: run.rows })).toThrow(/nproc/);
  });
});

describe('bench capacity', () => {
  // 10,000 events in 2 s: ingress 1 s of CPU (100 µs an event), worker 0.5 s, load generator 0.2 s.
  const entry = capacityEntry({
    scenario: 'PUT locationUpdateEvent, distributed',
    op: 'an event',
    ops: 10_000,
    seconds: 2,
    spent: { worker: 0.5, ingress: 1, 'load generator': 0.2, query: 0.001 },
    echo: { us: 25, of: 'the same requests' },
    window: 'from the warm-up until every accepted event was in ClickHouse',
    locationEvents: true,
  });

  it('gives µs an operation by process, largest first, each and their sum as a multiple of the echo', () => {
    expect(entry.processes.map((p: { name: string }) => p.name)).toEqual(['ingress', 'worker', 'load generator', 'query']);
    expect(entry.processes[0]).toMatchObject({ us: 100, xEcho: 4 });
    expect(entry.together.us).toBeCloseTo(170.1);
    expect(entry.cores).toBeCloseTo(0.8505);
    const noEcho = capacityEntry({ scenario: 's', op: 'a GET', ops: 1, seconds: 1, spent: { query: 1e-6 }, window: 'w' });
    expect(noEcho.processes[0].xEcho).toBeUndefined();
  });

  it('sizes cores as rate × µs / 1e6 × headroom, without the load generator or processes under 0.5 µs', () => {
    const rows = sizing(entry, { headroom: 1.5, rates: [10_000, 1_000_000] });
    expect(rows.map((r: { name: string }) => r.name)).toEqual(['ingress', 'worker', 'together']);
    expect(rows[0].cores[0]).toBeCloseTo(1.5); // 10,000/s × 100 µs = 1 core, × 1.5
    expect(rows[1].cores[1]).toBeCloseTo(75); // 1,000,000/s × 50 µs = 50 cores, × 1.5
    expect(rows[2]).toMatchObject({ us: 150 });
    expect(rows[2].perCore).toBeCloseTo(1e6 / 150);
  });

  it("reads the CPU figures of older runs from their rows' notes", () => {
    const old = {
      rows: [
        {
          scenario: 'PUT locationUpdateEvent, 50 conn, distributed ingress',
          note: 'p99 28 ms vs 5 ms; CPU µs a PUT by process: ingress 92, Kafka mock 45, load generator 39; together 176 µs, 1.50 cores busy (the backlog)',
        },
        { scenario: 'GET trip by id, embedded', note: 'p99 4 ms vs 3 ms' },
      ],
    };
    const [e, ...rest] = capacityOf(old);
    expect(rest).toEqual([]);
    expect(e).toMatchObject({ op: 'a PUT', locationEvents: true, fromNotes: true, cores: 1.5, together: { us: 176 } });
    expect(e.processes.map((p: { name: string; us: number }) => [p.name, p.us])).toEqual([
      ['ingress', 92],
      ['Kafka mock', 45],
      ['load generator', 39],
    ]);
    expect(capacityOf({ rows: [], capacity: { entries: [entry] } })).toEqual([entry]);
  });

  it("gives the peers' vCPUs, or servers, for the same rates", () => {
    const tb = peerSizing([10_000]).find((p: { peer: string }) => p.peer === PEERS.tbBest.name);
    expect(tb).toMatchObject({ per: 'vCPU', needed: [4] });
    expect(peerSizing([80_000]).find((p: { peer: string }) => p.peer === PEERS.traccar.name)).toMatchObject({
      per: 'server',
      needed: [10],
    });
  });
});
