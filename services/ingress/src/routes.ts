/**
 * The ingress's route groups: the model's PUT and DELETE of each kind (`entityWrites`), and the
 * bulk extension (`bulkWrites`), each a fastify plugin. What a bulk
 * request may cost is set by its limits, not by what it holds: its body is read up to the bulk
 * limit both as sent and decompressed, its documents are counted before any is parsed
 * (bulk/check-body.ts), and its answer is bounded (`bulkAnswer`).
 */
import zlib from 'node:zlib';
import type { FastifyError, FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { KINDS, MODEL, type KindSegment, type OtmError } from '@otm/model';
import { OtmServiceError, invalidDocument, jsonOf } from '@otm/core';
import {
  CREDENTIAL_UNCHECKED,
  JSON_TYPE,
  KIND_EXAMPLES,
  NO_QUERY,
  badRequest,
  capital,
  clip,
  contentCodings,
  emptyAnswer,
  errorAnswer,
  jsonAnswer,
  jsonMediaType,
  query,
  ref,
  uuidParams,
} from '@otm/http';
import { cappedErrors, refusal, type BulkFormat } from './bulk/check-body.js';
import type { BulkChecker } from './bulk/thread-pool.js';
import type { BulkResult, Ingress } from './ingress.js';

export interface EntityWriteOptions {
  readonly ingress: Ingress;
}

export interface BulkWriteOptions {
  readonly ingress: Ingress;
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

/** Error items one bulk answer lists in all, at most; and the most bytes they take. */
const ANSWER_ERRORS = 1_000;
const ANSWER_ERROR_BYTES = 262_144;

/** What a rejected item gets once the answer's error items are used up: the first such item, and the others. */
const UNLISTED_FIRST = JSON.stringify([
  {
    type: 'invalidField',
    field: '$',
    message: `problems not listed: an answer lists those of its first rejected documents only (at most ${ANSWER_ERRORS} error items, ${ANSWER_ERROR_BYTES} bytes)`,
  },
] satisfies OtmError[]);
const UNLISTED = JSON.stringify([{ type: 'invalidField', field: '$', message: 'problems not listed' }] satisfies OtmError[]);

/**
 * The answer to a bulk request as JSON text: `{"accepted":N,"rejected":M,"items":[…]}` with, per
 * item in order, `{"index":i,"id":…}` or `{"index":i,"errors":[…]}`. Written directly rather than
 * as an object an item for the serializer: a request holds thousands of items.
 *
 * Its size is bounded whatever the items hold, so that a body of invalid documents cannot make an
 * answer many times its own size: a rejected item lists at most `ITEM_ERRORS` error items
 * (bulk/check-body.ts), and the answer lists the error items of its first rejected items only, at most
 * `ANSWER_ERRORS` of them and `ANSWER_ERROR_BYTES` bytes in all; every later rejected item gets
 * one short item saying its problems are not listed (`UNLISTED`). Every item then takes under 100
 * bytes beside its id (never longer than in the body) and the listed error items: an answer is at
 * most its request body, plus 100 bytes a document, plus `ANSWER_ERROR_BYTES`, plus a few hundred
 * bytes; a bound that the limit on documents fixes, whatever the documents hold.
 */
export function bulkAnswer({ count, ids, errors }: BulkResult): string {
  const items: string[] = new Array<string>(count);
  let listed = 0;
  let listedBytes = 0;
  let listing = true;
  let unlisted = 0;
  for (let i = 0; i < count; i++) {
    const e = errors.get(i);
    if (e === undefined) {
      items[i] = `{"index":${i},"id":${JSON.stringify(ids[i])}}`;
      continue;
    }
    let text: string | undefined;
    if (listing) {
      // A store's refusal is one item; the model's items of an invalid document are capped.
      const capped = e.length === 1 ? e : cappedErrors(e as OtmError[]);
      text = JSON.stringify(capped);
      const bytes = Buffer.byteLength(text);
      if (listed + capped.length <= ANSWER_ERRORS && listedBytes + bytes <= ANSWER_ERROR_BYTES) {
        listed += capped.length;
        listedBytes += bytes;
      } else {
        listing = false;
        text = undefined;
      }
    }
    items[i] = `{"index":${i},"errors":${text ?? (unlisted++ === 0 ? UNLISTED_FIRST : UNLISTED)}}`;
  }
  return `{"accepted":${count - errors.size},"rejected":${errors.size},"items":[${items.join(',')}]}`;
}

/** What a bulk request's headers say its body is. */
interface BulkContent {
  readonly format: BulkFormat;
  readonly gzip: boolean;
}

const unsupported = (message: string, headers?: Record<string, string>): OtmServiceError =>
  new OtmServiceError('unsupportedMediaType', 415, message, { items: [{ type: 'unsupportedMediaType', message }], headers });

/**
 * The format and coding of a bulk body from its Content-Type and Content-Encoding, or the 415
 * that refuses them: JSON (`application/json`, `application/*+json`) or NDJSON
 * (`application/x-ndjson`, `application/ndjson`), in UTF-8 (a `charset` parameter must say so, in
 * any case, quoted or not: `jsonMediaType` of @otm/http); sent as it is (no Content-Encoding, or
 * `identity`) or compressed with `gzip`. Undefined when there is no Content-Type (then there must
 * be no body).
 */
export function bulkContent(
  contentType: string | undefined,
  contentEncoding: string | undefined,
): BulkContent | OtmServiceError | undefined {
  const codings = contentCodings(contentEncoding);
  if (codings.length > 1 || (codings.length === 1 && codings[0] !== 'gzip')) {
    return unsupported(
      `a bulk body is sent as it is or compressed with gzip (Content-Encoding: gzip), got Content-Encoding '${clip(contentEncoding!)}'`,
      {
        'accept-encoding': 'gzip',
      },
    );
  }
  if (contentType === undefined) return undefined;
  const kind = jsonMediaType(contentType);
  if (kind === 'unsupported-charset') return unsupported(`a bulk body is UTF-8 (charset=utf-8, or no charset), got '${clip(contentType)}'`);
  if (kind === undefined) {
    return unsupported(
      `a bulk body is a JSON array (Content-Type: application/json) or NDJSON (application/x-ndjson), got '${clip(contentType)}'`,
    );
  }
  return { format: kind, gzip: codings.length === 1 };
}

/** The 413 of a body over the bulk limit (as sent, or decompressed). */
const tooLarge = (limit: number, decompressed = false): OtmServiceError => {
  const message = `the body${decompressed ? ', decompressed,' : ''} is larger than the bulk limit of ${limit} bytes`;
  return new OtmServiceError('payloadTooLarge', 413, message, { items: [{ type: 'payloadTooLarge', message }] });
};

/** The answer to a bulk request (`bulkAnswer`), as the OpenAPI document's `bulkResult`. */
const BULK_RESULT = {
  type: 'object',
  required: ['accepted', 'rejected', 'items'],
  properties: {
    accepted: { type: 'integer' },
    rejected: { type: 'integer' },
    items: {
      type: 'array',
      items: {
        type: 'object',
        required: ['index'],
        properties: {
          index: { type: 'integer' },
          id: { type: 'string' },
          // The model's items of an invalid document; one insufficientStorage item for a document a store refused.
          errors: { anyOf: [ref('clientError'), ref('errorItems')] },
        },
      },
    },
  },
};

const STORE_503 =
  'The bus cannot take the write now, or a store refuses writes for lack of room (type insufficientStorage); with Retry-After; nothing was stored';

/** `PUT /api/v5/<kind>` and `DELETE /api/v5/<kind>/{UUID}` of each kind. */
// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const entityWrites: FastifyPluginAsync<EntityWriteOptions> = async (app: FastifyInstance, opts) => {
  for (const k of KINDS) {
    const kind: KindSegment = k.segment;
    const name = capital(k.entityType);
    const example = KIND_EXAMPLES[kind];
    // `kind`: a per-kind scope (write:<kind>) is enough.
    const config = { scope: 'write', kind } as const;
    app.put(
      `/api/v5/${kind}`,
      {
        config,
        schema: {
          operationId: MODEL.kinds[kind]?.operationId ?? `create${name}`,
          summary: `Add (or replace) a ${k.label.toLowerCase()}; the id is generated when absent`,
          tags: [k.label],
          querystring: NO_QUERY,
          body: { content: { 'application/json': { schema: ref(k.schema), example } } },
          response: {
            '200': jsonAnswer(
              'The entity as stored (Location header: its path). A telemetry event sent as plain JSON (see the bulk extension) is stored and answered as the bytes sent; any other document as its re-encoded JSON.',
              ref(k.schema),
              example,
            ),
            '400': badRequest('Malformed JSON, a document that does not follow the model, or a query parameter'),
            '503': errorAnswer(`${STORE_503}; or ${CREDENTIAL_UNCHECKED}`),
          },
        },
      },
      async (req, reply) => {
        const { key, doc } = await opts.ingress.put(req.principal!.tenant, kind, req.body, req.sentBody);
        // The answer is the accepted document; its text is made once and reused by an in-process worker.
        return reply.code(200).header('location', `/api/v5/${kind}/${key}`).type(JSON_TYPE).send(jsonOf(doc));
      },
    );
    app.delete<{ Params: { UUID: string } }>(
      `/api/v5/${kind}/:UUID`,
      {
        config,
        schema: {
          operationId: `delete${name}ByUuid`,
          tags: [k.label],
          params: uuidParams(),
          querystring: NO_QUERY,
          response: {
            '204': emptyAnswer('Deleted (every lifecycle version; entities it held inline stay)'),
            '400': badRequest('A malformed UUID'),
            '404': errorAnswer('No such entity for this tenant'),
            '503': errorAnswer(
              `The bus cannot take the delete now, or a store refuses writes for lack of room (type insufficientStorage); with Retry-After; or ${CREDENTIAL_UNCHECKED}`,
            ),
          },
        },
      },
      async (req, reply) => {
        await opts.ingress.delete(req.principal!.tenant, kind, req.params.UUID.toLowerCase());
        return reply.code(204).send();
      },
    );
  }
};

/**
 * `POST /api/v5/bulk/<kind>[?atomic=true]`, in a scope of its own, whose one content-type parser
 * keeps the body as bytes (decompressed when it came gzip-compressed): the BulkChecker parses it,
 * on a worker thread when it is large. Its content type and coding are checked when the request
 * comes in, before its body is read. The bulk limit bounds the body as sent (fastify stops reading
 * past it, its 413 mapped below to one that names the bulk limit) and the body decompressed:
 * inflating stops as soon as the output passes the limit (zlib's `maxOutputLength`), so a
 * compression bomb is never inflated to its end.
 */
// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const bulkWrites: FastifyPluginAsync<BulkWriteOptions> = async (scope: FastifyInstance, opts) => {
  scope.addComponentSchemas({ bulkResult: BULK_RESULT });
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser('*', { parseAs: 'buffer' }, (req, body, done) => {
    const content = bulkContent(req.headers['content-type'], req.headers['content-encoding']);
    if (content === undefined || content instanceof OtmServiceError)
      return done(content ?? unsupported('a bulk body needs a Content-Type'), undefined);
    if (!content.gzip) return done(null, { format: content.format, body: body as Buffer });
    zlib.gunzip(body, { maxOutputLength: opts.bulkLimit }, (err, inflated) => {
      if (err === null) return done(null, { format: content.format, body: inflated });
      if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') return done(tooLarge(opts.bulkLimit, true), undefined);
      done(invalidDocument([{ type: 'invalidJson', message: `the body is not valid gzip: ${err.message}` }]), undefined);
    });
  });
  // Fastify's own 413 names no limit; the HTTP app's names the single-PUT one. Any other error
  // goes on to the HTTP app's handler.
  scope.setErrorHandler((err: FastifyError, _req, _reply) => {
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') throw tooLarge(opts.bulkLimit);
    throw err;
  });

  // Refuses a content type or coding the route does not take, before the body is read (the
  // HTTP app has authenticated the request by then).
  const checkContent = (req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void => {
    const content = bulkContent(req.headers['content-type'], req.headers['content-encoding']);
    if (content instanceof OtmServiceError) return done(content);
    // No Content-Type: fine when there is no body (then it is empty, and refused as such).
    const length = req.headers['content-length'];
    if (content === undefined && (req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0'))) {
      return done(unsupported('a bulk body needs a Content-Type: application/json or application/x-ndjson'));
    }
    done();
  };

  for (const k of KINDS) {
    const kind: KindSegment = k.segment;
    scope.post<{ Querystring: { atomic?: boolean }; Body: RawBulkBody | undefined }>(
      `/api/v5/bulk/${kind}`,
      {
        // `contentEncodings`: the HTTP app lets gzip through to this route (and refuses other codings).
        config: { scope: 'write', kind, contentEncodings: ['gzip'] },
        bodyLimit: opts.bulkLimit,
        onRequest: checkContent,
        schema: {
          operationId: `bulkCreate${capital(k.entityType)}`,
          summary: `Extension: many ${kind} at once, each checked like a PUT`,
          description:
            'Each document is checked and stored as a PUT of it would be; invalid ones are reported by index. ' +
            'A telemetry event sent as plain JSON (compact, with its id, no repeated member name, no member name starting with a digit, ' +
            'no number with an exponent or more than 15 significant digits) is stored as the bytes sent, as by PUT; any other document as its re-encoded JSON.',
          tags: [k.label, 'Extensions'],
          querystring: query({ atomic: { type: 'boolean', description: 'all or nothing', 'x-message': 'must be true or false' } }),
          body: {
            content: {
              'application/json': { schema: { type: 'array', items: ref(k.schema) }, example: [KIND_EXAMPLES[kind]] },
              'application/x-ndjson': { schema: { type: 'string', description: 'one document per line' } },
            },
          },
          response: {
            '200': jsonAnswer('Per item: its id, or the model error items for it', ref('bulkResult')),
            '400': badRequest('A body that is neither a JSON array nor NDJSON, or a bad `atomic`'),
            '413': errorAnswer('More than OTM_BULK_LIMIT bytes (as sent, or once decompressed) or OTM_BULK_MAX_ITEMS documents'),
            '415': errorAnswer('A body that is neither JSON nor NDJSON in UTF-8, or compressed otherwise than with gzip'),
            '503': jsonAnswer(
              `The bus cannot take the writes now (with Retry-After; nothing was stored; the error array); or ${CREDENTIAL_UNCHECKED}; ` +
                'or a store refused some of the documents for lack of room: the per-item answer (as 200), with Retry-After, in which every ' +
                'document not stored has an error item of type insufficientStorage (every document of an atomic request); sending them, or the whole request, again is safe',
              { anyOf: [ref('errorItems'), ref('bulkResult')] },
            ),
          },
        },
      },
      async (req, reply) => {
        const { format, body } = req.body ?? { format: 'json', body: Buffer.alloc(0) };
        const checked = await opts.bulkChecker.check({ body, format, kind, maxDepth: opts.maxDepth, maxItems: opts.bulkMaxItems });
        if (!checked.ok) throw refusal(checked);
        // The quotas count documents: the request's arrival took one, its other documents now.
        if (checked.count > 1) await req.server.chargeQuota(req, reply, checked.count - 1, checked.count);
        const result = await opts.ingress.bulk(req.principal!.tenant, kind, checked, req.query.atomic === true);
        // Documents a store refused for lack of room (or for now): 503, Retry-After, and the
        // per-item answer that says which documents were stored and which to send again.
        if (result.retryAfterSeconds !== undefined) {
          return reply.code(503).header('retry-after', String(result.retryAfterSeconds)).type(JSON_TYPE).send(bulkAnswer(result));
        }
        return reply.code(200).type(JSON_TYPE).send(bulkAnswer(result));
      },
    );
  }
};
