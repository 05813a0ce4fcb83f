/**
 * API keys (`otm keys`): `otm_` and 32 random bytes in base64url. Only their SHA-256 is stored;
 * a presented key is looked up by it.
 */
import { hash, randomBytes, randomUUID } from 'node:crypto';
import type { ApiKeyRecord } from './ports.js';

export const API_KEY_PREFIX = 'otm_';
/** The shape of a key: the prefix and 43 base64url characters (32 bytes). */
export const API_KEY_RE = /^otm_[A-Za-z0-9_-]{43}$/;

export const apiKeyHash = (key: string): string => hash('sha256', key, 'hex');

/** A new key and its record (not stored yet). */
export function newApiKey(fields: { tenant: string; scopes: readonly string[]; name?: string; expiresAt?: string; now?: Date }): {
  key: string;
  record: ApiKeyRecord;
} {
  const key = `${API_KEY_PREFIX}${randomBytes(32).toString('base64url')}`;
  const record: ApiKeyRecord = {
    id: randomUUID(),
    ...(fields.name === undefined ? {} : { name: fields.name }),
    tenant: fields.tenant,
    scopes: [...fields.scopes],
    hash: apiKeyHash(key),
    createdAt: (fields.now ?? new Date()).toISOString(),
    ...(fields.expiresAt === undefined ? {} : { expiresAt: fields.expiresAt }),
  };
  return { key, record };
}

/** Why a stored key may not be used now, or undefined when it may. */
export function apiKeyRefusal(record: ApiKeyRecord, now = Date.now()): string | undefined {
  if (record.revokedAt !== undefined) return 'the API key has been revoked';
  if (record.expiresAt !== undefined && Date.parse(record.expiresAt) <= now) return 'the API key has expired';
  return undefined;
}
