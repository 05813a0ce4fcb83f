/**
 * CPU seconds used by each process that a command starts (its whole tree and anything else that
 * appears while it runs), sampled from /proc every 250 ms: which of the service's processes, the
 * test Kafka, ClickHouse, Redis and the load generator used the machine's cores during a run.
 *
 *   node bench/diag/process/cpu-by-process.mjs -- npm run bench -- --only distributed
 *
 * Prints the command's own output, then one line per process that used at least 0.2 s.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { cpuSeconds } from '../../lib/proc.mjs';

const sep = process.argv.indexOf('--');
const [cmd, ...args] = sep === -1 ? [] : process.argv.slice(sep + 1);
if (!cmd) throw new Error('usage: node bench/diag/process/cpu-by-process.mjs -- <command> [args...]');

const pidsBefore = new Set(fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d)));
const seen = new Map(); // pid -> { cpu, name }
function sample() {
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || pidsBefore.has(pid)) continue;
    try {
      const { user, sys } = cpuSeconds(`/proc/${pid}/stat`);
      const cpu = user + sys;
      const entry = seen.get(pid) ?? {
        cpu: 0,
        name: fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim().slice(0, 100),
      };
      entry.cpu = Math.max(entry.cpu, cpu);
      seen.set(pid, entry);
    } catch {
      // gone meanwhile
    }
  }
}
const t0 = Date.now();
const timer = setInterval(sample, 250);
const child = spawn(cmd, args, { stdio: 'inherit' });
const code = await new Promise((resolve) => child.on('exit', (c) => resolve(c ?? 1)));
clearInterval(timer);
const wall = (Date.now() - t0) / 1000;
console.log(`\nCPU seconds by process over ${wall.toFixed(0)} s of wall time (${(wall * 2).toFixed(0)} core-seconds on 2 cores):`);
for (const [pid, { cpu, name }] of [...seen].sort((a, b) => b[1].cpu - a[1].cpu)) {
  if (cpu >= 0.2) console.log(`${cpu.toFixed(1).padStart(7)} s  ${pid.padStart(7)}  ${name}`);
}
process.exitCode = code;
