/**
 * A small tmpfs of a test's own, to run out of room for real (issue 42): needs root and a kernel
 * that lets the process mount (CI runs as root on the same kind of machine). Tests that use it
 * run their scenario another way where mounting is refused, and say so.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

let mountable: boolean | undefined;

/** Whether this process may mount a tmpfs; OTM_TEST_NO_MOUNT=1 says no, to run the fallbacks. */
export function canMountTmpfs(): boolean {
  if (mountable !== undefined) return mountable;
  mountable = false;
  if (process.getuid?.() !== 0 || process.env.OTM_TEST_NO_MOUNT === '1') return mountable;
  const probe = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-mount-probe-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe], { stdio: 'ignore' });
    execFileSync('umount', [probe], { stdio: 'ignore' });
    mountable = true;
  } catch {
    // not allowed here
  } finally {
    fs.rmSync(probe, { recursive: true, force: true });
  }
  return mountable;
}

/** Mounts a tmpfs of `size` (mount's syntax: `512k`, `8m`) on a new folder; `unmount` removes it. */
export function mountTmpfs(size: string): { dir: string; unmount: () => void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-tmpfs-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir]);
  return {
    dir,
    unmount: () => {
      execFileSync('umount', ['-l', dir]);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
