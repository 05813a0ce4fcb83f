/**
 * POST /api/v5/validate/{kind}: checks a document exactly as a PUT of it is checked on its own
 * (the model's rules, a non-empty id), without storing it. The fleet page's validator and
 * `otm validate` give the same errors. Not checked here: what a PUT of an update or association
 * event also checks against stored entities.
 */
import type { FastifyInstance } from 'fastify';
import { JSON_TYPE, kindParam, onlyQuery } from '@otm/http';
import { checkDocument } from './check-document.js';

export function registerValidateRoute(app: FastifyInstance): void {
  app.post<{ Params: { kind: string } }>('/api/v5/validate/:kind', { config: { scope: 'read' } }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    onlyQuery(req.query, []);
    checkDocument(kind, req.body); // throws the 400 with the model's error items
    return reply
      .code(200)
      .type(JSON_TYPE)
      .send(JSON.stringify({ valid: true }));
  });
}
