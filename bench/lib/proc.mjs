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
