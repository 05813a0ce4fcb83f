/**
 * Where the CPU goes in the bench's distributed bulk scenario: a fresh test cluster
 * (test/distributed/cluster.ts: Kafka mock, ClickHouse (chdb), Redis, `otm ingress`, `otm query`,
 * `otm worker`), a warm-up of 20,000 location events in bulk requests of 1,000, then timed runs of
 * 50,000 in requests of 10,000 (2 in flight), each followed by the bench's visibility probes (the
 * last event of every vehicle of every request, 32 GETs at a time, again every 20 ms until all are
 * found). Prints events/s answered and visible, the probe GETs sent, and each process's CPU
 * seconds (from /proc; this script as `load generator`) until the last answer and from then until
 * all were visible. After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/process/distributed-bulk-cpu.mjs [rounds=2]
 *
 * Loopback only.
 */
import { startCluster } from '../../../test/distributed/cluster.ts';
import { VEHICLES, locationBodies, vehicleDoc } from '../../lib/documents.mjs';
import { clusterPids, cpuMeter } from '../../lib/proc.mjs';
import { fmt, idMaker, request, sleep } from '../../lib/util.mjs';

const ROUNDS = Number(process.argv[2] ?? 2);
const TOKEN = 'writer-token-acme'; // one of the cluster's default tokens
const cluster = await startCluster();
const role = (name) => cluster.processes.get(name);
const pids = clusterPids(cluster);
/** CPU s of each process between two `meter.spent()` readings. */
const spent = (from, to) =>
  Object.keys(to)
    .map((name) => `${name} ${fmt(to[name] - (from[name] ?? 0))}`)
    .join(', ');

try {
  // The first consumer-group join on the mock takes a few seconds: wait until a write is visible.
  const id = idMaker().next();
  await request(`${role('ingress').url}/api/v5/vehicles`, { method: 'PUT', token: TOKEN, body: vehicleDoc(id, 0) });
  while ((await request(`${role('query').url}/api/v5/vehicles/${id}`, { token: TOKEN })).status !== 200) await sleep(100);

  const docs = locationBodies();
  const run = async (n, batch, label) => {
    const requests = [];
    for (let b = 0; b * batch < n; b++) {
      const bodies = [];
      const probes = new Map();
      for (let i = b * batch; i < Math.min(n, (b + 1) * batch); i++) {
        bodies.push(docs.next());
        probes.set(i % VEHICLES.length, docs.ids.at(docs.sent() - 1));
      }
      requests.push({ body: `[${bodies.join(',')}]`, probes: [...probes.values()] });
    }
    const meter = cpuMeter(pids);
    const t0 = performance.now();
    let next = 0;
    const sender = async () => {
      while (next < requests.length) {
        const r = await request(`${role('ingress').url}/api/v5/bulk/events`, { method: 'POST', token: TOKEN, body: requests[next++].body });
        if (r.status !== 200) throw new Error(`bulk answered ${r.status}: ${r.body.slice(0, 200)}`);
      }
    };
    await Promise.all([sender(), sender()]);
    const tAnswered = performance.now();
    const cAnswered = meter.spent();
    let pending = requests.flatMap((r) => r.probes);
    let gets = 0;
    while (pending.length > 0) {
      const still = [];
      for (let i = 0; i < pending.length; i += 32) {
        const chunk = pending.slice(i, i + 32);
        const res = await Promise.all(chunk.map((e) => request(`${role('query').url}/api/v5/events/${e}`, { token: TOKEN })));
        gets += chunk.length;
        res.forEach((r, j) => r.status !== 200 && still.push(chunk[j]));
      }
      pending = still;
      if (pending.length === 0) break;
      if (performance.now() - t0 > 120_000) throw new Error(`${pending.length} probe events not visible after 120 s`);
      await sleep(20);
    }
    const tVisible = performance.now();
    console.log(
      `${label}: answered ${fmt((n * 1000) / (tAnswered - t0))} events/s, visible ${fmt((n * 1000) / (tVisible - t0))} events/s; ${fmt(gets, 0)} probe GETs\n` +
        `  CPU s until the last answer: ${spent({}, cAnswered)}\n  CPU s from then until all visible: ${spent(cAnswered, meter.spent())}`,
    );
  };
  await run(20_000, 1_000, 'warm-up');
  for (let round = 1; round <= ROUNDS; round++) await run(50_000, 10_000, `round ${round}`);
} finally {
  await cluster.close();
}
