/**
 * Every example document of the OTM 5.9 model file, put to its kind over HTTP, read back
 * unchanged (apart from a generated id), deleted (204) and gone (404). Invalid examples get a
 * precise 400 and store nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KINDS } from '@otm/model';
import { auth, json, MODEL_EXAMPLES as examples, startService, type TestService } from './helpers.js';

const documents = examples.filter((e) => e.kind !== null);

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc.close());

describe('the model examples over HTTP', () => {
  it('include a document of every kind but consignments (the model file has no consignment example)', () => {
    const kinds = new Set(documents.map((e) => e.kind));
    expect(KINDS.map((k) => k.segment).filter((k) => !kinds.has(k))).toEqual(['consignments']);
  });

  it.each(documents.filter((e) => e.valid).map((e) => [e.name, e] as const))('%s: put, get unchanged, delete, gone', async (_name, ex) => {
    const put = await svc.app.inject({
      method: 'PUT',
      url: `/api/v5/${ex.kind}`,
      headers: { ...json, ...auth() },
      payload: JSON.stringify(ex.document),
    });
    expect(put.statusCode, put.body).toBe(200);
    const stored = put.json();
    const expected = ex.document.id === undefined ? { ...ex.document, id: stored.id } : ex.document;
    expect(stored).toEqual(expected);
    const location = put.headers.location as string;
    const got = await svc.app.inject({ method: 'GET', url: location, headers: auth() });
    expect(got.statusCode).toBe(200);
    expect(got.json()).toEqual(expected);
    expect((await svc.app.inject({ method: 'DELETE', url: location, headers: auth() })).statusCode).toBe(204);
    expect((await svc.app.inject({ method: 'GET', url: location, headers: auth() })).statusCode).toBe(404);
  });

  it.each(documents.filter((e) => !e.valid).map((e) => [e.name, e] as const))('%s: precise 400, nothing stored', async (_name, ex) => {
    const put = await svc.app.inject({
      method: 'PUT',
      url: `/api/v5/${ex.kind}`,
      headers: { ...json, ...auth() },
      payload: JSON.stringify(ex.document),
    });
    expect(put.statusCode).toBe(400);
    const items = put.json<Array<{ type: string; field?: string }>>();
    expect(items.length).toBeGreaterThan(0);
    for (const item of items) expect(['missingField', 'invalidField']).toContain(item.type);
    if (typeof ex.document.id === 'string') {
      const got = await svc.app.inject({ method: 'GET', url: `/api/v5/${ex.kind}/${ex.document.id}`, headers: auth() });
      expect(got.statusCode).toBe(404);
    }
  });

  it('attachTransportEquipment: exactly one missingField for the transport equipment type', async () => {
    const ex = examples.find((e) => e.name === 'attachTransportEquipment')!;
    const put = await svc.app.inject({
      method: 'PUT',
      url: '/api/v5/actions',
      headers: { ...json, ...auth() },
      payload: JSON.stringify(ex.document),
    });
    expect(put.statusCode).toBe(400);
    expect(put.json()).toEqual([{ type: 'missingField', field: expect.stringMatching(/\.type$/), message: expect.any(String) }]);
  });
});
