/**
 * The measurements the scenario groups share: a baseline-then-service pair under the same load,
 * the table row of such a pair, bulk ingest end to end with its warm-up, and the CPU entries of
 * the capacity table. Each takes the run's context (`ctx`, made by bench/run.mjs): its settings
 * (`cfg`), the fastify echo (`base`), `addRow`, and the capacity entries.
 */
import { bulkEndToEnd as bulkRun } from './bulk.mjs';
import { capacityEntry } from './capacity.mjs';
import { cpuMeter } from './proc.mjs';
import { fmt, load, log } from './util.mjs';

/**
 * The baseline (the fastify echo), then the service, under the same load: a warm-up run, then the
 * timed run of each. With `pids` (name -> process id of the service's processes), the CPU is
 * measured too: `cpu` of those processes and the load generator during the service's timed run,
 * and `echoCpu` of the echo and the load generator during the echo's timed run. `serviceMeter`
 * (started with the service's timed run, at `serviceT0`) can be read again later, for CPU spent
 * after the run (e.g. on a backlog). `beforeTimed` is awaited between the service's warm-up and
 * its timed run. `warm` holds the warm-up runs' figures.
 */
export async function pair(ctx, what, svcUrl, token, spec, pids, { beforeTimed } = {}) {
  const { cfg, base } = ctx;
  const out = { warm: {} };
  for (const [name, url] of [
    ['baseline', base.url],
    ['service', svcUrl],
  ]) {
    const connections = spec.connections ?? cfg.connections;
    if (cfg.warmup > 0) out.warm[name] = await load({ ...spec, url, token, duration: cfg.warmup, connections });
    if (name === 'service') await beforeTimed?.();
    const meter = pids ? cpuMeter(name === 'service' ? pids : { 'fastify echo': base.child.pid }) : undefined;
    const t0 = performance.now();
    out[name] = await load({ ...spec, url, token, duration: cfg.duration, connections });
    if (meter && name === 'service') Object.assign(out, { cpu: meter.spent(), serviceMeter: meter, serviceT0: t0 });
    if (meter && name === 'baseline') out.echoCpu = meter.spent();
    log(
      `    ${what} ${name}: ${fmt(out[name].rps)} req/s, p50 ${out[name].p50} ms, p99 ${out[name].p99} ms, non-2xx ${out[name].non2xx}, errors ${out[name].errors}`,
    );
  }
  return out;
}

/** The echo's CPU per request in a pair measured with `pids`: { us, loadGeneratorUs, requests }. */
export function echoOf({ echoCpu, baseline }) {
  if (!echoCpu || !(baseline.total > 0)) return undefined;
  return {
    us: (echoCpu['fastify echo'] * 1e6) / baseline.total,
    loadGeneratorUs: (echoCpu['load generator'] * 1e6) / baseline.total,
    requests: baseline.total,
  };
}

/**
 * The target of a row kept for its figure but no longer judged: the throughput rows that the
 * service's processes, its stores and the load generator cannot meet together on two shared cores
 * (embedded bulk, distributed PUT and bulk). The per-role capacity table sizes them instead.
 */
export const RETIRED = 'retired';

/** The row of a pair: the service's requests/s against the echo's; any non-2xx or error fails it. */
export function throughputRow(ctx, scenario, target, { baseline, service }, extra = '') {
  const bad = service.non2xx + service.errors;
  return ctx.addRow({
    scenario,
    figure: service.rps,
    unit: 'req/s',
    baseline: baseline.rps,
    ...(target === RETIRED ? { status: 'retired: see capacity' } : { target }),
    ...(bad > 0 ? { pass: false } : {}),
    note: `p99 ${service.p99} ms vs ${baseline.p99} ms${bad > 0 ? `; ${service.non2xx} non-2xx answers, ${service.errors} errors: figure not valid` : ''}${extra}`,
    detail: { baseline, service },
  });
}

/**
 * Records a scenario's CPU by process in the run's capacity table and returns the entry. `echo`
 * defaults to the run's reference (the echo's CPU a PUT of a location event, `ctx.echo`).
 */
export function recordCpu(ctx, { echo = ctx.echo, ...entry }) {
  const e = capacityEntry({ ...entry, echo });
  ctx.capacity.push(e);
  return e;
}

/**
 * Records the CPU of an autocannon pair during the service's timed run, against the echo of the
 * same requests; a pair of PUTs of location events also becomes the run's echo reference.
 */
export function recordPairCpu(ctx, scenario, b, { op, locationEvents = false }) {
  const echo = echoOf(b);
  if (echo && locationEvents) ctx.echo = { ...echo, of: `a PUT of one location event, measured with "${scenario}"` };
  return recordCpu(ctx, {
    scenario,
    op,
    ops: b.service.total,
    seconds: ctx.cfg.duration,
    spent: b.cpu,
    echo: echo && { ...echo, of: 'the same requests' },
    window: 'during the timed run',
    locationEvents,
  });
}

/** Bulk ingest end to end (bench/lib/bulk.mjs), with this run's wait for visibility. */
export const bulkEndToEnd = (ctx, o) => bulkRun({ ...o, visibleTimeoutS: ctx.cfg.visibleTimeoutS });

/**
 * The timed bulk run after a warm-up on the same service, as every other scenario has one: a
 * service's first requests also pay for compiling its code. The warm-up sends its events in
 * batches a tenth the size of the timed run's, so that the bulk route and the probe GETs run about
 * as often before the timed run as in it (embedded: 40 requests and 2,560 probes each), not only
 * the per-event code. Measured with bench/diag/bulk/bulk-threads.mjs and OTM_DIAG_BULK_WARMUP:
 * cold 62,000–79,000 events/s visible; after 20,000 events in 4 requests 72,000–91,000; in 40
 * requests 93,000–104,000. With `pids`, the CPU of those processes is measured (`cpu`).
 */
export async function warmBulkEndToEnd(ctx, o, pids) {
  if (ctx.cfg.bulkWarmupEvents > 0) {
    const w = await bulkEndToEnd(ctx, { ...o, n: ctx.cfg.bulkWarmupEvents, batch: Math.max(1, Math.round(o.batch / 10)) });
    if (w.invisible) throw new Error(`warm-up: ${w.invisible} of ${w.probeCount} probe events not visible`);
  }
  return bulkEndToEnd(ctx, { ...o, ...(pids ? { cpuOf: pids } : {}) });
}
