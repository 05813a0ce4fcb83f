/**
 * Slow and greedy clients on real sockets: trickled headers, a stalled or trickled body, a silent
 * connection, an idle kept-alive connection, a client that does not read its answers, and more
 * connections than the cap. Each is cut off within a bounded time (the service runs here with
 * small limits), whatever token it sends; an answer, when one comes, is the model's error array.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService } from '../../services/otm/test/helpers.js';

const LIMITS = { headersTimeoutMs: 500, requestTimeoutMs: 1000, keepAliveTimeoutMs: 500, idleTimeoutMs: 1000, maxConnections: 1024 };
/** Longest a connection may stay open here once its limit is past (the limits above, plus slack for a loaded machine). */
const CUT_WITHIN_MS = 4000;

interface Exchange {
  /** What the service sent back. */
  readonly data: string;
  /** When the service closed the connection, from its opening; undefined if it was still open at the end. */
  readonly closedAfterMs: number | undefined;
}

/**
 * Opens a connection and writes `steps` on it, then `trickle` one byte every 200 ms. Ends when the
 * service closes the connection, or after `limitMs` (then the connection is closed here and
 * `closedAfterMs` is undefined).
 */
function exchange(port: number, steps: readonly string[], limitMs: number, trickle = ''): Promise<Exchange> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    let closed = false;
    const timers: NodeJS.Timeout[] = [];
    const done = (closedAfterMs: number | undefined) => {
      for (const t of timers) clearTimeout(t);
      socket.destroy();
      resolve({ data, closedAfterMs });
    };
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (data += d));
    socket.on('error', () => {}); // a reset is a close too
    socket.on('close', () => {
      if (closed) return;
      closed = true;
      done(Date.now() - started);
    });
    timers.push(
      setTimeout(() => {
        if (closed) return;
        closed = true;
        done(undefined);
      }, limitMs),
    );
    const send = async () => {
      for (const step of steps) socket.write(step);
      for (let i = 0; i < trickle.length && !closed; i++) {
        socket.write(trickle[i]!);
        await new Promise((r) => timers.push(setTimeout(r, 200)));
      }
    };
    // Fire and forget: nothing in it rejects (a failed write is an 'error' event, handled above).
    socket.on('connect', () => void send());
  });
}

/** Status and body of the first answer in `data`, if any. */
function firstAnswer(data: string): { status: number; body: string } | undefined {
  const m = /^HTTP\/1\.1 (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n/.exec(data);
  if (!m) return undefined;
  const length = /^content-length: *(\d+)/im.exec(m[2]!);
  const rest = data.slice(m[0].length);
  return { status: Number(m[1]), body: length ? rest.slice(0, Number(length[1])) : rest };
}

/** Either no answer, or a 408 with the model's error array. */
function expectTimeoutAnswer(data: string): void {
  const answer = firstAnswer(data);
  if (answer === undefined) return expect(data).toBe('');
  expect(answer.status).toBe(408);
  expect(JSON.parse(answer.body)).toEqual([{ type: 'requestTimeout', message: expect.any(String) }]);
}

const auth = 'Authorization: Bearer writer-token-acme\r\n';
const putHead = (token: string, length: number) =>
  `PUT /api/v5/vehicles HTTP/1.1\r\nHost: x\r\n${token}Content-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

describe('slow clients are cut off', () => {
  let svc: TestService;
  let port: number;
  beforeAll(async () => {
    svc = await startService({ connections: LIMITS });
    port = Number(new URL(await svc.app.listen({ host: '127.0.0.1', port: 0 })).port);
  });
  afterAll(async () => svc?.close());

  it('a connection that sends nothing', async () => {
    const x = await exchange(port, [], CUT_WITHIN_MS + 2000);
    expect(x.closedAfterMs).toBeLessThan(CUT_WITHIN_MS);
    expectTimeoutAnswer(x.data);
  });

  it('headers sent one byte at a time', async () => {
    const x = await exchange(
      port,
      ['GET /api/v5/vehicles/50824123-0924-4563-ac1e-ca0e37487823 HTTP/1.1\r\nHost: x\r\n'],
      CUT_WITHIN_MS + 2000,
      `X-Slow: ${'a'.repeat(100)}\r\n\r\n`,
    );
    expect(x.closedAfterMs).toBeLessThan(CUT_WITHIN_MS);
    expectTimeoutAnswer(x.data);
  });

  it.each([
    ['with a valid token', auth],
    ['without a token', ''],
  ])('a body that stalls, %s', async (_what, token) => {
    const x = await exchange(port, [putHead(token, 100), '{"entityType":'], CUT_WITHIN_MS + 2000);
    expect(x.closedAfterMs).toBeLessThan(CUT_WITHIN_MS);
    if (token !== '') expectTimeoutAnswer(x.data);
  });

  it.each([
    ['with a valid token', auth],
    ['without a token', ''],
    ['with an unknown token', 'Authorization: Bearer not-a-known-token\r\n'],
  ])('a body sent one byte every 200 ms, %s', async (_what, token) => {
    const body = JSON.stringify({ entityType: 'vehicle', name: 'x'.repeat(100) });
    const x = await exchange(port, [putHead(token, body.length)], CUT_WITHIN_MS + 2000, body);
    expect(x.closedAfterMs).toBeLessThan(CUT_WITHIN_MS);
    if (token === auth) expectTimeoutAnswer(x.data);
  });

  it('a kept-alive connection left idle after its answer', async () => {
    const x = await exchange(port, ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'], CUT_WITHIN_MS + 2000);
    expect(firstAnswer(x.data)?.status).toBe(200);
    expect(x.closedAfterMs).toBeLessThan(CUT_WITHIN_MS);
  });

  it('a client that does not read its answers', async () => {
    // Pipelined requests for a large answer, never read: the service's writes stop making progress.
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    socket.on('error', () => {});
    let closed = false;
    socket.on('close', () => (closed = true));
    socket.write('GET /api/v5/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(60));
    socket.pause();
    await new Promise((r) => setTimeout(r, CUT_WITHIN_MS));
    // Reading now drains what the service had written before it closed the connection.
    socket.resume();
    socket.on('data', () => {});
    await new Promise((r) => setTimeout(r, 1500));
    const wasClosed = closed;
    socket.destroy();
    expect(wasClosed).toBe(true);
  });

  it('a client that is quick is not cut off', async () => {
    const x = await exchange(port, ['GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'], CUT_WITHIN_MS);
    expect(firstAnswer(x.data)?.status).toBe(200);
  });
});

describe('the connection cap', () => {
  let svc: TestService;
  let port: number;
  beforeAll(async () => {
    svc = await startService({ connections: { ...LIMITS, keepAliveTimeoutMs: 10_000, idleTimeoutMs: 10_000, maxConnections: 3 } });
    port = Number(new URL(await svc.app.listen({ host: '127.0.0.1', port: 0 })).port);
  });
  afterAll(async () => svc?.close());

  /** A kept-alive connection that has had one answer (so the service has taken it). */
  async function held(): Promise<net.Socket> {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      socket.once('data', () => resolve());
      socket.once('close', () => reject(new Error('closed before its answer')));
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    });
    return socket;
  }

  it('closes connections beyond the cap and takes new ones once others have gone', async () => {
    const open = [await held(), await held(), await held()];
    try {
      const extra = await exchange(port, ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'], 3000);
      expect(extra.closedAfterMs).toBeDefined();
      expect(extra.data).toBe('');
      open.pop()!.destroy();
      await new Promise((r) => setTimeout(r, 200));
      const next = await exchange(port, ['GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'], 3000);
      expect(firstAnswer(next.data)?.status).toBe(200);
    } finally {
      for (const s of open) s.destroy();
    }
  });
});
