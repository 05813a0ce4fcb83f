import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KINDS } from '@otm/model';
import { startService, type TestService } from './helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc.close());

describe('GET /api/v5/openapi.json', () => {
  it('describes every path the service answers, with every $ref resolvable', async () => {
    const res = await svc.app.inject({ method: 'GET', url: '/api/v5/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toBe('3.1.0');
    for (const k of KINDS) {
      expect(doc.paths[`/api/v5/${k.segment}`].put.responses).toHaveProperty('413');
      expect(Object.keys(doc.paths[`/api/v5/${k.segment}/{UUID}`])).toEqual(['get', 'delete']);
      expect(doc.paths[`/api/v5/bulk/${k.segment}`].post.requestBody.content).toHaveProperty('application/x-ndjson');
    }
    expect(doc.paths['/api/v5/trips'].put.operationId).toBe('createTrip');
    const missing: string[] = [];
    const walk = (v: unknown): void => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object') {
        for (const [key, val] of Object.entries(v)) {
          if (key === '$ref' && typeof val === 'string') {
            const name = val.replace('#/components/schemas/', '');
            if (!(name in doc.components.schemas)) missing.push(val);
          } else walk(val);
        }
      }
    };
    walk(doc);
    expect(missing).toEqual([]);
  });
});
