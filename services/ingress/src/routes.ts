import type { FastifyInstance } from 'fastify';
import { kindParam, onlyQuery, uuidParam } from '@otm/http';
import type { Ingress } from './ingress.js';

interface KindParams {
  kind: string;
}
interface EntityParams extends KindParams {
  uuid: string;
}

/** `PUT /api/v5/<kind>` and `DELETE /api/v5/<kind>/{UUID}`. */
export function registerIngressRoutes(app: FastifyInstance, ingress: Ingress): void {
  app.put<{ Params: KindParams }>('/api/v5/:kind', { config: { scope: 'write' } }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    onlyQuery(req.query, []);
    const { key, doc } = await ingress.put(req.principal!.tenant, kind, req.body);
    return reply.code(200).header('location', `/api/v5/${kind}/${key}`).send(doc);
  });

  app.delete<{ Params: EntityParams }>('/api/v5/:kind/:uuid', { config: { scope: 'write' } }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    const key = uuidParam(req.params.uuid);
    onlyQuery(req.query, []);
    await ingress.delete(req.principal!.tenant, kind, key);
    return reply.code(204).send();
  });
}
