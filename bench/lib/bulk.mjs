/**
 * Bulk ingest end to end, as `npm run bench` measures it: POST location events in JSON-array
 * batches (`concurrency` requests in flight), then poll the query API until the last event of
 * every vehicle of every batch is visible by GET. Returns events/s visible and answered; with
 * `cpuOf` (name -> process id), also the CPU seconds each of those processes and this one used from
 * the first request until all was visible (`cpu`).
 */
import { cpuMeter } from './proc.mjs';
import { request, sleep } from './util.mjs';
import { VEHICLES, locationBodies } from './documents.mjs';

export async function bulkEndToEnd({ writeUrl, readUrl, token, n, batch, concurrency, visibleTimeoutS, cpuOf }) {
  const { ids, next } = locationBodies();
  const batches = [];
  for (let b = 0; b * batch < n; b++) {
    const docs = [];
    const keys = [];
    const probes = new Map();
    for (let i = b * batch; i < Math.min(n, (b + 1) * batch); i++) {
      docs.push(next());
      keys.push(ids.at(i));
      probes.set(i % VEHICLES.length, ids.at(i)); // the last event of each vehicle (Kafka key) in the batch
    }
    // The body as bytes, made before the clock starts (as autocannon prepares its requests): the
    // load generator shares the 2 cores with the service, and encoding 2–4 MB of text a request
    // during the run would take from the service's share.
    batches.push({ body: Buffer.from(`[${docs.join(',')}]`), docs, keys, probes: [...probes.values()] });
  }
  const meter = cpuOf ? cpuMeter(cpuOf) : undefined;
  const t0 = performance.now();
  let nextBatch = 0;
  let accepted = 0;
  const worker = async () => {
    while (nextBatch < batches.length) {
      const b = batches[nextBatch++];
      const r = await request(`${writeUrl}/api/v5/bulk/events`, { method: 'POST', token, body: b.body });
      if (r.status !== 200) throw new Error(`bulk answered ${r.status}: ${r.body.slice(0, 300)}`);
      // The answer begins {"accepted":N,… (services/ingress/src/routes.ts bulkAnswer); its items
      // (one a document) are not needed here, so the whole answer is parsed only if it does not.
      const head = /^\{"accepted":(\d+),/.exec(r.body.slice(0, 40));
      accepted += head ? Number(head[1]) : JSON.parse(r.body).accepted;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const tAnswered = performance.now();
  if (accepted !== n) throw new Error(`bulk accepted ${accepted} of ${n}`);
  let pending = batches.flatMap((b) => b.probes);
  const probeCount = pending.length;
  const deadline = Date.now() + visibleTimeoutS * 1000;
  while (pending.length > 0) {
    const still = [];
    for (let i = 0; i < pending.length; i += 32) {
      const chunk = pending.slice(i, i + 32);
      const res = await Promise.all(chunk.map((id) => request(`${readUrl}/api/v5/events/${id}`, { token })));
      res.forEach((r, j) => r.status !== 200 && still.push(chunk[j]));
    }
    pending = still;
    if (pending.length === 0) break;
    if (Date.now() > deadline) break;
    await sleep(20);
  }
  const tVisible = performance.now();
  const cpu = meter?.spent();
  return {
    cpu,
    invisible: pending.length,
    rate: (n * 1000) / (tVisible - t0),
    answeredRate: (n * 1000) / (tAnswered - t0),
    seconds: (tVisible - t0) / 1000,
    probeCount,
    batches,
    ids,
  };
}
