/**
 * Webhook subscriptions of the embedded deployment (the `SubscriptionStore` port), in the entity
 * store's LMDB environment, two databases:
 *
 * - `subscriptions`: `tenant|id` -> the subscription as JSON (WebhookSubscription);
 * - `subscription-deliveries`: `tenant|id|<time as 15 digits><counter as 6 digits>` -> one delivery
 *   attempt as JSON, the newest last; at most `keep` a subscription (older ones are removed in the
 *   transaction that adds one).
 *
 * Every change is a transaction of its own that reads what it changes inside it (so a check such
 * as `advance`'s revision and cursor, or `create`'s count, cannot race with another change), and
 * resolves once committed and flushed, like the entity store's units. One process owns the folder
 * (dir-lock.ts), so the leases are kept in memory: there is only ever one dispatcher.
 */
import type { RootDatabase } from 'lmdb';
import { WriteGate, gatedCommit } from './disk.js';
import { type DeliveryAttempt, type SubscriptionStore, type WebhookSubscription } from '@otm/core';
import { END, SEP } from './keys.js';
import { pad15, type Str } from './lists.js';

const subKey = (tenant: string, id: string) => `${tenant}${SEP}${id}`;

export class LmdbSubscriptionStore implements SubscriptionStore {
  /** Leases: one process a folder, so held in memory (key: tenant|id). */
  private readonly leases = new Map<string, { owner: string; until: number }>();
  /** Breaks ties between delivery keys made within one millisecond. */
  private counter = 0;
  /**
   * How many delivery attempts each subscription (tenant|id) has stored, counted at its first
   * record here: the oldest beyond what is kept are removed without walking past those kept.
   */
  private readonly recorded = new Map<string, number>();

  constructor(
    private readonly root: RootDatabase,
    private readonly subs: Str,
    private readonly attempts: Str,
    /** Whether LMDB takes writes (disk.ts); none: every commit is tried. */
    private readonly gate?: WriteGate,
  ) {}

  /** Runs `fn` in a write transaction of its own; its result once durable (refused while the disk is full: disk.ts). */
  private commit<T>(fn: () => T): Promise<T> {
    return gatedCommit(this.gate, 'a subscription change', async () => {
      const result = await this.root.childTransaction(fn);
      await this.root.flushed;
      return result;
    });
  }

  private read(tenant: string, id: string): WebhookSubscription | undefined {
    const raw = this.subs.get(subKey(tenant, id));
    return raw === undefined ? undefined : (JSON.parse(raw) as WebhookSubscription);
  }

  private write(sub: WebhookSubscription): void {
    void this.subs.put(subKey(sub.tenant, sub.id), JSON.stringify(sub));
  }

  /** Inside a transaction: changes the subscription by `change` (undefined: leave it), returns what was written. */
  private update(
    tenant: string,
    id: string,
    change: (s: WebhookSubscription) => WebhookSubscription | undefined,
  ): WebhookSubscription | undefined {
    const s = this.read(tenant, id);
    if (s === undefined) return undefined;
    const next = change(s);
    if (next !== undefined) this.write(next);
    return next;
  }

  create(sub: WebhookSubscription, maxPerTenant: number): Promise<boolean> {
    return this.commit(() => {
      const base = `${sub.tenant}${SEP}`;
      let count = 0;
      for (const _ of this.subs.getKeys({ start: base, end: base + END, limit: maxPerTenant })) count++;
      if (count >= maxPerTenant) return false;
      this.write(sub);
      return true;
    });
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async get(tenant: string, id: string): Promise<WebhookSubscription | undefined> {
    return this.read(tenant, id);
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async list(tenant: string): Promise<WebhookSubscription[]> {
    const base = `${tenant}${SEP}`;
    const out: WebhookSubscription[] = [];
    for (const { value } of this.subs.getRange({ start: base, end: base + END })) out.push(JSON.parse(value) as WebhookSubscription);
    return out.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async all(): Promise<Array<{ tenant: string; id: string }>> {
    const out: Array<{ tenant: string; id: string }> = [];
    for (const k of this.subs.getKeys({})) {
      const at = k.lastIndexOf(SEP);
      out.push({ tenant: k.slice(0, at), id: k.slice(at + 1) });
    }
    return out;
  }

  async delete(tenant: string, id: string): Promise<boolean> {
    const removed = await this.commit(() => {
      const key = subKey(tenant, id);
      if (this.subs.get(key) === undefined) return false;
      void this.subs.remove(key);
      const base = `${key}${SEP}`;
      for (const k of this.attempts.getKeys({ start: base, end: base + END })) void this.attempts.remove(k);
      return true;
    });
    this.leases.delete(subKey(tenant, id));
    this.recorded.delete(subKey(tenant, id));
    return removed;
  }

  async advance(tenant: string, id: string, rev: number, from: string | undefined, to: string): Promise<boolean> {
    const written = await this.commit(() =>
      this.update(tenant, id, (s) => {
        if (s.rev !== rev || s.cursor !== from) return undefined;
        const { failingSince: _f, ...rest } = s;
        return { ...rest, cursor: to };
      }),
    );
    return written !== undefined;
  }

  async pause(tenant: string, id: string, rev: number, reason: string): Promise<boolean> {
    const written = await this.commit(() =>
      this.update(tenant, id, (s) => (s.rev !== rev ? undefined : { ...s, state: 'paused', reason, rev: s.rev + 1 })),
    );
    return written !== undefined;
  }

  resume(tenant: string, id: string): Promise<WebhookSubscription | undefined> {
    return this.commit(() => {
      const s = this.read(tenant, id);
      if (s === undefined) return undefined;
      const { reason: _r, failingSince: _f, ...rest } = s;
      const next: WebhookSubscription = { ...rest, state: 'active', rev: s.rev + 1 };
      this.write(next);
      return next;
    });
  }

  replay(tenant: string, id: string, cursor: string): Promise<WebhookSubscription | undefined> {
    return this.commit(() => {
      const s = this.read(tenant, id);
      if (s === undefined) return undefined;
      const { failingSince: _f, ...rest } = s;
      const next: WebhookSubscription = { ...rest, cursor, rev: s.rev + 1 };
      this.write(next);
      return next;
    });
  }

  async recordDelivery(tenant: string, id: string, attempt: DeliveryAttempt, keep: number): Promise<void> {
    const seq = String(this.counter++ % 1_000_000).padStart(6, '0');
    const key = subKey(tenant, id);
    try {
      await this.commit(() => {
        // A delivered attempt needs the subscription only to be there (not parsed: one a batch).
        if (attempt.outcome === 'delivered') {
          if (this.subs.get(key) === undefined) return;
        } else {
          const s = this.read(tenant, id);
          if (s === undefined) return;
          if (s.failingSince === undefined) this.write({ ...s, failingSince: attempt.at });
        }
        const base = `${key}${SEP}`;
        let n = this.recorded.get(key);
        if (n === undefined) {
          n = 0;
          for (const _ of this.attempts.getKeys({ start: base, end: base + END })) n++;
        }
        void this.attempts.put(`${base}${pad15(attempt.at)}${seq}`, JSON.stringify(attempt));
        n++;
        // The newest `keep` stay (this one among them: its key sorts last, unless the clock went back).
        if (n > keep) {
          for (const k of this.attempts.getKeys({ start: base, end: base + END, limit: n - keep })) void this.attempts.remove(k);
          n = keep;
        }
        this.recorded.set(key, n);
      });
    } catch (e) {
      // Not committed: counted again at the next record.
      this.recorded.delete(key);
      throw e;
    }
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async deliveries(tenant: string, id: string, limit: number): Promise<DeliveryAttempt[]> {
    const base = `${subKey(tenant, id)}${SEP}`;
    const out: DeliveryAttempt[] = [];
    for (const { value } of this.attempts.getRange({ start: base + END, end: base, reverse: true, limit })) {
      out.push(JSON.parse(value) as DeliveryAttempt);
    }
    return out;
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async lease(tenant: string, id: string, owner: string, ms: number): Promise<boolean> {
    const key = subKey(tenant, id);
    const now = Date.now();
    const held = this.leases.get(key);
    if (held !== undefined && held.owner !== owner && held.until > now) return false;
    this.leases.set(key, { owner, until: now + ms });
    return true;
  }

  /** One process a folder: one dispatcher. */
  dispatchers(): Promise<number> {
    return Promise.resolve(1);
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async release(tenant: string, id: string, owner: string): Promise<void> {
    const key = subKey(tenant, id);
    if (this.leases.get(key)?.owner === owner) this.leases.delete(key);
  }
}
