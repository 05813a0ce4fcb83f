/**
 * API keys made with `otm keys` while `otm serve` runs on the same data folder (the command opens
 * the folder's LMDB environment beside the service: packages/embedded/src/api-keys.ts): taken at
 * once, with their tenant and per-kind scopes; refused once expired, and within 6 s of a revocation.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { OTM_BIN, startServe, stop, type Running } from './process.js';

const run = promisify(execFile);
let dir: string;
let svc: Running;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-keys-'));
  svc = await startServe({ OTM_DATA_DIR: dir, OTM_TOKENS: 'static-writer-acme:acme:read+write' });
}, 30_000);
afterAll(async () => {
  if (svc) await stop(svc);
  fs.rmSync(dir, { recursive: true, force: true });
});

async function keys(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [OTM_BIN, 'keys', ...args], {
      env: { PATH: process.env.PATH ?? '', OTM_DATA_DIR: dir },
    });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}

const call = (key: string, method: string, url: string, body?: unknown) =>
  fetch(`${svc.url}${url}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });

const event = {
  eventType: 'locationUpdateEvent',
  lifecycle: 'actual',
  creationDate: '2026-03-01T10:00:00Z',
  geoReference: { type: 'latLonPointGeoReference', lat: 52.37, lon: 4.89 },
};

it('create, use with per-kind scopes, list without the key, revoke: refused within 6 s', async () => {
  const made = await keys('create', '--tenant', 'acme', '--scopes', 'write:events,read:vehicles', '--name', 'unit 7');
  expect(made.code).toBe(0);
  const key = made.stdout.trim();
  expect(key).toMatch(/^otm_[A-Za-z0-9_-]{43}$/);

  expect((await call(key, 'PUT', '/api/v5/events', event)).status).toBe(200);
  const trip = await call(key, 'PUT', '/api/v5/trips', { entityType: 'trip', name: 'x' });
  expect(trip.status).toBe(403);
  expect(await trip.json()).toEqual([{ type: 'forbidden', message: "this token lacks the 'write' scope (or 'write:trips')" }]);
  expect((await call(key, 'GET', '/api/v5/vehicles')).status).toBe(200);
  expect((await call(key, 'GET', '/api/v5/trips')).status).toBe(403);
  // Its tenant: what it wrote, a static token of acme reads.
  const put = await call(key, 'PUT', '/api/v5/events', event);
  const id = ((await put.json()) as { id: string }).id;
  expect((await call('static-writer-acme', 'GET', `/api/v5/events/${id}`)).status).toBe(200);

  const listed = await keys('list', '--tenant', 'acme');
  expect(listed.code).toBe(0);
  const lines = listed.stdout.trim().split('\n');
  expect(lines[0]).toBe('id\tname\ttenant\tscopes\tcreated\texpires\trevoked');
  expect(lines).toHaveLength(2);
  const [keyId, name, tenant, scopes, , expires, revoked] = lines[1]!.split('\t');
  expect({ name, tenant, scopes, expires, revoked }).toEqual({
    name: 'unit 7',
    tenant: 'acme',
    scopes: 'write:events,read:vehicles',
    expires: '-',
    revoked: '-',
  });
  expect(listed.stdout).not.toContain(key);
  expect((await keys('list', '--tenant', 'globex')).stdout.trim().split('\n')).toHaveLength(1);

  const revoked1 = await keys('revoke', keyId!);
  expect(revoked1.code).toBe(0);
  const since = Date.now();
  let status = 200;
  while (status !== 401 && Date.now() - since < 8_000) {
    status = (await call(key, 'GET', '/api/v5/vehicles')).status;
    if (status !== 401) await new Promise((r) => setTimeout(r, 200));
  }
  expect(status).toBe(401);
  expect(Date.now() - since).toBeLessThanOrEqual(6_000);
  const body = (await (await call(key, 'GET', '/api/v5/vehicles')).json()) as Array<{ message: string }>;
  expect(body[0]!.message).toMatch(/revoked/);
  expect((await keys('list')).stdout).toMatch(new RegExp(`${keyId}\\t.*\\t\\d{4}-\\d{2}-\\d{2}T[^\\t]+$`, 'm'));
}, 30_000);

it('refuses an expired key, an unknown one, and bad arguments', async () => {
  // Far enough ahead that the command, which refuses a time in the past, starts before it on a busy machine.
  const soon = new Date(Date.now() + 8_000).toISOString();
  const made = await keys('create', '--tenant', 'acme', '--scopes', 'read', '--expires', soon);
  expect(made.code).toBe(0);
  const key = made.stdout.trim();
  expect((await call(key, 'GET', '/api/v5/vehicles')).status).toBe(200);
  await new Promise((r) => setTimeout(r, Date.parse(soon) - Date.now() + 100));
  const res = await call(key, 'GET', '/api/v5/vehicles');
  expect(res.status).toBe(401);
  expect(((await res.json()) as Array<{ message: string }>)[0]!.message).toMatch(/expired/);

  expect((await call(`otm_${'A'.repeat(43)}`, 'GET', '/api/v5/vehicles')).status).toBe(401);
  expect((await keys('create', '--tenant', 'acme', '--scopes', 'write:parcels')).code).toBe(2);
  expect((await keys('create', '--tenant', 'acme', '--scopes', 'read', '--expires', '2001-01-01T00:00:00Z')).code).toBe(2);
  expect((await keys('create', '--scopes', 'read')).code).toBe(2);
  expect((await keys('revoke', '00000000-0000-4000-8000-000000000000')).code).toBe(1);
}, 30_000);
