/**
 * The distributed deployment behind the `app.inject` interface the embedded HTTP suites use, so
 * that the same suites run against ingress, query and worker as separate processes. Requests go
 * over HTTP through the method-routing proxy. Because the pipeline is asynchronous, a write that
 * succeeded is followed by a barrier: the client waits until the query service shows what the
 * write answered (a PUT: that document, in its lifecycle; a DELETE: 404). What the worker does
 * with the write happens in the same unit of work, so after the barrier the effects are visible
 * too, as they are at once in the embedded deployment.
 */
import http from 'node:http';
import type { TestService } from '../../services/otm/test/helpers.js';
import { TOKENS } from '../../services/otm/test/helpers.js';
import { startCluster } from './cluster.js';
import { Health } from '@otm/core';

interface InjectOptions {
  method: string;
  url: string;
  headers?: Record<string, string>;
  payload?: string;
}
interface InjectResponse {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
  /** The body's bytes as they arrived. */
  rawPayload: Buffer;
  json(): any;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startDistributedService(opts: { bodyLimit?: number; maxDepth?: number }): Promise<TestService> {
  const cluster = await startCluster({
    tokens: TOKENS,
    env: {
      ...(opts.bodyLimit ? { OTM_BODY_LIMIT: String(opts.bodyLimit) } : {}),
      ...(opts.maxDepth ? { OTM_MAX_DEPTH: String(opts.maxDepth) } : {}),
    },
  });

  // node:http rather than fetch: fetch refuses methods such as TRACE, which the suites send.
  const request = (o: InjectOptions): Promise<InjectResponse> =>
    new Promise((resolve, reject) => {
      const req = http.request(`${cluster.url}${o.url}`, { method: o.method, headers: o.headers ?? {} }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const rawPayload = Buffer.concat(chunks);
          const body = rawPayload.toString('utf8');
          const headers: Record<string, string> = {};
          for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
          resolve({ statusCode: res.statusCode ?? 0, headers, body, rawPayload, json: () => JSON.parse(body) });
        });
      });
      req.on('error', reject);
      req.end(o.payload);
    });

  /** Waits (up to 10 s) until the query service shows the write; then the suite goes on. */
  const barrier = async (o: InjectOptions, res: InjectResponse): Promise<void> => {
    const auth: Record<string, string> = o.headers?.authorization ? { authorization: o.headers.authorization } : {};
    let check: (() => Promise<boolean>) | undefined;
    if (o.method === 'PUT' && res.statusCode === 200 && res.headers.location) {
      const doc = res.json() as { lifecycle?: string };
      const url = `${res.headers.location}${doc.lifecycle ? `?lifecycle=${doc.lifecycle}` : ''}`;
      check = async () => {
        const g = await request({ method: 'GET', url, headers: auth });
        return g.statusCode === 200 && JSON.stringify(g.json()) === res.body;
      };
    } else if (o.method === 'DELETE' && res.statusCode === 204) {
      check = async () => (await request({ method: 'GET', url: o.url, headers: auth })).statusCode === 404;
    }
    if (!check) return;
    const until = Date.now() + 10_000;
    while (Date.now() < until && !(await check())) await sleep(20);
  };

  const inject = async (o: InjectOptions): Promise<InjectResponse> => {
    const res = await request(o);
    await barrier(o, res);
    return res;
  };

  return {
    app: { inject, ready: async () => undefined } as unknown as TestService['app'],
    // The processes' own health is theirs (their /readyz); this stands for none here.
    health: new Health(),
    dataDir: '',
    close: () => cluster.close(),
  };
}
