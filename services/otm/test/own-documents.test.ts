import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateEntity, type KindSegment } from '@otm/model';
import { oneOfEachKind } from '../../../test/fixtures/documents.js';
import { auth, json, startService, type TestService } from './helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc.close());

describe('our own document of every kind', () => {
  it.each(Object.entries(oneOfEachKind))('%s: valid, stored, read back, deleted', async (kind, doc) => {
    expect(validateEntity(kind as KindSegment, doc)).toEqual([]);
    const put = await svc.app.inject({
      method: 'PUT',
      url: `/api/v5/${kind}`,
      headers: { ...json, ...auth() },
      payload: JSON.stringify(doc),
    });
    expect(put.statusCode, put.body).toBe(200);
    expect(put.json()).toEqual(doc);
    const url = `/api/v5/${kind}/${doc.id as string}`;
    expect((await svc.app.inject({ method: 'GET', url, headers: auth() })).json()).toEqual(doc);
    expect((await svc.app.inject({ method: 'DELETE', url, headers: auth() })).statusCode).toBe(204);
    expect((await svc.app.inject({ method: 'GET', url, headers: auth() })).statusCode).toBe(404);
  });
});
