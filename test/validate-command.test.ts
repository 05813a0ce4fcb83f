/** `otm validate` prints the same error items as the API answers for the same document. */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, json, startService, type TestService } from '../services/otm/test/helpers.js';
import { OTM_BIN } from './process.js';

const run = promisify(execFile);
let svc: TestService;
let dir: string;
beforeAll(async () => {
  svc = await startService();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-validate-'));
});
afterAll(async () => {
  await svc.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const cases: Array<[string, string, string]> = [
  ['diesel', 'vehicles', '{"entityType":"vehicle","fuel":"Diesel","licencePlate":"AB-12-CD"}'],
  ['missing geoReference', 'locations', '{"entityType":"location","name":"nowhere"}'],
  ['bad action', 'actions', '{"actionType":"stop","lifecycle":"someday","sequenceNr":"one"}'],
  ['malformed', 'trips', '{"entityType":"trip",'],
  ['valid', 'trips', '{"entityType":"trip","name":"ok"}'],
];

describe('otm validate', () => {
  it.each(cases)('%s: the same items as PUT answers', async (name, kind, text) => {
    const file = path.join(dir, `${name.replace(/\s/g, '-')}.json`);
    fs.writeFileSync(file, text);
    const res = await svc.app.inject({ method: 'PUT', url: `/api/v5/${kind}`, headers: { ...json, ...auth() }, payload: text });
    const cli = await run(process.execPath, [OTM_BIN, 'validate', '--kind', kind, file]).then(
      (r) => ({ code: 0, out: r.stdout }),
      (e: { code: number; stdout: string }) => ({ code: e.code, out: e.stdout }),
    );
    const result = JSON.parse(cli.out) as { valid: boolean; errors: unknown[] };
    if (res.statusCode === 200) {
      expect(cli.code).toBe(0);
      expect(result).toMatchObject({ valid: true, errors: [] });
    } else {
      expect(res.statusCode).toBe(400);
      expect(cli.code).toBe(1);
      expect(result.errors).toEqual(res.json());
    }
  });

  it('finds the kind of a document from its discriminators', async () => {
    const file = path.join(dir, 'event.json');
    fs.writeFileSync(file, '{"eventType":"locationUpdateEvent","geoReference":{"type":"latLonPointGeoReference","lat":52,"lon":"east"}}');
    const out = await run(process.execPath, [OTM_BIN, 'validate', file]).catch((e: { stdout: string }) => ({ stdout: e.stdout }));
    const r = JSON.parse(out.stdout) as { kind: string; errors: Array<{ field: string }> };
    expect(r.kind).toBe('events');
    expect(r.errors).toEqual([expect.objectContaining({ type: 'invalidField', field: 'geoReference.lon' })]);
  });
});
