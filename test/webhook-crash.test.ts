/**
 * Webhook delivery of the embedded service (`otm serve`, whose dispatcher runs inside it) killed
 * with SIGKILL in the middle of its deliveries to a receiver that fails one request in ten and is
 * slow on another one in ten, then started again on the same data folder: every change of the
 * feed arrives at least once, each entity's changes first arrive in feed order, and the
 * duplicates are counted and reported.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkArrivals, startFlakyReceiver, until, type FeedItem } from '../services/otm/test/receiver.js';
import { startServe, stop, type Running } from './process.js';

const TOKEN = 'webhook-crash-token';
const headers = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
const uuid = (prefix: string, i: number) => `${prefix}-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
const running: Running[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const r of running) await stop(r, 'SIGKILL');
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

describe('webhooks of otm serve, killed with SIGKILL mid-delivery', () => {
  it('20,000 changes to a receiver failing 1 in 10 and slow 1 in 10: every change arrives, in order per entity', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-webhook-crash-'));
    dirs.push(dataDir);
    const env = {
      OTM_DATA_DIR: dataDir,
      OTM_TOKENS: `${TOKEN}:acme:read+write`,
      OTM_WEBHOOK_ALLOW: '127.0.0.1',
      OTM_WEBHOOK_BATCH: '250',
    };
    const rx = await startFlakyReceiver((n) => (n % 10 === 3 ? 'fail' : n % 10 === 7 ? 'slow' : 'ok'));
    let svc = await startServe(env);
    running.push(svc);
    const call = async (method: string, p: string, body?: unknown) => {
      const res = await fetch(`${svc.url}${p}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
      const text = await res.text();
      expect(res.status, `${method} ${p}: ${text.slice(0, 300)}`).toBeLessThan(300);
      return JSON.parse(text || 'null');
    };
    try {
      const sub = await call('POST', '/api/v5/subscriptions', { url: `http://127.0.0.1:${rx.port}/hook`, kinds: ['vehicles', 'events'] });
      const VEHICLES = 200;
      const ROUNDS = 10;
      const EVENTS = 18_000;
      let e = 0;
      for (let round = 0; round < ROUNDS; round++) {
        if (round === 4) {
          // In the middle of the deliveries (the writes are all acknowledged): kill -9, start again.
          await until(
            () => rx.received.length,
            (n) => n >= 2_000,
            60_000,
            'the first deliveries',
          );
          svc.child.kill('SIGKILL');
          await stop(svc);
          svc = await startServe(env);
          running.push(svc);
        }
        await call(
          'POST',
          '/api/v5/bulk/vehicles',
          Array.from({ length: VEHICLES }, (_, i) => ({ id: uuid('6f300000', i), name: `truck ${i} round ${round}` })),
        );
        await call(
          'POST',
          '/api/v5/bulk/events',
          Array.from({ length: EVENTS / ROUNDS }, () => {
            const n = e++;
            return {
              id: uuid('6f400000', n),
              eventType: 'locationUpdateEvent',
              lifecycle: 'actual',
              creationDate: new Date(Date.UTC(2026, 2, 2) + n * 1000).toISOString(),
              geoReference: { type: 'latLonPointGeoReference', lat: 52 + (n % 100) / 1000, lon: 5 },
              vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: uuid('6f300000', n % VEHICLES) },
            };
          }),
        );
      }
      // The feed after the subscription's first cursor: what must arrive.
      const expected: FeedItem[] = [];
      let next = `/api/v5/changes?kinds=vehicles,events&limit=1000&cursor=${encodeURIComponent(sub.cursor)}`;
      for (;;) {
        const page = await call('GET', next);
        if (page.items.length === 0) break;
        expected.push(...page.items.map(({ cursor, op, kind, id }: FeedItem) => ({ cursor, op, kind, id })));
        next = page.next;
      }
      expect(expected.length).toBe(VEHICLES * ROUNDS + EVENTS);
      const { duplicates, byEntity, outOfOrder } = await until(
        () => checkArrivals(expected, rx.received),
        (a) => a.missing === 0,
        240_000,
        'every change at the receiver',
        (a) => String(a.missing),
      );
      expect(outOfOrder.slice(0, 5)).toEqual([]);
      expect(byEntity.get(`vehicles/${uuid('6f300000', 0)}`)?.length).toBe(ROUNDS);
      const { requests, failed, slow } = rx.stats();
      console.log(
        `webhooks, otm serve killed once: ${expected.length} changes, ${rx.received.length} received in 2xx answers ` +
          `(${duplicates} twice or more), ${requests} requests (${failed} answered 500, ${slow} slow)`,
      );
      expect(failed).toBeGreaterThan(0);
    } finally {
      await rx.close();
    }
  }, 400_000);
});
