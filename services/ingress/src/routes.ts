import type { FastifyInstance } from 'fastify';
import { OtmServiceError, exceedsDepthOf, invalidDocument, jsonOf } from '@otm/core';
import { JSON_TYPE, kindParam, onlyQuery, uuidParam } from '@otm/http';
import type { BulkItem, Ingress } from './ingress.js';

export interface IngressRouteOptions {
  /** Largest bulk body (bytes) and most documents in one bulk request. */
  readonly bulkLimit: number;
  readonly bulkMaxItems: number;
  readonly maxDepth: number;
}

/** The documents of a bulk body: a JSON array, or NDJSON (one document per line, blank lines skipped). */
function bulkItems(body: unknown, maxDepth: number): BulkItem[] {
  if (Array.isArray(body)) return body.map((doc) => ({ doc }));
  if (typeof body === 'object' && body !== null && typeof (body as { ndjson?: unknown }).ndjson === 'string') {
    const items: BulkItem[] = [];
    for (const line of (body as { ndjson: string }).ndjson.split('\n')) {
      if (line.trim() === '') continue;
      try {
        const doc: unknown = JSON.parse(line);
        items.push(
          exceedsDepthOf(doc, maxDepth)
            ? { error: { type: 'invalidJson', message: `the document nests objects and arrays deeper than ${maxDepth} levels` } }
            : { doc },
        );
      } catch (e) {
        items.push({ error: { type: 'invalidJson', message: `the line is not valid JSON: ${(e as Error).message}` } });
      }
    }
    return items;
  }
  throw invalidDocument([{ type: 'invalidJson', message: 'a bulk body is a JSON array of documents, or NDJSON (application/x-ndjson)' }]);
}

interface KindParams {
  kind: string;
}
interface EntityParams extends KindParams {
  uuid: string;
}

/**
 * `PUT /api/v5/<kind>`, `DELETE /api/v5/<kind>/{UUID}`, and the extension
 * `POST /api/v5/bulk/<kind>[?atomic=true]`.
 */
export function registerIngressRoutes(app: FastifyInstance, ingress: Ingress, opts: IngressRouteOptions): void {
  app.post<{ Params: KindParams }>('/api/v5/bulk/:kind', { config: { scope: 'write' }, bodyLimit: opts.bulkLimit }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    const q = onlyQuery(req.query, ['atomic']);
    if (q.atomic !== undefined && q.atomic !== 'true' && q.atomic !== 'false') {
      throw invalidDocument([{ type: 'invalidField', field: 'atomic', message: 'must be true or false' }]);
    }
    const items = bulkItems(req.body, opts.maxDepth);
    if (items.length > opts.bulkMaxItems) {
      throw new OtmServiceError('payloadTooLarge', 413, 'too many documents', {
        items: [{ type: 'payloadTooLarge', message: `a bulk request holds at most ${opts.bulkMaxItems} documents, got ${items.length}` }],
      });
    }
    const results = await ingress.bulk(req.principal!.tenant, kind, items, q.atomic === 'true');
    const rejected = results.filter((r) => 'errors' in r).length;
    return reply.code(200).send({
      accepted: results.length - rejected,
      rejected,
      items: results.map((r) => ('errors' in r ? { index: r.index, errors: r.errors } : { index: r.index, id: r.id })),
    });
  });

  app.put<{ Params: KindParams }>('/api/v5/:kind', { config: { scope: 'write' } }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    onlyQuery(req.query, []);
    const { key, doc } = await ingress.put(req.principal!.tenant, kind, req.body);
    // The answer is the accepted document; its text is made once and reused by an in-process worker.
    return reply.code(200).header('location', `/api/v5/${kind}/${key}`).type(JSON_TYPE).send(jsonOf(doc));
  });

  app.delete<{ Params: EntityParams }>('/api/v5/:kind/:uuid', { config: { scope: 'write' } }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    const key = uuidParam(req.params.uuid);
    onlyQuery(req.query, []);
    await ingress.delete(req.principal!.tenant, kind, key);
    return reply.code(204).send();
  });
}
