/**
 * One process at a time in a data folder. The event log is written by one process: a second
 * `otm serve` on the same folder would cut off the first one's writes in progress as a "torn
 * tail" at its start, and then write over them. So the embedded stores take `OTM_DATA_DIR/otm.lock`
 * first: a file holding the owner's process id and the time that process started (from
 * /proc/<pid>/stat, so that a process id used again by another process is told apart). A lock
 * whose owner is gone (a crash, `kill -9`) is taken over; one whose owner runs is refused with its
 * process id. Processes in other PID namespaces (containers sharing the volume) cannot be seen:
 * give each embedded service a volume of its own.
 */
import fs from 'node:fs';
import { fileRefusal, reasonOf } from '@otm/core';
import path from 'node:path';

export const LOCK_FILE = 'otm.lock';

/** Folders locked by this process (a second open in the same process is refused too). */
const held = new Set<string>();

/** When process `pid` started (clock ticks since boot), or undefined when it does not run. */
function startOf(pid: number): string | undefined {
  try {
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Whether the owner written in a lock file still runs. */
function ownerRuns(owner: { pid?: unknown; start?: unknown }): boolean {
  if (typeof owner.pid !== 'number' || !Number.isInteger(owner.pid) || owner.pid <= 0) return false;
  if (fs.existsSync('/proc/self/stat')) {
    const start = startOf(owner.pid);
    return start !== undefined && start === owner.start;
  }
  // Without /proc: whether a process of that id exists.
  try {
    process.kill(owner.pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class DataDirLockedError extends Error {
  constructor(dir: string, why: string) {
    super(`${dir} is in use: ${why}`);
    this.name = 'DataDirLockedError';
  }
}

/** Takes the folder's lock; returns its release. Throws DataDirLockedError when another owner runs. */
export function lockDataDir(dir: string, warn?: (message: string) => void): () => void {
  const abs = path.resolve(dir);
  if (held.has(abs)) throw new DataDirLockedError(abs, 'this process has its stores open already');
  fs.mkdirSync(abs, { recursive: true });
  const file = path.join(abs, LOCK_FILE);
  const mine = JSON.stringify({ pid: process.pid, start: startOf(process.pid) });
  /** Creates the lock file; false when one is there already. */
  const take = (): boolean => {
    try {
      fs.writeFileSync(file, mine, { flag: 'wx' });
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      // A full disk: the file is made (it needs no room) but names nobody. The start goes on (reads
      // are served); a second process would take such a file for one a crash left.
      if (fileRefusal(e) !== undefined && fs.existsSync(file)) {
        warn?.(`${file} was made but could not be written (${reasonOf(e)}): it does not name this process until the next start`);
        return true;
      }
      throw e;
    }
  };
  if (!take()) {
    let owner: { pid?: unknown; start?: unknown } = {};
    try {
      owner = JSON.parse(fs.readFileSync(file, 'utf8')) as typeof owner;
    } catch {
      // unreadable or half written (a crash while taking it): nobody's
    }
    if (ownerRuns(owner)) {
      throw new DataDirLockedError(
        abs,
        `another otm process (pid ${String(owner.pid)}) has it open; stop that one first (${file} names it)`,
      );
    }
    fs.rmSync(file, { force: true }); // its owner is gone: take it over
    if (!take()) throw new DataDirLockedError(abs, `another process took ${file} at the same moment`);
  }
  held.add(abs);
  return () => {
    if (!held.delete(abs)) return;
    try {
      // Only our own lock: never one another process took after a takeover.
      if (fs.readFileSync(file, 'utf8') === mine) fs.rmSync(file);
    } catch {
      // already gone
    }
  };
}
