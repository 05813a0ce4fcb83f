/**
 * `otm serve` as a container runs it: standard output is a pipe that ends up in logs. A generated
 * token is not written there (only the file that holds it); on a terminal it is. The connection
 * limits of the environment reach the listening server.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { authNotice } from '../../services/otm/src/cli.js';
import { startServe, stop, type Running } from '../process.js';

const running: Running[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const r of running) await stop(r);
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

describe('otm serve with standard output piped', () => {
  it('names the file of a generated token without printing the token, and applies the connection limits', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-serve-'));
    dirs.push(dataDir);
    const serve = await startServe({ OTM_DATA_DIR: dataDir, OTM_HEADERS_TIMEOUT_MS: '300', OTM_REQUEST_TIMEOUT_MS: '600' });
    running.push(serve);
    const file = path.join(dataDir, 'token');
    const token = fs.readFileSync(file, 'utf8').split(':')[0]!;
    expect(token.length).toBeGreaterThan(10);
    // The listening line comes first; wait for the rest of what start prints.
    const deadline = Date.now() + 5000;
    while (!serve.stdout().includes(file) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(serve.stdout()).toContain(file);
    expect(serve.stdout()).not.toContain(token);

    // The token from the file works.
    const res = await fetch(`${serve.url}/api/v5/vehicles`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"entityType":"vehicle"}',
    });
    expect(res.status).toBe(200);

    // A connection that sends nothing is closed once OTM_HEADERS_TIMEOUT_MS has passed.
    const { port } = new URL(serve.url);
    const closedAfter = await new Promise<number>((resolve) => {
      const started = Date.now();
      const socket = net.connect(Number(port), '127.0.0.1');
      socket.on('error', () => {});
      socket.resume(); // read what comes, so that the end of the connection is seen
      socket.on('close', () => resolve(Date.now() - started));
      setTimeout(() => socket.destroy(), 5000);
    });
    expect(closedAfter).toBeLessThan(3000);
  });
});

describe('the notice of a generated token', () => {
  const kept = { token: 's3cret-generated-token', file: '/data/token', created: true };
  it('holds the token on a terminal', () => {
    expect(authNotice(kept, true)).toContain('Authorization: Bearer s3cret-generated-token');
  });
  it('names only the file elsewhere', () => {
    const text = authNotice(kept, false);
    expect(text).toContain('/data/token');
    expect(text).not.toContain('s3cret-generated-token');
  });
});
