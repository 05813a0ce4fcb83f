/**
 * The webhook subscriptions API (a fastify plugin), scoped to the token's tenant (`read` for GETs,
 * `write` for the rest); every 4xx in the model's error format:
 *
 * - `POST /api/v5/subscriptions` `{url, kinds?, filter?: {vehicle?, trip?, eventType?}, secret?, from?}`
 *   -> 201 with the subscription, its secret in full (made when not given: 32 random bytes, hex);
 * - `GET /api/v5/subscriptions`, `GET /api/v5/subscriptions/{id}` (the secret masked: `****` and
 *   its last 4 characters), `DELETE /api/v5/subscriptions/{id}` (204);
 * - `GET /api/v5/subscriptions/{id}/deliveries?limit=`: the recent attempts, newest first;
 * - `POST /api/v5/subscriptions/{id}/replay?cursor=`: deliver again from that feed cursor (410 when
 *   the feed no longer holds it);
 * - `POST /api/v5/subscriptions/{id}/resume`: a paused subscription goes on at its cursor.
 *
 * A new subscription starts at the current end of the tenant's feed (only later changes), or
 * after the cursor `from` names (one of GET /api/v5/changes, still held).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply } from 'fastify';
import { EVENT_TYPES, KINDS, isKindSegment, type KindSegment, type OtmError } from '@otm/model';
import {
  invalidDocument,
  notFound,
  tooManySubscriptions,
  type AddressRange,
  type ChangeFeed,
  type DeliveryAttempt,
  type SubscriptionStore,
  type WebhookFilter,
  type WebhookSubscription,
} from '@otm/core';
import {
  JSON_TYPE,
  KIND_SEGMENTS,
  NO_QUERY,
  badRequest,
  clip,
  emptyAnswer,
  errorAnswer,
  jsonAnswer,
  limitParam,
  query,
  ref,
  uuidParams,
} from '@otm/http';
import { KEPT_DELIVERIES } from './dispatcher.js';
import { TargetRule, urlProblem } from './ssrf.js';

/** Most subscriptions of one tenant, by default. */
export const MAX_SUBSCRIPTIONS_PER_TENANT = 100;

export interface SubscriptionRouteOptions {
  readonly store: SubscriptionStore;
  /** The entity store's change feed: where new subscriptions start, and cursors checked. */
  readonly feed: ChangeFeed;
  /** OTM_WEBHOOK_ALLOW. */
  readonly allow: readonly AddressRange[];
  /** Most subscriptions of one tenant (default 100). */
  readonly maxPerTenant?: number;
  /** Told of a subscription made, resumed or replayed (the dispatcher of this process, if any, looks at once). */
  readonly onChange?: (tenant: string, id: string) => void;
}

const MEMBERS = ['url', 'kinds', 'filter', 'secret', 'from'] as const;
const FILTER_MEMBERS = ['vehicle', 'trip', 'eventType'] as const;
const SECRET = /^[\x21-\x7e]{16,256}$/;
const ID_MAX = 1_000;
const CURSOR_MAX = 100;

const field = (name: string, message: string): OtmError => ({ type: 'invalidField', field: name, message });

/** The subscription as answered: its secret in full only when just made. */
function view(s: WebhookSubscription, showSecret: boolean): Record<string, unknown> {
  return {
    id: s.id,
    url: s.url,
    kinds: s.kinds ?? null,
    filter: s.filter,
    secret: showSecret ? s.secret : `****${s.secret.slice(-4)}`,
    state: s.state,
    ...(s.reason === undefined ? {} : { reason: s.reason }),
    ...(s.cursor === undefined ? {} : { cursor: s.cursor }),
    ...(s.failingSince === undefined ? {} : { failingSince: new Date(s.failingSince).toISOString() }),
    createdAt: new Date(s.createdAt).toISOString(),
  };
}

function deliveryView(d: DeliveryAttempt): Record<string, unknown> {
  return {
    id: d.id,
    at: new Date(d.at).toISOString(),
    attempt: d.attempt,
    changes: d.changes,
    firstCursor: d.firstCursor,
    lastCursor: d.lastCursor,
    outcome: d.outcome,
    ...(d.status === undefined ? {} : { status: d.status }),
    ...(d.error === undefined ? {} : { error: d.error }),
    durationMs: d.durationMs,
  };
}

const sendJson = (reply: FastifyReply, status: number, body: unknown) => reply.code(status).type(JSON_TYPE).send(JSON.stringify(body));

interface Checked {
  readonly url: string;
  readonly kinds?: KindSegment[];
  readonly filter: WebhookFilter;
  readonly secret?: string;
  readonly from?: string;
}

/** The body of a POST, checked: every problem an item, unknown members named. */
function checkBody(body: unknown, rule: TargetRule): Checked {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw invalidDocument([
      { type: 'invalidJson', message: 'the body must be a JSON object: {"url": ..., "kinds"?, "filter"?, "secret"?, "from"?}' },
    ]);
  }
  const b = body as Record<string, unknown>;
  const errors: OtmError[] = [];
  for (const name of Object.keys(b)) {
    if (!(MEMBERS as readonly string[]).includes(name)) errors.push(field(clip(name), `unknown member; allowed: ${MEMBERS.join(', ')}`));
  }
  let url = '';
  if (b.url === undefined) errors.push({ type: 'missingField', field: 'url', message: 'the URL deliveries are POSTed to' });
  else if (typeof b.url !== 'string') errors.push(field('url', 'must be a string'));
  else {
    const problem = urlProblem(b.url, rule);
    if (problem !== undefined) errors.push(field('url', problem));
    url = b.url;
  }
  let kinds: KindSegment[] | undefined;
  if (b.kinds !== undefined) {
    if (!Array.isArray(b.kinds) || b.kinds.length === 0)
      errors.push(field('kinds', 'must be a non-empty array of kinds, e.g. ["trips", "events"]'));
    else {
      const seen = new Set<KindSegment>();
      b.kinds.forEach((k, i) => {
        if (typeof k === 'string' && isKindSegment(k)) seen.add(k);
        else errors.push(field(`kinds[${i}]`, `must be one of ${KINDS.map((x) => x.segment).join(', ')}`));
      });
      kinds = [...seen];
    }
  }
  const filter: Record<string, string> = {};
  if (b.filter !== undefined) {
    if (typeof b.filter !== 'object' || b.filter === null || Array.isArray(b.filter)) errors.push(field('filter', 'must be an object'));
    else {
      for (const [name, value] of Object.entries(b.filter as Record<string, unknown>)) {
        if (!(FILTER_MEMBERS as readonly string[]).includes(name)) {
          errors.push(field(`filter.${clip(name)}`, `unknown member; allowed: ${FILTER_MEMBERS.join(', ')}`));
        } else if (typeof value !== 'string' || value === '' || value.length > ID_MAX) {
          errors.push(field(`filter.${name}`, `must be a non-empty string of at most ${ID_MAX} characters`));
        } else if (name === 'eventType' && !(EVENT_TYPES as readonly string[]).includes(value)) {
          errors.push(field('filter.eventType', `must be one of ${EVENT_TYPES.join(', ')}`));
        } else filter[name] = value;
      }
    }
  }
  let secret: string | undefined;
  if (b.secret !== undefined) {
    if (typeof b.secret !== 'string' || !SECRET.test(b.secret)) {
      errors.push(field('secret', 'must be 16 to 256 visible ASCII characters (or leave it out: one is made)'));
    } else secret = b.secret;
  }
  let from: string | undefined;
  if (b.from !== undefined) {
    if (typeof b.from !== 'string' || b.from === '' || b.from.length > CURSOR_MAX)
      errors.push(field('from', 'must be a cursor of GET /api/v5/changes'));
    else from = b.from;
  }
  if (errors.length > 0) throw invalidDocument(errors);
  return {
    url,
    ...(kinds === undefined ? {} : { kinds }),
    filter,
    ...(secret === undefined ? {} : { secret }),
    ...(from === undefined ? {} : { from }),
  };
}

/** A cursor of the tenant's feed that it still holds: 400 naming `field` when it is not a cursor of it, 410 when expired. */
async function checkCursor(feed: ChangeFeed, tenant: string, cursor: string, name: string): Promise<void> {
  try {
    await feed.read({ tenant, after: cursor, limit: 1 });
  } catch (e) {
    const items = (e as { items?: Array<{ field?: string }> }).items;
    // The feed names `cursor`; here it is `name`.
    if (items?.[0]?.field === 'cursor' && name !== 'cursor')
      throw invalidDocument([field(name, 'is not a cursor of this feed: give one GET /api/v5/changes answered')]);
    throw e;
  }
}

/** The schemas of the OpenAPI document's components this API names. */
const SCHEMAS = {
  subscriptionRequest: {
    type: 'object',
    required: ['url'],
    additionalProperties: false,
    properties: {
      url: { type: 'string', format: 'uri', maxLength: 2048, description: 'http or https, without credentials' },
      kinds: {
        type: 'array',
        minItems: 1,
        items: { type: 'string', enum: KIND_SEGMENTS },
        description: 'absent: every kind',
      },
      filter: ref('subscriptionFilter'),
      secret: { type: 'string', minLength: 16, maxLength: 256, description: 'absent: 32 random bytes in hex are made' },
      from: { type: 'string', description: 'a feed cursor: deliver the changes after it (absent: only changes from now on)' },
    },
  },
  subscriptionFilter: {
    type: 'object',
    additionalProperties: false,
    properties: {
      vehicle: { type: 'string', description: 'the vehicle, and the documents naming it as their vehicle (trips, events, ...)' },
      trip: { type: 'string', description: 'the trip, and the events linked to it' },
      eventType: { type: 'string', description: 'events of this type only' },
    },
  },
  subscription: {
    type: 'object',
    required: ['id', 'url', 'kinds', 'filter', 'secret', 'state', 'createdAt'],
    properties: {
      id: { type: 'string', format: 'uuid' },
      url: { type: 'string' },
      kinds: { type: ['array', 'null'], items: { type: 'string' }, description: 'null: every kind' },
      filter: ref('subscriptionFilter'),
      secret: { type: 'string', description: 'in full when just made, else `****` and its last 4 characters' },
      state: { type: 'string', enum: ['active', 'paused'] },
      reason: { type: 'string', description: 'why it was paused' },
      cursor: { type: 'string', description: 'the feed cursor of the last change delivered or passed over' },
      failingSince: { type: 'string', format: 'date-time', description: 'while a batch is being retried: its first failure' },
      createdAt: { type: 'string', format: 'date-time' },
    },
  },
  deliveryAttempt: {
    type: 'object',
    required: ['id', 'at', 'attempt', 'changes', 'firstCursor', 'lastCursor', 'outcome', 'durationMs'],
    properties: {
      id: { type: 'string', description: 'the batch (the OTM-Delivery header)' },
      at: { type: 'string', format: 'date-time' },
      attempt: { type: 'integer', minimum: 1 },
      changes: { type: 'integer' },
      firstCursor: { type: 'string' },
      lastCursor: { type: 'string' },
      outcome: { type: 'string', enum: ['delivered', 'failed', 'refused'] },
      status: { type: 'integer', description: 'the HTTP status answered' },
      error: { type: 'string', description: 'what went wrong' },
      durationMs: { type: 'integer' },
    },
  },
};

const TAGS = ['Webhooks', 'Extensions'];
const ID = uuidParams('id');
const subscriptionAnswer = (description: string) => jsonAnswer(description, ref('subscription'));
const NO_SUBSCRIPTION = errorAnswer('No such subscription for this tenant');
const itemsOf = (item: unknown) => ({ type: 'object', required: ['items'], properties: { items: { type: 'array', items: item } } });

// eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
export const subscriptions: FastifyPluginAsync<SubscriptionRouteOptions> = async (app: FastifyInstance, opts) => {
  const { store, feed } = opts;
  const rule = new TargetRule(opts.allow);
  const max = opts.maxPerTenant ?? MAX_SUBSCRIPTIONS_PER_TENANT;
  const read = { scope: 'read' } as const;
  const write = { scope: 'write' } as const;
  const changed = (tenant: string, id: string) => opts.onChange?.(tenant, id);
  app.addComponentSchemas(SCHEMAS);

  const found = async (tenant: string, raw: string): Promise<WebhookSubscription> => {
    const id = raw.toLowerCase();
    const s = await store.get(tenant, id);
    if (s === undefined) throw notFound(`no subscription with id ${id}`);
    return s;
  };

  app.post(
    '/api/v5/subscriptions',
    {
      config: write,
      schema: {
        operationId: 'createSubscription',
        summary: "Extension: a webhook: the tenant's changes POSTed to a URL, in signed batches",
        description:
          'Deliveries are JSON POSTs of `{"deliveryId", "subscription", "changes": [items as GET /api/v5/changes answers them]}`, at most ' +
          'OTM_WEBHOOK_BATCH changes (or what arrived within 1 s), in feed order, signed with `OTM-Signature: t=<unix seconds>,v1=<hex ' +
          'HMAC-SHA256 of "<t>.<body>" with the secret>`, at least once (deduplicate by cursor). A 2xx answer delivers; anything else (3xx ' +
          'included: redirects are not followed) is retried with exponential backoff for 24 h, then the subscription is paused. ' +
          'The URL must be http(s), at most 2048 characters, without credentials; loopback, private, link-local, CGNAT, multicast and ' +
          'metadata addresses are refused (at creation for a literal address, at every connection for a name) unless OTM_WEBHOOK_ALLOW lists them. ' +
          'Starts at the current end of the feed, or after `from`. The answer shows the secret (made when not given); later ones mask it.',
        tags: TAGS,
        querystring: NO_QUERY,
        body: { content: { 'application/json': { schema: ref('subscriptionRequest') } } },
        response: {
          '201': subscriptionAnswer('The subscription, with its secret in full (Location: its path)'),
          '400': badRequest('A bad or unknown member, named in `field`; a URL that is refused'),
          '409': errorAnswer('The tenant has the most subscriptions allowed (100)'),
          '410': errorAnswer('`from` is older than the feed keeps'),
        },
      },
    },
    async (req, reply) => {
      const tenant = req.principal!.tenant;
      const c = checkBody(req.body, rule);
      if (c.from !== undefined) await checkCursor(feed, tenant, c.from, 'from');
      const sub: WebhookSubscription = {
        id: randomUUID(),
        tenant,
        url: c.url,
        ...(c.kinds === undefined ? {} : { kinds: c.kinds }),
        filter: c.filter,
        secret: c.secret ?? randomBytes(32).toString('hex'),
        state: 'active',
        cursor: c.from ?? (await feed.head(tenant)),
        createdAt: Date.now(),
        rev: 0,
      };
      if (!(await store.create(sub, max))) {
        throw tooManySubscriptions(`a tenant has at most ${max} subscriptions: delete one first`);
      }
      changed(tenant, sub.id);
      return sendJson(reply.header('location', `/api/v5/subscriptions/${sub.id}`), 201, view(sub, true));
    },
  );

  app.get(
    '/api/v5/subscriptions',
    {
      config: read,
      schema: {
        operationId: 'listSubscriptions',
        summary: "Extension: the tenant's webhook subscriptions, oldest first (secrets masked)",
        tags: TAGS,
        querystring: NO_QUERY,
        response: { '200': jsonAnswer('Every subscription of the tenant', itemsOf(ref('subscription'))) },
      },
    },
    async (req, reply) => {
      const subs = await store.list(req.principal!.tenant);
      return sendJson(reply, 200, { items: subs.map((s) => view(s, false)) });
    },
  );

  app.get<{ Params: { id: string } }>(
    '/api/v5/subscriptions/:id',
    {
      config: read,
      schema: {
        operationId: 'getSubscription',
        summary: 'Extension: a webhook subscription: its state, why it was paused, its cursor (secret masked)',
        tags: TAGS,
        params: ID,
        querystring: NO_QUERY,
        response: { '200': subscriptionAnswer('The subscription'), '400': badRequest('A malformed id'), '404': NO_SUBSCRIPTION },
      },
    },
    async (req, reply) => sendJson(reply, 200, view(await found(req.principal!.tenant, req.params.id), false)),
  );

  app.delete<{ Params: { id: string } }>(
    '/api/v5/subscriptions/:id',
    {
      config: write,
      schema: {
        operationId: 'deleteSubscription',
        summary: 'Extension: stop and remove a webhook subscription with its deliveries',
        tags: TAGS,
        params: ID,
        querystring: NO_QUERY,
        response: { '204': emptyAnswer('Removed'), '400': badRequest('A malformed id'), '404': NO_SUBSCRIPTION },
      },
    },
    async (req, reply) => {
      const tenant = req.principal!.tenant;
      const id = req.params.id.toLowerCase();
      if (!(await store.delete(tenant, id))) throw notFound(`no subscription with id ${id}`);
      changed(tenant, id);
      return reply.code(204).send();
    },
  );

  app.get<{ Params: { id: string }; Querystring: { limit?: number } }>(
    '/api/v5/subscriptions/:id/deliveries',
    {
      config: read,
      schema: {
        operationId: 'listSubscriptionDeliveries',
        summary: "Extension: a webhook subscription's recent delivery attempts, newest first (the last 100)",
        tags: TAGS,
        params: ID,
        querystring: query({ limit: limitParam(KEPT_DELIVERIES, KEPT_DELIVERIES) }),
        response: {
          '200': jsonAnswer('The attempts', itemsOf(ref('deliveryAttempt'))),
          '400': badRequest('A malformed id or limit'),
          '404': NO_SUBSCRIPTION,
        },
      },
    },
    async (req, reply) => {
      const s = await found(req.principal!.tenant, req.params.id);
      const items = await store.deliveries(s.tenant, s.id, req.query.limit ?? KEPT_DELIVERIES);
      return sendJson(reply, 200, { items: items.map(deliveryView) });
    },
  );

  app.post<{ Params: { id: string }; Querystring: { cursor: string } }>(
    '/api/v5/subscriptions/:id/replay',
    {
      config: write,
      schema: {
        operationId: 'replaySubscription',
        summary: 'Extension: deliver again the changes after a feed cursor (the subscription goes back to it)',
        description: 'A paused subscription stays paused: resume it to deliver.',
        tags: TAGS,
        params: ID,
        querystring: query(
          {
            cursor: {
              type: 'string',
              minLength: 1,
              maxLength: CURSOR_MAX,
              description: 'the feed cursor to deliver again from (the changes after it)',
              'x-message': 'is not a cursor of this feed',
            },
          },
          ['cursor'],
        ),
        response: {
          '200': subscriptionAnswer('The subscription, at its new cursor'),
          '400': badRequest('A missing cursor, or one that is not of this feed'),
          '404': NO_SUBSCRIPTION,
          '410': errorAnswer('The cursor is older than the feed keeps (OTM_FEED_RETENTION)'),
        },
      },
    },
    async (req, reply) => {
      const s = await found(req.principal!.tenant, req.params.id);
      await checkCursor(feed, s.tenant, req.query.cursor, 'cursor');
      const after = await store.replay(s.tenant, s.id, req.query.cursor);
      if (after === undefined) throw notFound(`no subscription with id ${s.id}`);
      changed(s.tenant, s.id);
      return sendJson(reply, 200, view(after, false));
    },
  );

  app.post<{ Params: { id: string } }>(
    '/api/v5/subscriptions/:id/resume',
    {
      config: write,
      schema: {
        operationId: 'resumeSubscription',
        summary: 'Extension: a paused webhook subscription goes on where it stopped (its cursor)',
        tags: TAGS,
        params: ID,
        querystring: NO_QUERY,
        response: { '200': subscriptionAnswer('The subscription, active'), '404': NO_SUBSCRIPTION },
      },
    },
    async (req, reply) => {
      const s = await found(req.principal!.tenant, req.params.id);
      const after = await store.resume(s.tenant, s.id);
      if (after === undefined) throw notFound(`no subscription with id ${s.id}`);
      changed(s.tenant, s.id);
      return sendJson(reply, 200, view(after, false));
    },
  );
};
