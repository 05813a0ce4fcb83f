import type { FastifyInstance } from 'fastify';
import { LIFECYCLES, invalidDocument, isLifecycle, lifecycleRank, type StoredDocument } from '@otm/core';
import { JSON_TYPE, kindParam, onlyQuery, uuidParam } from '@otm/http';
import type { Query } from './query.js';

interface EntityParams {
  kind: string;
  uuid: string;
}

/**
 * The answer's bytes, kept beside the document for as long as the store's cache keeps the document:
 * a string answer is copied into one string with the headers and encoded to UTF-8 on every send
 * (three passes over a 3.5 KB trip), a Buffer is written as it is.
 */
const answers = new WeakMap<StoredDocument, Buffer>();
function answerOf(doc: StoredDocument): Buffer {
  if (doc.bytes !== undefined) return doc.bytes;
  let bytes = answers.get(doc);
  if (bytes === undefined) {
    bytes = Buffer.from(doc.json);
    answers.set(doc, bytes);
  }
  return bytes;
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
        throw invalidDocument([
          { type: 'invalidField', field: 'lifecycle', message: `must be one of ${LIFECYCLES.join(', ')}` },
        ]);
      }
      rank = lifecycleRank(q.lifecycle);
    }
    const doc = await query.get(req.principal!.tenant, kind, key, rank);
    return reply.code(200).type(JSON_TYPE).send(answerOf(doc));
  });
}
