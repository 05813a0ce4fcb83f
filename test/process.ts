/** Starts the built `otm` command as a child process, for tests of the real thing. */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

export const OTM_BIN = fileURLToPath(new URL('../services/otm/bin/otm.js', import.meta.url));
const DIST = fileURLToPath(new URL('../services/otm/dist/cli.js', import.meta.url));

export interface Running {
  readonly child: ChildProcess;
  readonly url: string;
  readonly stdout: () => string;
}

/** Runs `otm serve` on a free loopback port; resolves once it listens. `nodeArgs`: see startOtm. */
export function startServe(env: Record<string, string>, timeoutMs = 20_000, nodeArgs: readonly string[] = []): Promise<Running> {
  return startOtm(['serve'], env, timeoutMs, nodeArgs);
}

/**
 * Runs an `otm` command that serves HTTP (serve, ingress, query, worker) on a free loopback port.
 * The child gets only the environment given (and PATH), so that tests do not depend on the shell;
 * `OTM_CHILD_NODE_OPTIONS` is the way in for profiling flags (it becomes the child's NODE_OPTIONS,
 * e.g. `--perf-basic-prof` for `perf`, or `--require` of a profiler hook). Node flags that
 * NODE_OPTIONS does not take (`--cpu-prof`, `--single-threaded-gc`) go before the script: the
 * caller's `nodeArgs`, then those of `OTM_CHILD_NODE_ARGS` (space-separated).
 */
export async function startOtm(
  args: string[],
  env: Record<string, string>,
  // Generous: on a loaded machine (CI runs test files side by side) loading the modules alone takes seconds.
  timeoutMs = 60_000,
  nodeArgs: readonly string[] = [],
): Promise<Running> {
  if (!fs.existsSync(DIST)) throw new Error('services/otm/dist is missing: run `npm run build` (npm test does)');
  const fromEnv = process.env.OTM_CHILD_NODE_ARGS?.split(' ').filter((a) => a !== '') ?? [];
  const child = spawn(process.execPath, [...nodeArgs, ...fromEnv, OTM_BIN, ...args], {
    env: {
      PATH: process.env.PATH ?? '',
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'warn',
      ...(process.env.OTM_CHILD_NODE_OPTIONS ? { NODE_OPTIONS: process.env.OTM_CHILD_NODE_OPTIONS } : {}),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Not left behind to come up later beside the next try.
      child.kill('SIGKILL');
      reject(new Error(`otm ${args[0]} did not start: ${out} ${err}`));
    }, timeoutMs);
    const check = () => {
      const m = /listening on (http:\/\/[^\s]+)/.exec(out);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stdout.on('data', check);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`otm ${args[0]} exited with ${code}: ${out} ${err}`));
    });
  });
  return { child, url, stdout: () => out };
}

export function stop(r: Running, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (r.child.exitCode !== null || r.child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    r.child.once('exit', () => resolve());
    r.child.kill(signal);
  });
}
