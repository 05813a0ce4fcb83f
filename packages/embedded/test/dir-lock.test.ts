/**
 * One process at a time in a data folder (dir-lock.ts): a second open is refused while the first
 * runs, a lock whose owner is gone or whose process id now belongs to another process is taken
 * over, and a second `otm serve` on the folder stops at start with the first one's process id.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openEmbeddedStores } from '../src/index.js';
import { DataDirLockedError, LOCK_FILE } from '../src/dir-lock.js';
import { startServe, stop, type Running } from '../../../test/process.js';

const dirs: string[] = [];
const children: Array<{ kill: () => void }> = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill();
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});
const tmp = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-dir-lock-'));
  dirs.push(dir);
  return dir;
};
const startOf = (pid: number) => fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[19];
const writeLock = (dir: string, owner: object) => fs.writeFileSync(path.join(dir, LOCK_FILE), JSON.stringify(owner));

describe('data folder lock', () => {
  it('refuses a second open of a folder while the first is open, and allows it once closed', async () => {
    const dir = tmp();
    const first = openEmbeddedStores(dir);
    expect(() => openEmbeddedStores(dir)).toThrow(DataDirLockedError);
    expect(JSON.parse(fs.readFileSync(path.join(dir, LOCK_FILE), 'utf8')).pid).toBe(process.pid);
    await first.close();
    expect(fs.existsSync(path.join(dir, LOCK_FILE))).toBe(false);
    await openEmbeddedStores(dir).close();
  });

  it('takes over a lock whose owner is gone, and one whose process id another process has now', async () => {
    const dir = tmp();
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
    writeLock(dir, { pid: Number(gone.stdout.toString()), start: '1' });
    await openEmbeddedStores(dir).close();

    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    children.push(other);
    writeLock(dir, { pid: other.pid, start: String(Number(startOf(other.pid!)) - 1) }); // an earlier process with that id
    await openEmbeddedStores(dir).close();
  });

  it('refuses a folder whose owner runs, naming it', async () => {
    const dir = tmp();
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    children.push(other);
    writeLock(dir, { pid: other.pid, start: startOf(other.pid!) });
    expect(() => openEmbeddedStores(dir)).toThrow(new RegExp(`another otm process \\(pid ${other.pid}\\) has it open`));
    expect(fs.existsSync(path.join(dir, 'events'))).toBe(false); // nothing of the store was touched
  });

  it('a second otm serve on the same folder stops at start; the first goes on', async () => {
    const dir = tmp();
    const env = { OTM_DATA_DIR: dir, OTM_TOKENS: 'lock-test-token:acme:read+write' };
    const first: Running = await startServe(env);
    children.push({ kill: () => first.child.kill('SIGKILL') });
    await expect(startServe(env)).rejects.toThrow(
      new RegExp(`exited with 1.*in use: another otm process \\(pid ${first.child.pid}\\)`, 's'),
    );
    const res = await fetch(`${first.url}/healthz`);
    expect(res.status).toBe(200);
    await stop(first);
    // Stopped cleanly: the lock is gone, and a new start takes the folder.
    expect(fs.existsSync(path.join(dir, LOCK_FILE))).toBe(false);
    const again = await startServe(env);
    await stop(again);
  });
});
