/**
 * The streams of a token (OTM_STREAMS_PER_TOKEN) counted across query processes: two `otm query`
 * processes on one Redis (the entity store, whose change feed the streams follow; the in-process bus
 * and each its own embedded event store, which the stream does not read) count one set of slots
 * (packages/distributed/src/redis/stream-slots.ts). Opening one stream more than the limit through
 * either process is a 429 in the model's error format, a ticket counts as its token whichever
 * process gave it, closing a stream frees its slot for both, and the slots of a process killed
 * with SIGKILL free themselves within their expiry (three heartbeats: OTM_IDLE_TIMEOUT_MS 2000
 * makes the heartbeat 1 s).
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrationEnabled, requireServices, startRedis, type RedisService } from '../infra/services.js';
import { startOtm, stop, type Running } from '../process.js';

const PER_TOKEN = 3;

/** A stream opened with http.get: its status, its body when it is not a stream, and close(). */
interface Opened {
  readonly status: number;
  readonly body: string;
  close(): void;
}

function open(base: string, query: string, headers: Record<string, string>): Promise<Opened> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${base}/api/v5/stream${query}`, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      const close = () => {
        req.destroy();
        res.destroy();
      };
      if (res.statusCode === 200) {
        res.resume();
        resolve({ status: 200, body: '', close });
        return;
      }
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, close }));
    });
    req.on('error', reject);
  });
}

/** Tries to open a stream every 100 ms until one is let through (or fails after `ms`); how long that took. */
async function openWhenFree(base: string, headers: Record<string, string>, held: Opened[], ms: number): Promise<number> {
  const started = Date.now();
  for (;;) {
    const s = await open(base, '', headers);
    if (s.status === 200) {
      held.push(s);
      return Date.now() - started;
    }
    expect(s.status, s.body).toBe(429);
    if (Date.now() - started > ms) throw new Error(`no stream let through within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const enabled = integrationEnabled('stream slots shared by two query processes through Redis (own redis-server)');
describe.skipIf(!enabled)('the streams of a token, counted across two query processes through Redis', () => {
  let redis: RedisService;
  const query: Running[] = [];
  const dirs: string[] = [];
  const held: Opened[] = [];
  beforeAll(async () => {
    requireServices(['redis']);
    redis = await startRedis({ own: true });
    for (let i = 0; i < 2; i++) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-stream-slots-'));
      dirs.push(dir);
      query.push(
        await startOtm(['query'], {
          OTM_BUS: 'memory',
          OTM_ENTITY_STORE: 'redis',
          REDIS_URL: redis.url,
          OTM_DATA_DIR: dir,
          OTM_TOKENS: 'reader-one-token:acme:read,reader-two-token:acme:read',
          OTM_STREAMS_PER_TOKEN: String(PER_TOKEN),
          OTM_IDLE_TIMEOUT_MS: '2000',
        }),
      );
    }
  }, 60_000);
  afterAll(async () => {
    for (const s of held) s.close();
    for (const r of query) await stop(r);
    await redis?.stop();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });

  const one = { authorization: 'Bearer reader-one-token' };
  const two = { authorization: 'Bearer reader-two-token' };
  const url = (i: number) => query[i]!.url;
  const keep = async (i: number, headers: Record<string, string>, q = '') => {
    const s = await open(url(i), q, headers);
    expect(s.status, s.body).toBe(200);
    held.push(s);
    return s;
  };

  it('one stream beyond the limit through either process is a 429; a ticket counts as its token; a close frees a slot for both', async () => {
    const first = await keep(0, one);
    await keep(1, one);
    // A ticket given by one process, taken by the other: the same token.
    const res = await fetch(`${url(0)}/api/v5/stream/tickets`, { method: 'POST', headers: one });
    const { ticket } = (await res.json()) as { ticket: string };
    await keep(1, {}, `?ticket=${encodeURIComponent(ticket)}`);
    for (const i of [0, 1]) {
      const refused = await open(url(i), '', one);
      expect(refused.status).toBe(429);
      expect(JSON.parse(refused.body)).toEqual([{ type: 'tooManyStreams', message: expect.stringContaining('OTM_STREAMS_PER_TOKEN') }]);
    }
    expect((await open(url(0), `?ticket=${encodeURIComponent(ticket)}`, {})).status).toBe(429);
    // Another token of the same tenant has its own.
    await keep(0, two);
    // Closing a stream on one process frees its slot for the other (as soon as the process sees the close).
    first.close();
    held.splice(held.indexOf(first), 1);
    expect(await openWhenFree(url(1), one, held, 2_000)).toBeLessThan(2_000);
    expect((await open(url(0), '', one)).status).toBe(429);
  }, 30_000);

  it('the slots of a process killed with SIGKILL free themselves within their expiry (three heartbeats)', async () => {
    // The token holds its 3 streams on process 1 (the test above), which dies without a word.
    await stop(query[1]!, 'SIGKILL');
    expect((await open(url(0), '', one)).status).toBe(429);
    // Heartbeat 1 s, slots held 3 s from their last renewal (or from their taking, for one not
    // renewed yet): all free within about 3 s of the kill.
    const killed = Date.now();
    for (let i = 0; i < PER_TOKEN; i++) await openWhenFree(url(0), one, held, 6_000);
    expect(Date.now() - killed).toBeLessThan(5_000);
    expect((await open(url(0), '', one)).status).toBe(429);
  }, 30_000);
});
