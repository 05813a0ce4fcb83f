/**
 * Durability of the embedded deployment: every write answered 200 is still there after the
 * process is killed with SIGKILL in the middle of a stream of writes and started again.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe, stop, type Running } from './process.js';

const TOKEN = 'crash-test-token';
const env = (dataDir: string) => ({ OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:acme:read+write` });
const headers = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const running: Running[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const r of running) await stop(r, 'SIGKILL');
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

describe('kill -9 after a 200', () => {
  it('loses no acknowledged write', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-crash-'));
    dirs.push(dataDir);
    const first = await startServe(env(dataDir));
    running.push(first);

    const acknowledged = new Map<string, unknown>();
    let killed = false;
    const writer = async (w: number) => {
      for (let i = 0; !killed && i < 2000; i++) {
        // Half entities (entity store), half telemetry events (event store).
        const [kind, doc] =
          i % 2 === 0
            ? ['vehicles', { entityType: 'vehicle', name: `truck ${w}-${i}` }]
            : [
                'events',
                {
                  eventType: 'locationUpdateEvent',
                  lifecycle: 'actual',
                  geoReference: { type: 'latLonPointGeoReference', lat: 52 + w / 100, lon: 4 + i / 1000 },
                },
              ];
        try {
          const res = await fetch(`${first.url}/api/v5/${kind}`, { method: 'PUT', headers, body: JSON.stringify(doc) });
          if (res.status === 200) {
            const body = (await res.json()) as { id: string };
            acknowledged.set(`${kind}/${body.id}`, body);
          }
        } catch {
          return; // the connection died with the process: that write was never acknowledged
        }
      }
    };
    const writers = Array.from({ length: 16 }, (_, w) => writer(w));
    while (acknowledged.size < 300) await new Promise((r) => setTimeout(r, 5));
    killed = true;
    first.child.kill('SIGKILL');
    await Promise.all(writers);
    await stop(first);

    const second = await startServe(env(dataDir));
    running.push(second);
    let missing = 0;
    for (const [path, body] of acknowledged) {
      const res = await fetch(`${second.url}/api/v5/${path}`, { headers });
      if (res.status !== 200) missing++;
      else expect(await res.json()).toEqual(body);
    }
    expect(missing).toBe(0);
    expect(acknowledged.size).toBeGreaterThanOrEqual(300);
    await stop(second);
  });
});

describe('a generated token', () => {
  it('is created, kept, named (not printed: the output is not a terminal) and used again after a restart', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-token-'));
    dirs.push(dataDir);
    const first = await startServe({ OTM_DATA_DIR: dataDir });
    running.push(first);
    const file = path.join(dataDir, 'token');
    const token = fs.readFileSync(file, 'utf8').split(':')[0]!;
    expect(token.length).toBeGreaterThanOrEqual(16);
    expect(first.stdout()).toContain('created');
    expect(first.stdout()).toContain(file);
    expect(first.stdout()).not.toContain(token);
    expect((fs.statSync(path.join(dataDir, 'token')).mode & 0o777).toString(8)).toBe('600');
    const put = await fetch(`${first.url}/api/v5/vehicles`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"entityType":"vehicle"}',
    });
    expect(put.status).toBe(200);
    await stop(first);
    const second = await startServe({ OTM_DATA_DIR: dataDir });
    running.push(second);
    expect(second.stdout()).not.toContain(token);
    expect(second.stdout()).toContain('using');
    const get = await fetch(`${second.url}/api/v5/vehicles/${((await put.json()) as { id: string }).id}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(get.status).toBe(200);
    await stop(second);
  });

  it('a bad setting stops the start with the name of the variable', async () => {
    await expect(startServe({ OTM_TOKENS: 'x:y', OTM_DATA_DIR: os.tmpdir() })).rejects.toThrow(/OTM_TOKENS/);
  });
});
