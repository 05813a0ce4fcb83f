/**
 * The readers of configuration values (config.ts): each takes the environment and a variable's
 * name, and returns the value, its default, or throws a ConfigError naming the variable.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseAddressRanges, type AddressRange } from './address-ranges.js';
import type { JwtConfig } from './config.js';
import { parseRateLimit, type RateLimit } from './rate-limit.js';

/** A bad configuration value: `variable` names it. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

export type Env = Record<string, string | undefined>;

export function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  if (!(allowed as readonly string[]).includes(v)) {
    throw new ConfigError(name, `must be one of ${allowed.join(', ')}, got '${v}'`);
  }
  return v as T;
}

export function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) {
    throw new ConfigError(name, `must be a whole number from ${min} to ${max}, got '${v}'`);
  }
  return Number(v);
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration such as `500ms`, `90s`, `30m`, `12h` or `7d`, in ms. */
export function duration(env: Env, name: string, fallbackMs: number, minMs: number, maxMs: number): number {
  const v = env[name];
  if (v === undefined || v === '') return fallbackMs;
  const m = /^(\d{1,9})(ms|[smhd])$/.exec(v.trim());
  const ms = m ? Number(m[1]) * DURATION_UNITS[m[2]!]! : NaN;
  if (!(ms >= minMs && ms <= maxMs)) {
    throw new ConfigError(name, `must be a duration such as 12h or 7d, from ${minMs / 1000} s to ${maxMs / 86_400_000} days, got '${v}'`);
  }
  return ms;
}

/** `duration`, or `off` (0). */
export function durationOrOff(env: Env, name: string, fallbackMs: number, minMs: number, maxMs: number): number {
  if (env[name]?.trim() === 'off') return 0;
  try {
    return duration(env, name, fallbackMs, minMs, maxMs);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    throw new ConfigError(
      name,
      `must be off or a duration such as 1s or 5m, from ${minMs / 1000} s to ${maxMs / 60_000} minutes, got '${env[name]}'`,
    );
  }
}

/** OTM_RATE_LIMIT, OTM_TENANT_RATE_LIMIT: `1000/s`, `60000/m`, or unset (no limit). */
export function rateLimit(env: Env, name: string): RateLimit | undefined {
  const v = env[name];
  if (v === undefined || v.trim() === '') return undefined;
  try {
    return Object.freeze(parseRateLimit(v));
  } catch (e) {
    throw new ConfigError(name, (e as Error).message);
  }
}

export function url(env: Env, name: string, protocols: readonly string[], required: boolean): string | undefined {
  const v = env[name];
  if (v === undefined || v === '') {
    if (required) throw new ConfigError(name, 'is required by the chosen adapter');
    return undefined;
  }
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new ConfigError(name, `is not a URL: '${v}'`);
  }
  if (!protocols.includes(u.protocol)) {
    throw new ConfigError(name, `must use ${protocols.join(' or ')}, got '${u.protocol}'`);
  }
  return v;
}

export function addressRanges(env: Env, name: string): AddressRange[] {
  try {
    return parseAddressRanges(env[name] ?? '');
  } catch (e) {
    throw new ConfigError(name, (e as Error).message);
  }
}

const CLAIM_RE = /^[A-Za-z0-9_.:/-]{1,100}$/;

/** OTM_JWT_*: undefined without OTM_JWT_JWKS; with it, issuer and audience are required. */
export function jwtConfig(
  v: string | undefined,
  issuer: string | undefined,
  audience: string | undefined,
  tenantClaim: string | undefined,
  scopeClaim: string | undefined,
): JwtConfig | undefined {
  v = v?.trim();
  if (v === undefined || v === '') {
    for (const [name, value] of [
      ['OTM_JWT_ISSUER', issuer],
      ['OTM_JWT_AUDIENCE', audience],
    ] as const) {
      if (value !== undefined && value.trim() !== '') throw new ConfigError(name, 'is set but OTM_JWT_JWKS is not: set both, or neither');
    }
    return undefined;
  }
  let jwks: JwtConfig['jwks'];
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(v)) {
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      throw new ConfigError('OTM_JWT_JWKS', `is not a URL: '${v}'`);
    }
    // Plain http only to this machine (a local key server, tests): elsewhere anyone on the path could change the keys.
    const loopback = ['127.0.0.1', 'localhost', '[::1]'].includes(u.hostname);
    if (u.protocol !== 'https:' && !(u.protocol === 'http:' && loopback)) {
      throw new ConfigError('OTM_JWT_JWKS', `must be a file path or an https URL (http only on loopback), got '${u.protocol}'`);
    }
    jwks = { url: u.href };
  } else {
    jwks = { file: path.resolve(v) };
  }
  const required = (name: string, value: string | undefined) => {
    value = value?.trim();
    if (value === undefined || value === '') throw new ConfigError(name, 'is required with OTM_JWT_JWKS');
    return value;
  };
  const claim = (name: string, value: string | undefined, fallback: string) => {
    value = value?.trim();
    if (value === undefined || value === '') return fallback;
    if (!CLAIM_RE.test(value)) throw new ConfigError(name, `must be a claim name (letters, digits, _ . : / -), got '${value}'`);
    return value;
  };
  return Object.freeze({
    jwks: Object.freeze(jwks),
    issuer: required('OTM_JWT_ISSUER', issuer),
    audience: required('OTM_JWT_AUDIENCE', audience),
    tenantClaim: claim('OTM_JWT_TENANT_CLAIM', tenantClaim, 'tenant'),
    scopeClaim: claim('OTM_JWT_SCOPE_CLAIM', scopeClaim, 'scope'),
  });
}

/** OTM_MAP_STYLE: an http(s) tile URL template with {z}, {x} and {y}, or unset. */
export function mapStyle(v: string | undefined): string | undefined {
  if (v === undefined || v === '') return undefined;
  if (!/^https?:\/\/[^\s"'<>]+$/.test(v) || !['{z}', '{x}', '{y}'].every((p) => v.includes(p))) {
    throw new ConfigError(
      'OTM_MAP_STYLE',
      `must be an http(s) tile URL template with {z}, {x} and {y}, e.g. https://tiles.example.org/{z}/{x}/{y}.png`,
    );
  }
  return v;
}

/** OTM_WEB_DIR: a folder that holds the built pages (index.html and docs.html), or unset. */
export function webDir(v: string | undefined): string | undefined {
  if (v === undefined || v === '') return undefined;
  const dir = path.resolve(v);
  const missing = ['index.html', 'docs.html'].filter((page) => !fs.existsSync(path.join(dir, page)));
  if (missing.length > 0) {
    throw new ConfigError(
      'OTM_WEB_DIR',
      `'${dir}' is no build of the pages (${missing.join(' and ')} missing): npm run build makes services/web/dist`,
    );
  }
  return dir;
}
