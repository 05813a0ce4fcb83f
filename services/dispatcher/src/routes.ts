/**
 * The webhook subscriptions API, scoped to the token's tenant (`read` for GETs, `write` for the
 * rest); every 4xx in the model's error format:
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
import type { FastifyInstance, FastifyReply } from 'fastify';
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
import { JSON_TYPE, clip, methodNotAllowed, onlyQuery, uuidParam } from '@otm/http';
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

export function registerSubscriptionRoutes(app: FastifyInstance, opts: SubscriptionRouteOptions): void {
  const { store, feed } = opts;
  const rule = new TargetRule(opts.allow);
  const max = opts.maxPerTenant ?? MAX_SUBSCRIPTIONS_PER_TENANT;
  const read = { config: { scope: 'read' } } as const;
  const write = { config: { scope: 'write' } } as const;
  const changed = (tenant: string, id: string) => opts.onChange?.(tenant, id);

  const found = async (tenant: string, raw: string): Promise<WebhookSubscription> => {
    const id = uuidParam(raw);
    const s = await store.get(tenant, id);
    if (s === undefined) throw notFound(`no subscription with id ${id}`);
    return s;
  };

  app.post('/api/v5/subscriptions', write, async (req, reply) => {
    onlyQuery(req.query, []);
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
  });

  app.get('/api/v5/subscriptions', read, async (req, reply) => {
    onlyQuery(req.query, []);
    const subs = await store.list(req.principal!.tenant);
    return sendJson(reply, 200, { items: subs.map((s) => view(s, false)) });
  });

  app.get<{ Params: { id: string } }>('/api/v5/subscriptions/:id', read, async (req, reply) => {
    onlyQuery(req.query, []);
    return sendJson(reply, 200, view(await found(req.principal!.tenant, req.params.id), false));
  });

  app.delete<{ Params: { id: string } }>('/api/v5/subscriptions/:id', write, async (req, reply) => {
    onlyQuery(req.query, []);
    const tenant = req.principal!.tenant;
    const id = uuidParam(req.params.id);
    if (!(await store.delete(tenant, id))) throw notFound(`no subscription with id ${id}`);
    changed(tenant, id);
    return reply.code(204).send();
  });

  app.get<{ Params: { id: string } }>('/api/v5/subscriptions/:id/deliveries', read, async (req, reply) => {
    const q = onlyQuery(req.query, ['limit']);
    let limit = KEPT_DELIVERIES;
    if (q.limit !== undefined) {
      if (!/^\d{1,4}$/.test(q.limit) || Number(q.limit) < 1 || Number(q.limit) > KEPT_DELIVERIES) {
        throw invalidDocument([field('limit', `must be a whole number from 1 to ${KEPT_DELIVERIES}`)]);
      }
      limit = Number(q.limit);
    }
    const s = await found(req.principal!.tenant, req.params.id);
    const items = await store.deliveries(s.tenant, s.id, limit);
    return sendJson(reply, 200, { items: items.map(deliveryView) });
  });

  app.post<{ Params: { id: string } }>('/api/v5/subscriptions/:id/replay', write, async (req, reply) => {
    const q = onlyQuery(req.query, ['cursor']);
    const s = await found(req.principal!.tenant, req.params.id);
    if (q.cursor === undefined)
      throw invalidDocument([
        { type: 'missingField', field: 'cursor', message: 'the feed cursor to deliver again from (the changes after it)' },
      ]);
    if (q.cursor === '' || q.cursor.length > CURSOR_MAX) throw invalidDocument([field('cursor', 'is not a cursor of this feed')]);
    await checkCursor(feed, s.tenant, q.cursor, 'cursor');
    const after = await store.replay(s.tenant, s.id, q.cursor);
    if (after === undefined) throw notFound(`no subscription with id ${s.id}`);
    changed(s.tenant, s.id);
    return sendJson(reply, 200, view(after, false));
  });

  app.post<{ Params: { id: string } }>('/api/v5/subscriptions/:id/resume', write, async (req, reply) => {
    onlyQuery(req.query, []);
    const s = await found(req.principal!.tenant, req.params.id);
    const after = await store.resume(s.tenant, s.id);
    if (after === undefined) throw notFound(`no subscription with id ${s.id}`);
    changed(s.tenant, s.id);
    return sendJson(reply, 200, view(after, false));
  });

  methodNotAllowed(app, '/api/v5/subscriptions', ['GET', 'HEAD', 'POST']);
  methodNotAllowed(app, '/api/v5/subscriptions/:id', ['GET', 'HEAD', 'DELETE']);
  methodNotAllowed(app, '/api/v5/subscriptions/:id/deliveries', ['GET', 'HEAD']);
  methodNotAllowed(app, '/api/v5/subscriptions/:id/replay', ['POST']);
  methodNotAllowed(app, '/api/v5/subscriptions/:id/resume', ['POST']);
}
