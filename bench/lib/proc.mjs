/** CPU time from /proc, for the bench's diagnostics (Linux). */
import fs from 'node:fs';

const TICKS = 100; // USER_HZ: /proc counts CPU time in clock ticks of 10 ms

/**
 * User and system CPU seconds of a process or thread, from its stat file:
 * `/proc/<pid>/stat` or `/proc/<pid>/task/<tid>/stat`. Throws when it is gone.
 */
export function cpuSeconds(statFile) {
  // The command name (field 2) is in parentheses and may hold spaces: count from after it.
  const f = fs.readFileSync(statFile, 'utf8').split(') ')[1].split(' ');
  return { user: Number(f[11]) / TICKS, sys: Number(f[12]) / TICKS };
}

/**
 * CPU seconds of named processes (all their threads) from now on, and of this process (the load
 * generator: autocannon or the bulk client) as `load generator`: `meter.spent()` gives
 * `{ name: seconds }` since the meter was made. A process gone meanwhile counts what it had used
 * when last read (`spent` reads them all each time).
 */
export function cpuMeter(pids) {
  const read = () => {
    const out = {};
    for (const [name, pid] of Object.entries(pids)) {
      try {
        const { user, sys } = cpuSeconds(`/proc/${pid}/stat`);
        out[name] = user + sys;
      } catch {
        out[name] = undefined;
      }
    }
    return out;
  };
  const start = read();
  const self = process.cpuUsage();
  return {
    spent() {
      const now = read();
      const own = process.cpuUsage(self);
      const out = {};
      for (const name of Object.keys(pids)) if (start[name] !== undefined && now[name] !== undefined) out[name] = now[name] - start[name];
      out['load generator'] = (own.user + own.system) / 1e6;
      return out;
    },
  };
}

/**
 * `spent` (seconds by process) as µs of CPU per unit of work, largest first, with the total and
 * how many cores that kept busy over `seconds` of wall time: "ingress 85, ClickHouse 68, …;
 * together 250 µs a PUT, 1.6 cores".
 */
export function cpuPerUnit(spent, units, unit, seconds) {
  const total = Object.values(spent).reduce((a, b) => a + b, 0);
  // Processes that did nothing measurable for this work (under 0.5 µs a unit) are left out.
  const parts = Object.entries(spent)
    .filter(([, s]) => (s * 1e6) / units >= 0.5)
    .sort((a, b) => b[1] - a[1])
    .map(([name, s]) => `${name} ${Math.round((s * 1e6) / units)}`);
  return `CPU µs ${unit} by process: ${parts.join(', ')}; together ${Math.round((total * 1e6) / units)} µs, ${(total / seconds).toFixed(2)} cores busy`;
}

/** The processes of a test cluster (test/distributed/cluster.ts) by name, for `cpuMeter`. */
export const clusterPids = (cluster) => ({
  ingress: cluster.processes.get('ingress').child.pid,
  worker: cluster.processes.get('worker').child.pid,
  query: cluster.processes.get('query').child.pid,
  ClickHouse: cluster.clickhouse.pid,
  'Kafka broker': cluster.kafka.pid,
  Redis: cluster.redis.pid,
});
