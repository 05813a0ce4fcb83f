import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KINDS, validateEntity, type KindSegment } from '@otm/model';
import { auth, startService, type TestService } from './helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc.close());

describe('GET /api/v5/openapi.json', () => {
  it('describes every path the service answers, with every $ref resolvable', async () => {
    const res = await svc.app.inject({ method: 'GET', url: '/api/v5/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toBe('3.1.0');
    for (const k of KINDS) {
      expect(doc.paths[`/api/v5/${k.segment}`].put.responses).toHaveProperty('413');
      expect(Object.keys(doc.paths[`/api/v5/${k.segment}/{UUID}`])).toEqual(['get', 'delete']);
      expect(doc.paths[`/api/v5/bulk/${k.segment}`].post.requestBody.content).toHaveProperty('application/x-ndjson');
    }
    expect(doc.paths['/api/v5/trips'].put.operationId).toBe('createTrip');
    // The find extensions, with each list's filters and the feed's 410.
    expect(doc.paths['/api/v5/trips'].get.parameters.map((p: { name: string }) => p.name)).toEqual([
      'limit',
      'cursor',
      'updatedSince',
      'updatedBefore',
      'status',
      'vehicle',
      'actor',
      'externalId',
    ]);
    expect(doc.paths['/api/v5/changes'].get.responses).toHaveProperty('410');
    expect(doc.paths['/api/v5/vehicles/{UUID}/track'].get.responses['200'].content).toHaveProperty('application/gpx+xml');
    expect(doc.paths['/api/v5/vehicles/positions'].get.operationId).toBe('getLatestPositions');
    // The stream: Server-Sent Events, its 410 and 429; its tickets.
    const stream = doc.paths['/api/v5/stream'].get;
    expect(stream.responses['200'].content).toHaveProperty('text/event-stream');
    expect(Object.keys(stream.responses)).toEqual(expect.arrayContaining(['400', '401', '410', '429']));
    expect(doc.paths['/api/v5/stream/tickets'].post.operationId).toBe('createStreamTicket');
    expect(doc.components.schemas.errorItems.items.properties.type.enum).toContain('tooManyStreams');
    // The quotas' 429, with Retry-After, on every authenticated route, not on the operational ones.
    expect(doc.components.schemas.errorItems.items.properties.type.enum).toContain('tooManyRequests');
    expect(doc.paths['/api/v5/bulk/events'].post.responses['429'].headers).toHaveProperty('Retry-After');
    expect(doc.paths['/api/v5/trips'].get.responses['429'].description).toContain('OTM_RATE_LIMIT');
    expect(stream.responses['429'].description).toContain('OTM_STREAMS_PER_TOKEN');
    expect(doc.paths['/healthz'].get.responses).not.toHaveProperty('429');
    // Authentication: the three credentials, and the 503 when one cannot be checked for now (the
    // JWKS or the API key store down), on every authenticated operation.
    expect(doc.components.securitySchemes.BearerToken.description).toMatch(/OTM_TOKENS.*API key.*JWT/);
    for (const [path, ops] of Object.entries(
      doc.paths as Record<string, Record<string, { security?: unknown; responses: Record<string, { description: string }> }>>,
    )) {
      for (const [method, op] of Object.entries(ops)) {
        if (op.security === undefined) continue;
        expect({ path, method, has503: op.responses['503']?.description.includes('credential cannot be checked') }).toEqual({
          path,
          method,
          has503: true,
        });
      }
    }
    const operationIds = Object.values(doc.paths).flatMap((p) =>
      Object.values(p as Record<string, { operationId?: string }>).map((o) => o.operationId),
    );
    expect(new Set(operationIds).size).toBe(operationIds.length);
    const missing: string[] = [];
    const walk = (v: unknown): void => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object') {
        for (const [key, val] of Object.entries(v)) {
          if (key === '$ref' && typeof val === 'string') {
            const name = val.replace('#/components/schemas/', '');
            if (!(name in doc.components.schemas)) missing.push(val);
          } else walk(val);
        }
      }
    };
    walk(doc);
    expect(missing).toEqual([]);
  });

  // Swagger UI (/api/v5/docs) shows a media type's `example` rather than generating a sample from
  // its schema, which for the model's recursive schemas is large and mostly made up; Try it out
  // sends it as the body. So each request and answer that carries the kinds' documents has one,
  // valid per the model's validator (as a PUT of it would be checked).
  it('gives every request and answer carrying documents of a kind an example that the model validates', async () => {
    const doc = (await svc.app.inject({ method: 'GET', url: '/api/v5/openapi.json' })).json();
    type Schema = { $ref?: string; type?: string; items?: Schema; properties?: Record<string, Schema> };
    const kindOf = (s: Schema | undefined): KindSegment | undefined =>
      KINDS.find((k) => s?.$ref === `#/components/schemas/${k.schema}`)?.segment;
    // The documents a value of this schema holds, with their kind: the schema of a kind, an array
    // of them (bulk) or a page of them (lists, the track); undefined for any other schema.
    const documents = (schema: Schema, value: unknown): { kind: KindSegment; doc: unknown }[] | undefined => {
      const direct = kindOf(schema);
      if (direct) return [{ kind: direct, doc: value }];
      const itemKind = kindOf(schema.type === 'array' ? schema.items : schema.properties?.items?.items);
      if (!itemKind) return undefined;
      const items = schema.type === 'array' ? value : (value as { items?: unknown } | undefined)?.items;
      return Array.isArray(items) ? items.map((doc) => ({ kind: itemKind, doc })) : [];
    };
    const checked: string[] = [];
    const problems: unknown[] = [];
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, Record<string, unknown>>>)) {
      for (const [method, op] of Object.entries(ops)) {
        const bodies: [string, unknown][] = [
          ['request', (op.requestBody as { content?: unknown } | undefined)?.content],
          ...Object.entries((op.responses ?? {}) as Record<string, { content?: unknown }>).map(([status, r]): [string, unknown] => [
            status,
            r.content,
          ]),
        ];
        for (const [where, content] of bodies) {
          for (const [type, media] of Object.entries((content ?? {}) as Record<string, { schema?: Schema; example?: unknown }>)) {
            if (media.schema === undefined || documents(media.schema, undefined) === undefined) continue;
            const at = `${method.toUpperCase()} ${path} ${where} ${type}`;
            const docs = documents(media.schema, media.example) ?? [];
            if (media.example === undefined || docs.length === 0) problems.push(`${at}: no example`);
            for (const { kind, doc: d } of docs) {
              const errors = validateEntity(kind, d);
              if (errors.length > 0) problems.push({ at, kind, errors });
            }
            checked.push(at);
          }
        }
      }
    }
    expect(problems).toEqual([]);
    // GET by id, PUT (body and answer), the list, the bulk body, for each of the 13 kinds; the track.
    expect(checked).toHaveLength(KINDS.length * 5 + 1);
    expect(checked).toContain('GET /api/v5/vehicles/{UUID} 200 application/json');
    expect(checked).toContain('GET /api/v5/vehicles/{UUID}/track 200 application/json');
  });

  // A small schema-driven fuzz: every operation the document describes, asked with its declared
  // method (without a body, with no query, with an unknown query parameter, with a malformed id)
  // and with a method its path does not have: each answer's status is one the operation documents
  // (or a 405 with Allow), and its content type one documented for that status.
  it('answers every request made from the document with a status and content type the document gives', async () => {
    const doc = (await svc.app.inject({ method: 'GET', url: '/api/v5/openapi.json' })).json<{
      paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, unknown> }> }>>;
    }>();
    const problems: unknown[] = [];
    const uuid = '6f1c1a52-8f6e-4a0e-bb4e-00000000f000';
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        // The stream stays open when it is accepted: asked with a bad parameter only.
        const streams = op.responses['200']?.content?.['text/event-stream'] !== undefined;
        const urls = [path.replace(/\{(UUID|id)\}/g, uuid).replace('{kind}', 'trips')];
        urls.push(`${urls[0]}?bogus=1`);
        if (path.includes('{')) urls.push(path.replace(/\{(UUID|id|kind)\}/g, 'not-an-id'));
        for (const url of streams ? urls.slice(1) : urls) {
          const res = await svc.app.inject({ method: method.toUpperCase() as 'GET', url, headers: auth() });
          const answer = op.responses[String(res.statusCode)];
          const type = String(res.headers['content-type'] ?? '').split(';')[0]!;
          if (answer === undefined) problems.push(`${method} ${url}: ${res.statusCode} not documented`);
          else if (res.body !== '' && answer.content?.[type] === undefined) problems.push(`${method} ${url}: ${type} not documented`);
        }
      }
      const other = ['PATCH', 'TRACE'].find((m) => ops[m.toLowerCase()] === undefined)!;
      const res = await svc.app.inject({ method: other as 'PATCH', url: path.replace(/\{(UUID|id)\}/g, uuid).replace('{kind}', 'trips') });
      if (res.statusCode !== 405 || res.headers.allow === undefined) problems.push(`${other} ${path}: ${res.statusCode}`);
    }
    expect(problems).toEqual([]);
  });
});
