import type { FastifyInstance } from 'fastify';
import { LIFECYCLES, invalidDocument, isLifecycle, lifecycleRank } from '@otm/core';
import { JSON_TYPE, kindParam, onlyQuery, uuidParam } from '@otm/http';
import type { Query } from './query.js';

interface EntityParams {
  kind: string;
  uuid: string;
}

/** `GET /api/v5/<kind>/{UUID}[?lifecycle=<lifecycle>]`. */
export function registerQueryRoutes(app: FastifyInstance, query: Query): void {
  app.get<{ Params: EntityParams }>('/api/v5/:kind/:uuid', { config: { scope: 'read' } }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    const key = uuidParam(req.params.uuid);
    const q = onlyQuery(req.query, ['lifecycle']);
    let rank: number | undefined;
    if (q.lifecycle !== undefined) {
      if (!isLifecycle(q.lifecycle)) {
        throw invalidDocument([{ type: 'invalidField', field: 'lifecycle', message: `must be one of ${LIFECYCLES.join(', ')}` }]);
      }
      rank = lifecycleRank(q.lifecycle);
    }
    const doc = await query.get(req.principal!.tenant, kind, key, rank);
    // The stored bytes when the store has them (its cache, Redis), else the text.
    return reply
      .code(200)
      .type(JSON_TYPE)
      .send(doc.bytes ?? doc.json);
  });
}
