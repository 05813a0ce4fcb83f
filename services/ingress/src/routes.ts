import type { FastifyInstance } from 'fastify';
import { invalidDocument, jsonOf } from '@otm/core';
import { JSON_TYPE, kindParam, onlyQuery, uuidParam } from '@otm/http';
import { refusal, type BulkFormat } from './bulk-check.js';
import type { BulkChecker } from './bulk-checker.js';
import type { BulkResult, Ingress } from './ingress.js';

export interface IngressRouteOptions {
  /** Largest bulk body (bytes) and most documents in one bulk request. */
  readonly bulkLimit: number;
  readonly bulkMaxItems: number;
  readonly maxDepth: number;
  /** Where bulk bodies are parsed and checked (the event loop, or worker threads). */
  readonly bulkChecker: BulkChecker;
}

/** A bulk body as it came: parsed and checked by the BulkChecker, not by the content-type parser. */
interface RawBulkBody {
  readonly format: BulkFormat;
  readonly body: Buffer;
}

/**
 * The answer to a bulk request as JSON text: `{"accepted":N,"rejected":M,"items":[…]}` with, per
 * item in order, `{"index":i,"id":…}` or `{"index":i,"errors":[…]}`. Written directly rather than
 * as an object an item for the serializer: a request holds thousands of items.
 */
export function bulkAnswer({ count, ids, errors }: BulkResult): string {
  const items: string[] = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    const e = errors.get(i);
    items[i] = e === undefined ? `{"index":${i},"id":${JSON.stringify(ids[i])}}` : `{"index":${i},"errors":${JSON.stringify(e)}}`;
  }
  return `{"accepted":${count - errors.size},"rejected":${errors.size},"items":[${items.join(',')}]}`;
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
  // The bulk route in a scope of its own, whose content-type parsers keep the body as bytes: the
  // BulkChecker parses it, on a worker thread when it is large.
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    const raw = (format: BulkFormat) => (_req: unknown, body: Buffer, done: (err: Error | null, body?: RawBulkBody) => void) =>
      done(null, { format, body });
    scope.addContentTypeParser(/^application\/([a-z0-9.-]+\+)?json$/i, { parseAs: 'buffer' }, raw('json'));
    scope.addContentTypeParser(/^application\/(x-)?ndjson$/i, { parseAs: 'buffer' }, raw('ndjson'));

    scope.post<{ Params: KindParams; Body: RawBulkBody | undefined }>(
      '/api/v5/bulk/:kind',
      { config: { scope: 'write' }, bodyLimit: opts.bulkLimit },
      async (req, reply) => {
        const kind = kindParam(req.params.kind, req.url, req.method);
        const q = onlyQuery(req.query, ['atomic']);
        if (q.atomic !== undefined && q.atomic !== 'true' && q.atomic !== 'false') {
          throw invalidDocument([{ type: 'invalidField', field: 'atomic', message: 'must be true or false' }]);
        }
        const { format, body } = req.body ?? { format: 'json', body: Buffer.alloc(0) };
        const checked = await opts.bulkChecker.check({ body, format, kind, maxDepth: opts.maxDepth, maxItems: opts.bulkMaxItems });
        if (!checked.ok) throw refusal(checked);
        const result = await ingress.bulk(req.principal!.tenant, kind, checked, q.atomic === 'true');
        return reply.code(200).type(JSON_TYPE).send(bulkAnswer(result));
      },
    );
  });

  app.put<{ Params: KindParams }>('/api/v5/:kind', { config: { scope: 'write' } }, async (req, reply) => {
    const kind = kindParam(req.params.kind, req.url, req.method);
    onlyQuery(req.query, []);
    const { key, doc } = await ingress.put(req.principal!.tenant, kind, req.body, req.sentBody);
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
