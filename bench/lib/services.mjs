/**
 * The services under test, as the scenario groups start them: `otm serve` (embedded) with a
 * temporary data folder, and the distributed deployment of test/distributed/cluster.ts. Both get
 * the run's service environment (`--bulk-threads`, `--service-env`) beside their own settings.
 */
import fs from 'node:fs';
import { startServe, stop as stopOtm } from '../../test/process.ts';
import { vehicleDoc } from './documents.mjs';
import { fmt, idMaker, log, mkTemp, request, sleep } from './util.mjs';

/** The embedded service's token (read and write for TENANT). */
export const EMB_TOKEN = 'bench-token';
/** One of the test cluster's default tokens, a writer for TENANT. */
export const DIST_TOKEN = 'writer-token-acme';
export const TENANT = 'acme';

/**
 * `otm serve` on a fresh data folder; with `profDir`, under `--cpu-prof` (the profile is written
 * when it exits). Resolves { svc, url, dataDir, stop() }; stop() also removes the data folder.
 */
export async function startEmbedded(ctx, extraEnv = {}, profDir) {
  const dataDir = mkTemp('otm-bench-embedded-');
  const env = { OTM_DATA_DIR: dataDir, OTM_TOKENS: `${EMB_TOKEN}:${TENANT}:read+write`, LOG_LEVEL: 'warn', ...ctx.serviceEnv, ...extraEnv };
  // --cpu-prof is not allowed in NODE_OPTIONS: it goes on the command line.
  const svc = await startServe(env, 20_000, profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : []);
  return {
    svc,
    url: svc.url,
    dataDir,
    stop: async () => {
      await stopOtm(svc, 'SIGTERM');
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * A fresh test cluster (Apache Kafka, one KRaft node, topics made by `otm migrate`; ClickHouse (chdb), Redis, `otm
 * ingress`, `otm worker`, `otm query`), once a write has gone through it. Resolves
 * { cluster, ingress, query } (the URLs of the ingress and query processes); close it with
 * `cluster.close()`.
 */
export async function startDistributed(ctx) {
  const { startCluster } = await import('../../test/distributed/cluster.ts');
  const t0 = Date.now();
  const cluster = await startCluster({ env: ctx.serviceEnv });
  const ingress = cluster.processes.get('ingress').url;
  const query = cluster.processes.get('query').url;
  log(
    `    cluster up in ${fmt((Date.now() - t0) / 1000)} s: ingress ${ingress}, query ${query}, worker ${cluster.processes.get('worker').url}`,
  );
  // Wait until a write is visible: the workers have joined their groups.
  const id = idMaker().next();
  const put = await request(`${ingress}/api/v5/vehicles`, { method: 'PUT', token: DIST_TOKEN, body: vehicleDoc(id, 0) });
  if (put.status !== 200) {
    await cluster.close();
    throw new Error(`warm-up PUT answered ${put.status}: ${put.body}`);
  }
  const until = Date.now() + 60_000;
  while ((await request(`${query}/api/v5/vehicles/${id}`, { token: DIST_TOKEN })).status !== 200) {
    if (Date.now() > until) {
      await cluster.close();
      throw new Error('the workers did not apply a write within 60 s');
    }
    await sleep(100);
  }
  return { cluster, ingress, query };
}
