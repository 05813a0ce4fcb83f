/** What the dispatcher's tests share: waiting for a condition, fast timings, subscriptions and their store. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseAddressRanges, type SubscriptionStore, type WebhookSubscription } from '@otm/core';
import { openEmbeddedStores } from '@otm/embedded';
import type { DispatcherOptions } from '../src/index.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(10);
  }
}

/** The dispatcher's timings made short, receivers on 127.0.0.1 allowed. */
export const FAST: Partial<DispatcherOptions> = {
  batch: 10,
  allow: parseAddressRanges('127.0.0.1'),
  lingerMs: 20,
  pollMs: 10,
  scanMs: 30,
  countMs: 0,
  retry: { baseMs: 10, capMs: 20, windowMs: 60_000 },
};

let n = 0;
/** An active subscription at cursor 0, each with an id and secret of its own. */
export function subscription(tenant: string, url: string, more: Partial<WebhookSubscription> = {}): WebhookSubscription {
  n++;
  return {
    id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
    tenant,
    url,
    filter: {},
    secret: `secret-of-subscription-${n}`,
    state: 'active',
    cursor: '0',
    createdAt: Date.now(),
    rev: 0,
    ...more,
  };
}

/** The embedded subscription store in a temporary folder: `clear` deletes every subscription, `close` the folder. */
export function tempSubscriptionStore(): { store: SubscriptionStore; clear(): Promise<void>; close(): Promise<void> } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-dispatcher-'));
  const stores = openEmbeddedStores(dir);
  const store = stores.subscriptions;
  return {
    store,
    clear: async () => {
      for (const { tenant, id } of await store.all()) await store.delete(tenant, id);
    },
    close: async () => {
      await stores.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
