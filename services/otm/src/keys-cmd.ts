/**
 * `otm keys create|list|revoke`: API keys, kept where the entity store is. Embedded: the data
 * folder's LMDB environment, opened beside a running `otm serve` if there is one (LMDB takes
 * several processes; the folder's lock guards the event log only, which this does not open).
 * Distributed: Redis, at REDIS_URL. The key is printed once, at creation; only its SHA-256 is kept.
 */
import { TENANT_RE, isScope, loadConfig, newApiKey, type ApiKeyRecord, type ApiKeyStore } from '@otm/core';
import { openRedisApiKeyStore } from '@otm/distributed';
import { openApiKeyStore } from '@otm/embedded';

export const KEYS_USAGE = `usage: otm keys create --tenant T --scopes read,write[,read:<kind>,write:<kind>...] [--name N] [--expires ISO-8601]
       otm keys list [--tenant T]
       otm keys revoke <id>`;

class UsageError extends Error {}

function options(args: readonly string[], allowed: readonly string[]): { opts: Map<string, string>; rest: string[] } {
  const opts = new Map<string, string>();
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (!a.startsWith('--')) {
      rest.push(a);
      continue;
    }
    const [name, inline] = a.slice(2).split(/=(.*)/s, 2) as [string, string | undefined];
    if (!allowed.includes(name)) throw new UsageError(`unknown option '--${name}'`);
    const value = inline ?? args[++i];
    if (value === undefined) throw new UsageError(`--${name} needs a value`);
    opts.set(name, value);
  }
  return { opts, rest };
}

function openStore(): { store: ApiKeyStore; close(): Promise<void> } {
  const config = loadConfig();
  if (config.entityStore === 'redis') return openRedisApiKeyStore(config.redisUrl!);
  return openApiKeyStore(config.dataDir);
}

const row = (r: ApiKeyRecord): string =>
  [r.id, r.name ?? '-', r.tenant, r.scopes.join(','), r.createdAt, r.expiresAt ?? '-', r.revokedAt ?? '-'].join('\t');

export async function runKeys(args: readonly string[], out: (line: string) => void, err: (line: string) => void): Promise<number> {
  const [sub, ...rest] = args;
  try {
    switch (sub) {
      case 'create': {
        const { opts, rest: extra } = options(rest, ['tenant', 'scopes', 'name', 'expires']);
        if (extra.length > 0) throw new UsageError(`unexpected '${extra[0]}'`);
        const tenant = opts.get('tenant');
        if (tenant === undefined || !TENANT_RE.test(tenant)) throw new UsageError('--tenant must be 1-64 letters, digits, ., _ or -');
        const scopes = (opts.get('scopes') ?? '').split(/[,+ ]/).filter((s) => s !== '');
        const bad = scopes.find((s) => !isScope(s));
        if (scopes.length === 0 || bad !== undefined) {
          throw new UsageError(
            `--scopes: ${bad === undefined ? 'none given' : `unknown scope '${bad}'`} (read, write, read:<kind>, write:<kind>)`,
          );
        }
        const expires = opts.get('expires');
        let expiresAt: string | undefined;
        if (expires !== undefined) {
          const t = Date.parse(expires);
          if (!/^\d{4}-\d{2}-\d{2}/.test(expires) || Number.isNaN(t))
            throw new UsageError(`--expires must be an ISO 8601 time, got '${expires}'`);
          if (t <= Date.now()) throw new UsageError('--expires is in the past');
          expiresAt = new Date(t).toISOString();
        }
        const name = opts.get('name');
        const { key, record } = newApiKey({
          tenant,
          scopes,
          ...(name === undefined ? {} : { name }),
          ...(expiresAt === undefined ? {} : { expiresAt }),
        });
        const s = openStore();
        try {
          await s.store.create(record);
        } finally {
          await s.close();
        }
        out(key);
        err(`otm keys: created key ${record.id} for tenant '${tenant}' (${scopes.join(',')}); the key above is shown only now: keep it`);
        return 0;
      }
      case 'list': {
        const { opts, rest: extra } = options(rest, ['tenant']);
        if (extra.length > 0) throw new UsageError(`unexpected '${extra[0]}'`);
        const s = openStore();
        let records: ApiKeyRecord[];
        try {
          records = await s.store.list(opts.get('tenant'));
        } finally {
          await s.close();
        }
        out(['id', 'name', 'tenant', 'scopes', 'created', 'expires', 'revoked'].join('\t'));
        for (const r of records) out(row(r));
        return 0;
      }
      case 'revoke': {
        const { rest: ids } = options(rest, []);
        if (ids.length !== 1) throw new UsageError('revoke takes one key id (otm keys list shows them)');
        const s = openStore();
        let r: ApiKeyRecord | undefined;
        try {
          r = await s.store.revoke(ids[0]!, new Date().toISOString());
        } finally {
          await s.close();
        }
        if (r === undefined) {
          err(`otm keys: no key ${ids[0]}`);
          return 1;
        }
        out(`revoked ${r.id} at ${r.revokedAt}; refused everywhere within 5 s`);
        return 0;
      }
      default:
        throw new UsageError(sub === undefined ? 'a subcommand is needed' : `unknown subcommand '${sub}'`);
    }
  } catch (e) {
    if (e instanceof UsageError) {
      err(`otm keys: ${e.message}\n${KEYS_USAGE}`);
      return 2;
    }
    throw e;
  }
}
