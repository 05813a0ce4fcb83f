/**
 * The operational endpoints every process answers, without a token: /healthz (liveness), /readyz
 * (readiness: every dependency answers and no part is down) and /metrics (Prometheus; serve it on
 * an internal network only).
 */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { partsDown, registry, type Health } from '@otm/core';

export interface OperationsOptions {
  /** Whether every dependency answers; /readyz reports it. */
  readonly readiness: () => Promise<Record<string, boolean>>;
  /**
   * The process's consumers, background loops and stores' write state (core/health.ts): /readyz is
   * 503 while one is down; /healthz once a loop has been down `stallSeconds` (OTM_STALL_SECONDS).
   */
  readonly health?: Health;
  /** Seconds a loop may stay down before /healthz answers 503 (default 120). */
  readonly stallSeconds?: number;
}

const status = (description: string, properties: Record<string, unknown> = {}) => ({
  description,
  content: {
    'application/json': {
      schema: { type: 'object', required: ['status'], properties: { status: { type: 'string' }, ...properties } },
    },
  },
});

const TAGS = ['Operations'];

// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const operations: FastifyPluginAsync<OperationsOptions> = async (app: FastifyInstance, opts) => {
  // Liveness: 503 once a loop has been down longer than the stall bound (a restart is the cure).
  const stallSeconds = opts.stallSeconds ?? 120;
  app.get(
    '/healthz',
    {
      schema: {
        operationId: 'health',
        tags: TAGS,
        response: {
          '200': status('The process runs'),
          '503': status(`A loop has been down longer than OTM_STALL_SECONDS: restart the process`, {
            stallSeconds: { type: 'integer' },
            down: { type: 'array' },
          }),
        },
      },
    },
    async (_req, reply) => {
      const stalled = opts.health?.stalled(stallSeconds) ?? [];
      if (stalled.length === 0) return { status: 'ok' };
      return reply.code(503).send({ status: 'stalled', stallSeconds, down: stalled });
    },
  );
  // Prometheus metrics of this process (no token: serve it on an internal network only).
  app.get(
    '/metrics',
    {
      schema: {
        operationId: 'metrics',
        tags: TAGS,
        response: { '200': { description: 'Prometheus text format', content: { 'text/plain': { schema: { type: 'string' } } } } },
      },
    },
    async (_req, reply) => {
      if (opts.health) {
        const down = opts.health.down();
        for (const kind of ['loop', 'store'] as const) partsDown.set({ kind }, down.filter((p) => p.kind === kind).length);
      }
      return reply.type(registry.contentType).send(await registry.metrics());
    },
  );
  app.get(
    '/readyz',
    {
      schema: {
        operationId: 'ready',
        tags: TAGS,
        response: {
          '200': status('Dependencies answer', { checks: { type: 'object' } }),
          '503': status('A dependency does not answer, or a part is down (named in `checks`, why in `down`)', {
            checks: { type: 'object' },
            down: { type: 'array' },
          }),
        },
      },
    },
    async (_req, reply) => {
      let checks: Record<string, boolean>;
      try {
        checks = await opts.readiness();
      } catch {
        checks = { dependencies: false };
      }
      // Every part down is a check of its own, named for the operator; `down` says why and since when.
      const down = opts.health?.down() ?? [];
      for (const part of down) checks[part.name] = false;
      const ready = Object.values(checks).every(Boolean);
      return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'unavailable', checks, ...(down.length > 0 ? { down } : {}) });
    },
  );
};
