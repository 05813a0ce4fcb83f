/**
 * Embedded, durable storage on LMDB (the `lmdb` package: a memory-mapped B+tree with
 * copy-on-write transactions; its binary ships inside an npm package, so nothing compiles at
 * install). One environment under `<dataDir>/store` holds two databases: `entities` (entity
 * store) and `telemetry` (event store). A write resolves only after its transaction is committed
 * and flushed to disk, so an acknowledged write survives `kill -9` and power loss. Concurrent
 * writes are batched into one transaction, which is what makes durable writes fast.
 *
 * Keys: `tenant \0 kind \0 key \0 rank` where rank is the lifecycle rank (0-5); all versions of
 * one document are adjacent, and the latest lifecycle is the last of them.
 */
import fs from 'node:fs';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { KindSegment } from '@otm/model';
import type { DocumentWrite, EntityStore, EventStore, StoredDocument } from '@otm/core';

const SEP = '\u0000';
const prefixOf = (tenant: string, kind: string, key: string) => `${tenant}${SEP}${kind}${SEP}${key}${SEP}`;

class LmdbDocuments implements EntityStore, EventStore {
  constructor(
    private readonly root: RootDatabase,
    private readonly db: Database<string, string>,
  ) {}

  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument | undefined> {
    const prefix = prefixOf(tenant, kind, key);
    if (lifecycleRank !== undefined) {
      const json = this.db.get(prefix + lifecycleRank);
      return json === undefined ? undefined : { kind, key, lifecycleRank, json };
    }
    for (const { key: k, value } of this.db.getRange({ start: prefix + '9', end: prefix, reverse: true, limit: 1 })) {
      return { kind, key, lifecycleRank: Number((k as string).slice(prefix.length)), json: value };
    }
    return undefined;
  }

  async write(writes: readonly DocumentWrite[]): Promise<void> {
    if (writes.length === 0) return;
    await this.db.transaction(() => {
      for (const w of writes) {
        if (w.op === 'put') {
          const d = w.doc;
          this.db.put(prefixOf(w.tenant, d.kind, d.key) + d.lifecycleRank, d.json);
        } else {
          const prefix = prefixOf(w.tenant, w.kind, w.key);
          for (const k of this.db.getKeys({ start: prefix, end: prefix + '9' })) this.db.remove(k);
        }
      }
    });
    await this.root.flushed;
  }

  async ready(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {}
}

export interface EmbeddedStores {
  readonly entities: EntityStore;
  readonly events: EventStore;
  close(): Promise<void>;
}

export function openEmbeddedStores(dataDir: string): EmbeddedStores {
  const dir = path.join(dataDir, 'store');
  fs.mkdirSync(dir, { recursive: true });
  const root = open({ path: path.join(dir, 'otm.mdb'), maxDbs: 8, compression: false });
  const entities = new LmdbDocuments(root, root.openDB<string, string>({ name: 'entities', encoding: 'string' }));
  const events = new LmdbDocuments(root, root.openDB<string, string>({ name: 'telemetry', encoding: 'string' }));
  return {
    entities,
    events,
    close: async () => {
      await root.flushed;
      await root.close();
    },
  };
}
