/** bench/peers.mjs: a run's ingest figures per vCPU beside the peers' published figures. */
import { describe, expect, it } from 'vitest';
// @ts-expect-error: plain ESM without type declarations
import { PEERS, peerRows } from '../bench/peers.mjs';

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
    expect(rows[0]).toMatchObject({ ours: expect.stringContaining('PUT'), perVcpu: 12_000, theirs: PEERS.tbHttp.perVcpu, perServer: false });
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
