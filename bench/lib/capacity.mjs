/**
 * Capacity per role: the CPU each process of a scenario spent per operation (µs, from /proc, all
 * threads), each also as a multiple of the bare fastify echo's CPU per request measured in the
 * same run, and the cores each process would need for a sustained rate of location events.
 *
 * cores = events/s × µs of CPU an event / 1e6 × HEADROOM. The headroom of 1.5 plans every core
 * to be about two-thirds busy at that rate, which leaves room for peaks, merges and collections.
 * The arithmetic is linear: it assumes the per-event cost measured on this machine holds for
 * more processes of a role on more cores, which nothing here measured.
 */
import { alignColumns, fmt } from './util.mjs';

export const HEADROOM = 1.5;
export const RATES = [10_000, 100_000, 1_000_000];
/** Processes left out of the sizing: the bench's own clients. */
const NOT_SIZED = new Set(['load generator']);

/**
 * One scenario's entry of the capacity table. `spent` is CPU seconds by process (as
 * `cpuMeter().spent()` gives them), spent on `ops` operations of kind `op` ('a PUT', 'an event',
 * 'a GET') over `seconds` of wall time; `opsBy` (name -> operations) overrides `ops` for processes
 * that handled another count in that time. `echo` is { us, of } (the echo's µs of CPU a request
 * and which requests), or undefined when the run measured none. `locationEvents`: one operation
 * is one location event, so the entry is sized.
 */
export function capacityEntry({ scenario, op, ops, opsBy = {}, seconds, spent, echo, window, locationEvents = false }) {
  const times = (us) => (echo?.us > 0 ? us / echo.us : undefined);
  const processes = Object.entries(spent)
    .map(([name, s]) => ({ name, us: (s * 1e6) / (opsBy[name] ?? ops) }))
    .sort((a, b) => b.us - a.us)
    .map((p) => ({ ...p, xEcho: times(p.us) }));
  const together = processes.reduce((a, p) => a + p.us, 0);
  const total = Object.values(spent).reduce((a, b) => a + b, 0);
  return {
    scenario,
    op,
    ops,
    opsBy,
    seconds,
    window,
    locationEvents,
    echo: echo ?? null,
    processes,
    together: { us: together, xEcho: times(together) },
    cores: total / seconds,
  };
}

/**
 * The cores each process of a location-event entry needs at each of `rates` events/s, with
 * `headroom`; the load generator and processes under 0.5 µs an event are left out. The last row
 * is the sum of the others.
 */
export function sizing(entry, { headroom = HEADROOM, rates = RATES } = {}) {
  const rows = entry.processes
    .filter((p) => !NOT_SIZED.has(p.name) && p.us >= 0.5)
    .map((p) => ({ name: p.name, us: p.us, perCore: 1e6 / p.us, cores: rates.map((r) => ((r * p.us) / 1e6) * headroom) }));
  const us = rows.reduce((a, r) => a + r.us, 0);
  if (rows.length > 1) rows.push({ name: 'together', us, perCore: 1e6 / us, cores: rates.map((r) => ((r * us) / 1e6) * headroom) });
  return rows;
}

/**
 * The capacity entries of a bench run's results. Runs written before the capacity table have
 * the figures only in their rows' notes ("CPU µs a PUT by process: ingress 92, …; together 320
 * µs, 1.50 cores busy"): they are read from there, with no echo figure and `fromNotes` set.
 */
export function capacityOf(run) {
  if (run.capacity?.entries) return run.capacity.entries;
  const out = [];
  for (const row of run.rows ?? []) {
    const m = /CPU µs (a PUT|an event) by process: ([^;]+); together (\d+) µs, ([\d.]+) cores busy/.exec(row.note ?? '');
    if (!m) continue;
    const processes = m[2].split(', ').map((part) => {
      const [, name, us] = /^(.*) (\d+)$/.exec(part);
      return { name, us: Number(us), xEcho: undefined };
    });
    out.push({
      scenario: row.scenario,
      op: m[1],
      window:
        m[1] !== 'a PUT'
          ? 'from the first request until all were visible'
          : /distributed/.test(row.scenario)
            ? 'during the timed run (the backlog the workers and ClickHouse work off after it not counted)'
            : 'during the timed run',
      locationEvents: /location/.test(row.scenario),
      echo: null,
      processes,
      together: { us: Number(m[3]), xEcho: undefined },
      cores: Number(m[4]),
      fromNotes: true,
    });
  }
  return out;
}

const x = (v) => (v === undefined ? '—' : `${fmt(v, 2)}×`);

/** The CPU table of `entries` as text lines: a block per scenario. */
export function capacityLines(entries) {
  const lines = [];
  for (const e of entries) {
    const echo = e.echo ? `; the fastify echo ${fmt(e.echo.us)} µs a request (${e.echo.of})` : '; no echo measured';
    lines.push(`${e.scenario}`, `  µs of CPU ${e.op}, ${e.window}; ${fmt(e.cores, 2)} cores busy${echo}`);
    const cells = [...e.processes.filter((p) => p.us >= 0.5), { name: 'together', ...e.together }].map((p) => [
      p.name,
      fmt(p.us),
      x(p.xEcho),
    ]);
    for (const l of alignColumns(['process', `µs ${e.op}`, '× echo'], cells)) lines.push(`    ${l}`);
    lines.push('');
  }
  return lines;
}

/** The sizing of the location-event entries as text lines. */
export function sizingLines(entries, { headroom = HEADROOM, rates = RATES } = {}) {
  const lines = [];
  for (const e of entries.filter((en) => en.locationEvents)) {
    lines.push(`${e.scenario}`, `  µs of CPU an event, ${e.window}`);
    const cells = sizing(e, { headroom, rates }).map((r) => [
      r.name,
      fmt(r.us),
      fmt(r.perCore, 0),
      ...r.cores.map((c) => fmt(c, c < 10 ? 1 : 0)),
    ]);
    const head = ['process', 'µs an event', 'events/s a core', ...rates.map((r) => `cores at ${fmt(r, 0)}/s`)];
    for (const l of alignColumns(head, cells)) lines.push(`    ${l}`);
    lines.push('');
  }
  return lines;
}
