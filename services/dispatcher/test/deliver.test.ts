/**
 * The webhook HTTP client against receivers on 127.0.0.1: the SSRF rule applied to the address
 * actually connected to (also when name resolution said otherwise: DNS rebinding), literal
 * addresses refused before any connection, redirects not followed.
 */
import dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAddressRanges } from '@otm/core';
import { TargetRule, WebhookClient } from '../src/index.js';

describe('WebhookClient', () => {
  let server: http.Server;
  let port = 0;
  let connections = 0;
  let requests = 0;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      requests++;
      req.resume();
      req.on('end', () =>
        req.url === '/redirect' ? res.writeHead(307, { location: 'http://10.0.0.1/' }).end() : res.writeHead(204).end(),
      );
    });
    server.on('connection', () => connections++);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  const body = Buffer.from('{"changes":[]}');
  const post = (client: WebhookClient, url: string) =>
    client.post(url, body, { 'content-type': 'application/json' }, new AbortController().signal);

  it('delivers to an allowed address', async () => {
    const client = new WebhookClient(new TargetRule(parseAddressRanges('127.0.0.1')));
    try {
      expect(await post(client, `http://127.0.0.1:${port}/ok`)).toMatchObject({ outcome: 'delivered', status: 204 });
    } finally {
      await client.close();
    }
  });

  it('refuses a literal address before connecting', async () => {
    const client = new WebhookClient(new TargetRule());
    const before = connections;
    try {
      const r = await post(client, `http://127.0.0.1:${port}/ok`);
      expect(r).toMatchObject({ outcome: 'refused', error: expect.stringContaining('127.0.0.1 is a loopback address') });
      expect(connections).toBe(before);
    } finally {
      await client.close();
    }
  });

  it('refuses the address actually connected to, whatever name resolution said (DNS rebinding)', async () => {
    const rule = new TargetRule();
    // A resolver that lets a name through to loopback, as a rebinding name would after a check.
    Object.defineProperty(rule, 'lookup', {
      value: (_host: string, options: dns.LookupOptions, cb: (...args: unknown[]) => void) => dns.lookup('127.0.0.1', options, cb),
    });
    const client = new WebhookClient(rule);
    const before = requests;
    try {
      const r = await post(client, `http://rebind.example:${port}/ok`);
      expect(r).toMatchObject({ outcome: 'refused', error: expect.stringContaining('127.0.0.1 is a loopback address') });
      // Connected, and closed at once: no request was sent.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(requests).toBe(before);
    } finally {
      await client.close();
    }
  });

  it('does not follow redirects: a 3xx is a failed attempt', async () => {
    const client = new WebhookClient(new TargetRule(parseAddressRanges('127.0.0.1')));
    const before = requests;
    try {
      const r = await post(client, `http://127.0.0.1:${port}/redirect`);
      expect(r).toMatchObject({ outcome: 'failed', status: 307, error: expect.stringContaining('redirects are not followed') });
      expect(requests).toBe(before + 1);
    } finally {
      await client.close();
    }
  });

  it('fails a connection that is refused, with its error', async () => {
    const client = new WebhookClient(new TargetRule(parseAddressRanges('127.0.0.1')));
    try {
      const closed = http.createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const p = (closed.address() as AddressInfo).port;
      await new Promise((r) => closed.close(r));
      const r = await post(client, `http://127.0.0.1:${p}/`);
      expect(r.outcome).toBe('failed');
      expect(r.error).toMatch(/ECONNREFUSED|connection/);
    } finally {
      await client.close();
    }
  });

  /** A receiver that answers 200 at once, then a byte of its body every 40 ms, never ending it; or never answers (`silent`). */
  const slowReceiver = async (silent = false) => {
    const timers = new Set<NodeJS.Timeout>();
    const slow = http.createServer((req, res) => {
      req.resume();
      if (silent) return;
      res.writeHead(200, { 'content-type': 'text/plain' });
      const t = setInterval(() => res.write('.'), 40);
      timers.add(t);
      res.on('close', () => (clearInterval(t), timers.delete(t)));
    });
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
    return {
      url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}/`,
      close: async () => {
        for (const t of timers) clearInterval(t);
        slow.closeAllConnections();
        await new Promise((r) => slow.close(r));
      },
    };
  };

  it('ends an attempt whose answer never ends after connect + 2 × answer time (the status decides)', async () => {
    // Each piece of the body comes within the answer time: only the bound of the whole attempt ends it.
    const client = new WebhookClient(new TargetRule(parseAddressRanges('127.0.0.1')), {
      connectMs: 100,
      answerMs: 150,
      maxAnswerBytes: 65_536,
    });
    const slow = await slowReceiver();
    try {
      const outer = new AbortController();
      const r = await client.post(slow.url, body, { 'content-type': 'application/json' }, outer.signal);
      expect(r).toMatchObject({ outcome: 'delivered', status: 200 });
      expect(r.durationMs).toBeGreaterThanOrEqual(390);
      expect(r.durationMs).toBeLessThan(2_000);
      // The caller's signal is not touched by it.
      expect(outer.signal.aborted).toBe(false);
    } finally {
      await slow.close();
      await client.close();
    }
  });

  it('reads at most maxAnswerBytes of a 2xx answer: a receiver answering 10 MB loses the connection early', async () => {
    const client = new WebhookClient(new TargetRule(parseAddressRanges('127.0.0.1')));
    const written: number[] = [];
    const big = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        // Announced or not: 10 MB, 8 KB at a time, until the client hangs up.
        const announced = req.url === '/announced';
        res.writeHead(200, announced ? { 'content-length': String(10_000_000) } : {});
        let sent = 0;
        const t = setInterval(() => {
          if (sent >= 10_000_000) return void (clearInterval(t), res.end());
          res.write(Buffer.alloc(8192, 0x61));
          sent += 8192;
        }, 2);
        res.on('close', () => (clearInterval(t), written.push(sent)));
      });
    });
    await new Promise<void>((resolve) => big.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(big.address() as AddressInfo).port}`;
      for (const path of ['/announced', '/streamed']) {
        const r = await client.post(`${url}${path}`, body, { 'content-type': 'application/json' }, new AbortController().signal);
        expect(r, path).toMatchObject({ outcome: 'delivered', status: 200 });
      }
      await new Promise((r) => setTimeout(r, 50));
      expect(written).toHaveLength(2);
      // The announced one is dropped on its head; the streamed one once past 64 KiB (and what the sockets buffered).
      for (const n of written) expect(n).toBeLessThan(2_000_000);
    } finally {
      big.closeAllConnections();
      await new Promise((r) => big.close(r));
      await client.close();
    }
  });

  it('stops an attempt when its signal is aborted (before or during it), as stopped', async () => {
    const client = new WebhookClient(new TargetRule(parseAddressRanges('127.0.0.1')));
    const silent = await slowReceiver(true);
    try {
      const outer = new AbortController();
      const started = Date.now();
      const during = client.post(silent.url, body, { 'content-type': 'application/json' }, outer.signal);
      setTimeout(() => outer.abort(), 100);
      expect(await during).toMatchObject({ outcome: 'failed', error: 'stopped' });
      expect(Date.now() - started).toBeLessThan(5_000);
      const before = await client.post(silent.url, body, { 'content-type': 'application/json' }, outer.signal);
      expect(before).toMatchObject({ outcome: 'failed', error: 'stopped' });
    } finally {
      await silent.close();
      await client.close();
    }
  });
});
