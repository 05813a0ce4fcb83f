/**
 * API keys of the embedded deployment (the `ApiKeyStore` port), in the entity store's LMDB
 * environment, two databases:
 *
 * - `api-keys`: id -> the key's record as JSON (ApiKeyRecord; the key's SHA-256, never the key);
 * - `api-key-hashes`: SHA-256 (hex) -> id.
 *
 * `otm keys` writes them from a process of its own while `otm serve` may run: LMDB takes writers of
 * several processes on one environment (its own lock file orders them), and the data folder's lock
 * (dir-lock.ts) guards the event log only, which `otm keys` does not open (`openApiKeyStore`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { open, type RootDatabase } from 'lmdb';
import { AdapterError, type ApiKeyRecord, type ApiKeyStore } from '@otm/core';
import type { Str } from './lists.js';
import { holdTurn } from './disk.js';

export class LmdbApiKeyStore implements ApiKeyStore {
  constructor(
    private readonly root: RootDatabase,
    private readonly keys: Str,
    private readonly hashes: Str,
  ) {}

  private async commit<T>(fn: () => T): Promise<T> {
    try {
      const running = this.root.transaction(fn);
      holdTurn(this.root); // a failed commit leaves no rejection unhandled (disk.ts)
      const result = await running;
      await this.root.flushed;
      return result;
    } catch (e) {
      throw new AdapterError('lmdb', `lmdb: an API key change failed (${(e as Error)?.message ?? String(e)})`, {
        retryable: true,
        cause: e,
      });
    }
  }

  async create(record: ApiKeyRecord): Promise<void> {
    await this.commit(() => {
      void this.keys.put(record.id, JSON.stringify(record));
      void this.hashes.put(record.hash, record.id);
    });
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async byHash(hash: string): Promise<ApiKeyRecord | undefined> {
    // Another process (`otm keys`) may have written since this one last read: a fresh read transaction.
    this.root.resetReadTxn();
    const id = this.hashes.get(hash);
    const raw = id === undefined ? undefined : this.keys.get(id);
    return raw === undefined ? undefined : (JSON.parse(raw) as ApiKeyRecord);
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async: as the port says
  async list(tenant?: string): Promise<ApiKeyRecord[]> {
    this.root.resetReadTxn();
    const out: ApiKeyRecord[] = [];
    for (const { value } of this.keys.getRange({})) {
      const r = JSON.parse(value) as ApiKeyRecord;
      if (tenant === undefined || r.tenant === tenant) out.push(r);
    }
    return out.sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1));
  }

  revoke(id: string, at: string): Promise<ApiKeyRecord | undefined> {
    return this.commit(() => {
      const raw = this.keys.get(id);
      if (raw === undefined) return undefined;
      const r = JSON.parse(raw) as ApiKeyRecord;
      if (r.revokedAt !== undefined) return r;
      const next: ApiKeyRecord = { ...r, revokedAt: at };
      void this.keys.put(id, JSON.stringify(next));
      return next;
    });
  }
}

/** 1 TiB: address space the LMDB file is mapped with (`storeMapSize`). */
const MAP_SIZE = 2 ** 40;

/**
 * The size of the LMDB file's memory map: 1 TiB of address space on a 64-bit system (none of it
 * memory until a page is read or written: pages count in the process's resident size as they are
 * touched, as with any size), so that the map never grows.
 *
 * Why. Opened without one, lmdb-js starts with a map of 128 KB and, each time the file outgrows it,
 * maps the file again at twice its size, keeping the earlier maps for the reads that may still use
 * them (its LMDB's `mdb_env_set_mapsize`, "we intentionally want to leave old maps around"); a page
 * read through several maps is resident once in each, which this saves (the figures:
 * docs/PERFORMANCE.md).
 *
 * Where it cannot: on a 32-bit system (lmdb-js maps a file larger than 4 GB a chunk at a time
 * there, and a fixed map would turn that on), lmdb-js's own growth; under a limit of address space
 * (`ulimit -v`, /proc/self/limits; a container's memory limit is not one: it counts resident pages,
 * not address space), a quarter of it, so that the rest of the process keeps room. The map is
 * read-only (no `useWritemap`, with which LMDB would make the file as large as its map).
 */
export function storeMapSize(): number | undefined {
  if (!/64|s390x/.test(process.arch)) return undefined;
  let limit = Infinity;
  try {
    const m = /^Max address space\s+(\d+)/m.exec(fs.readFileSync('/proc/self/limits', 'utf8'));
    if (m) limit = Number(m[1]);
  } catch {
    /* not Linux: no such limit known */
  }
  return limit >= 4 * MAP_SIZE ? MAP_SIZE : 2 ** Math.max(26, Math.floor(Math.log2(limit / 4)));
}

/** The LMDB environment of a data folder (created if absent), as every embedded process opens it. */
export function openStoreEnv(dataDir: string): RootDatabase {
  const dir = path.join(dataDir, 'store');
  fs.mkdirSync(dir, { recursive: true });
  const mapSize = storeMapSize();
  return open({ path: path.join(dir, 'otm.mdb'), maxDbs: 32, compression: false, ...(mapSize === undefined ? {} : { mapSize }) });
}

export const apiKeyStoreOf = (root: RootDatabase): LmdbApiKeyStore =>
  new LmdbApiKeyStore(
    root,
    root.openDB<string, string>({ name: 'api-keys', encoding: 'string' }),
    root.openDB<string, string>({ name: 'api-key-hashes', encoding: 'string' }),
  );

/**
 * The API keys of a data folder, for `otm keys`, whether or not `otm serve` runs on it: the LMDB
 * environment only, without the folder's lock (which guards the event log, not opened here).
 */
export function openApiKeyStore(dataDir: string): { store: LmdbApiKeyStore; close(): Promise<void> } {
  const root = openStoreEnv(dataDir);
  return {
    store: apiKeyStoreOf(root),
    close: async () => {
      await root.flushed;
      await root.close();
    },
  };
}
