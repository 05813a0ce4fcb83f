/**
 * A webhook receiver for tests: a node:http server on 127.0.0.1 that keeps every delivery it gets
 * (headers, body, the answer given) and answers as the test says.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Delivery {
  readonly headers: http.IncomingHttpHeaders;
  readonly raw: Buffer;
  readonly body: { deliveryId: string; subscription: string; changes: Change[] };
  /** The status answered (undefined: the answer was not given, e.g. a timeout). */
  status?: number;
}

export interface Change {
  cursor: string;
  op: 'put' | 'delete';
  kind: string;
  id: string;
  lifecycle?: string;
  document?: Record<string, any>;
}

/** What to do with a request: answer a status, or take over the response. */
export type Answer = number | ((req: http.IncomingMessage, res: http.ServerResponse, d: Delivery) => void);

export interface Receiver {
  readonly url: string;
  readonly port: number;
  readonly deliveries: Delivery[];
  /** The answer to the next requests (default 200). */
  answer: Answer;
  /** Changes of the deliveries answered 2xx, in the order received. */
  delivered(): Change[];
  close(): Promise<void>;
}

export async function startReceiver(path = '/hook'): Promise<Receiver> {
  const deliveries: Delivery[] = [];
  const sockets = new Set<import('node:net').Socket>();
  const r: Receiver = {
    url: '',
    port: 0,
    deliveries,
    answer: 200,
    delivered: () => deliveries.filter((d) => d.status !== undefined && d.status >= 200 && d.status < 300).flatMap((d) => d.body.changes),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      let body: Delivery['body'];
      try {
        body = JSON.parse(raw.toString('utf8')) as Delivery['body'];
      } catch {
        body = { deliveryId: '', subscription: '', changes: [] };
      }
      const d: Delivery = { headers: req.headers, raw, body };
      deliveries.push(d);
      const a = r.answer;
      if (typeof a === 'number') {
        d.status = a;
        res.writeHead(a, { 'content-type': 'text/plain' }).end(a >= 300 ? `answer ${a}` : 'ok');
      } else a(req, res, d);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  Object.assign(r, { port, url: `http://127.0.0.1:${port}${path}` });
  return r;
}

/** The members of a change that tell it apart. */
export interface FeedItem {
  cursor: string;
  op: string;
  kind: string;
  id: string;
}

/** A receiver on 127.0.0.1 that answers `pick(n)` to its n-th request and keeps the changes of 2xx answers in arrival order. */
export async function startFlakyReceiver(pick: (n: number) => 'ok' | 'fail' | 'slow', port = 0) {
  const received: FeedItem[] = [];
  let requests = 0;
  let failed = 0;
  let slow = 0;
  const sockets = new Set<import('node:net').Socket>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const what = pick(requests++);
      const ok = () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { changes: FeedItem[] };
        received.push(...body.changes.map(({ cursor, op, kind, id }) => ({ cursor, op, kind, id })));
        res.writeHead(200).end('ok');
      };
      if (what === 'fail') {
        failed++;
        res.writeHead(500).end('no');
      } else if (what === 'slow') {
        slow++;
        setTimeout(ok, 1_500);
      } else ok();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    received,
    stats: () => ({ requests, failed, slow }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Whether `OTM-Signature` is `t=<t>,v1=<HMAC-SHA256 of "<t>.<body>" with the secret>`, as a receiver checks it. */
export function verifySignature(secret: string, header: string | undefined, raw: Buffer, toleranceSeconds = 300): boolean {
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header ?? '');
  if (!m) return false;
  const t = Number(m[1]);
  if (Math.abs(Date.now() / 1000 - t) > toleranceSeconds) return false;
  const expected = createHmac('sha256', secret).update(`${m[1]}.`).update(raw).digest();
  return timingSafeEqual(expected, Buffer.from(m[2]!, 'hex'));
}

/** What arrived of the changes `expected` (in feed order), given the changes `received` (in arrival order). */
export interface Arrivals {
  /** How many expected changes have not arrived yet. */
  missing: number;
  /** The index in `received` of each cursor's first arrival. */
  firstArrival: Map<string, number>;
  /** The arrivals after the first of their change. */
  duplicates: number;
  /** Per `kind/id`, the first arrivals of its changes in feed order (filled once nothing is missing). */
  byEntity: Map<string, number[]>;
  /** The entities whose changes first arrived out of feed order (filled once nothing is missing). */
  outOfOrder: Array<[string, number[]]>;
}

/** Checks that every change of `expected` arrived, each entity's in feed order (by first arrival), and counts the duplicates. */
export function checkArrivals(expected: readonly FeedItem[], received: readonly FeedItem[]): Arrivals {
  const firstArrival = new Map<string, number>();
  received.forEach((c, i) => {
    if (!firstArrival.has(c.cursor)) firstArrival.set(c.cursor, i);
  });
  const missing = expected.filter((c) => !firstArrival.has(c.cursor)).length;
  const duplicates = received.length - firstArrival.size;
  const byEntity = new Map<string, number[]>();
  if (missing > 0) return { missing, firstArrival, duplicates, byEntity, outOfOrder: [] };
  for (const c of expected) {
    const k = `${c.kind}/${c.id}`;
    const list = byEntity.get(k) ?? [];
    list.push(firstArrival.get(c.cursor)!);
    byEntity.set(k, list);
  }
  const outOfOrder = [...byEntity.entries()].filter(([, ats]) => ats.some((a, i) => i > 0 && a < ats[i - 1]!));
  return { missing, firstArrival, duplicates, byEntity, outOfOrder };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `read` until `ok`, or fails after `ms`. */
export async function until<T>(
  read: () => T | Promise<T>,
  ok: (v: T) => boolean,
  ms = 10_000,
  what = 'condition',
  describe: (v: T) => string = (v) => JSON.stringify(v)?.slice(0, 2_000) ?? String(v),
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`${what} not reached within ${ms} ms: ${describe(v)}`);
    await sleep(25);
  }
}
