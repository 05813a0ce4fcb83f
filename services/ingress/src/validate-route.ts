/**
 * POST /api/v5/validate/{kind}: checks a document exactly as a PUT of it is checked on its own
 * (the model's rules, a non-empty id), without storing it. The fleet page's validator and
 * `otm validate` give the same errors. Not checked here: what a PUT of an update or association
 * event also checks against stored entities.
 */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { KindSegment } from '@otm/model';
import { JSON_TYPE, KIND_SEGMENTS, NO_QUERY, badRequest, errorAnswer, jsonAnswer } from '@otm/http';
import { checkDocument } from './check-document.js';

// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const validateRoute: FastifyPluginAsync = async (app: FastifyInstance) => {
  app.post<{ Params: { kind: KindSegment } }>(
    '/api/v5/validate/:kind',
    {
      config: { scope: 'read' },
      schema: {
        operationId: 'validateDocument',
        summary:
          'Extension: check a document as a PUT of it would be checked, without storing it (update and association events: not against stored entities)',
        tags: ['Extensions'],
        // A kind outside the list is a 404, like any unknown path.
        params: { type: 'object', required: ['kind'], properties: { kind: { type: 'string', enum: KIND_SEGMENTS } } },
        querystring: NO_QUERY,
        body: { content: { 'application/json': { schema: { type: 'object' } } } },
        response: {
          '200': jsonAnswer('The document follows the model', {
            type: 'object',
            required: ['valid'],
            properties: { valid: { const: true } },
          }),
          '400': badRequest('Malformed JSON or a document that does not follow the model: the same items a PUT gives'),
          '404': errorAnswer('An unknown kind'),
        },
      },
    },
    async (req, reply) => {
      checkDocument(req.params.kind, req.body); // throws the 400 with the model's error items
      return reply
        .code(200)
        .type(JSON_TYPE)
        .send(JSON.stringify({ valid: true }));
    },
  );
};
