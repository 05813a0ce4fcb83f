/**
 * Bearer tokens from OTM_TOKENS: `token:tenant:scopes`, scopes (`read`, `write`, `read:<kind>`,
 * `write:<kind>`) joined by `+`; and the scope rule every credential (these, JWTs, API keys) follows.
 * Tokens are kept only as SHA-256 digests and compared in constant time; they are never logged.
 */
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';
import { isKindSegment } from '@otm/model';

/** What a route needs: `read` (GET) or `write` (PUT, POST, DELETE). */
export type Scope = 'read' | 'write';
export interface TokenEntry {
  readonly tenant: string;
  /** `read`, `write`, or one kind's: `read:<kind>`, `write:<kind>` (docs/auth.md). */
  readonly scopes: ReadonlySet<string>;
  /** SHA-256 of the token. */
  readonly digest: Buffer;
}
export interface Principal {
  readonly tenant: string;
  /** `read`, `write`, `read:<kind>`, `write:<kind>`; see `allows`. */
  readonly scopes: ReadonlySet<string>;
  /**
   * Which credential this is, never the credential itself: for an OTM_TOKENS entry the token's
   * SHA-256 in hex. What is counted per token (open streams) is counted by it; it is secret-derived,
   * so nothing shows it as it is (the stream tickets carry a keyed hash of it).
   */
  readonly id?: string;
  /**
   * What the per-credential quota (OTM_RATE_LIMIT) counts by, when not `id`: a JWT's subject (every
   * token of one subject shares its quota), where `id` is the one token's.
   */
  readonly quotaKey?: string;
}

export const TENANT_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Whether `s` is a scope a credential may hold: `read`, `write`, or `read:<kind>` / `write:<kind>` of a kind of the model. */
export function isScope(s: string): boolean {
  if (s === 'read' || s === 'write') return true;
  const m = /^(read|write):(.+)$/.exec(s);
  return m !== null && isKindSegment(m[2]!);
}

/**
 * Whether a principal may do what a route needs: the plain scope (`read`, `write`) covers every
 * kind; `read:<kind>` / `write:<kind>` covers the requests of that kind only (`kind`: the kind the
 * request names, undefined for routes about no one kind, which need the plain scope).
 */
export function allows(scopes: ReadonlySet<string>, need: Scope, kind: string | undefined): boolean {
  return scopes.has(need) || (kind !== undefined && scopes.has(`${need}:${kind}`));
}
const TOKEN_RE = /^[\x21-\x7e]{8,512}$/;

// crypto.hash is the one-shot form of createHash (about half the cost per request).
const digest = (token: string): Buffer => hash('sha256', token, 'buffer');

export function parseTokens(spec: string): TokenEntry[] {
  const entries: TokenEntry[] = [];
  spec.split(',').forEach((raw, i) => {
    const item = raw.trim();
    if (item === '') return;
    const parts = item.split(':');
    if (parts.length < 3) {
      throw new Error(`entry ${i + 1} must be token:tenant:scopes (three parts separated by ':')`);
    }
    // A per-kind scope has a ':' of its own (write:events): the scopes are all after the tenant.
    const [token, tenant] = parts as [string, string];
    const scopes = parts.slice(2).join(':');
    if (!TOKEN_RE.test(token) || token.includes(',')) {
      throw new Error(`entry ${i + 1}: a token must be 8 to 512 visible characters without ':' or ','`);
    }
    if (!TENANT_RE.test(tenant)) {
      throw new Error(`entry ${i + 1}: tenant '${tenant}' must be 1-64 letters, digits, '.', '_' or '-'`);
    }
    const set = new Set<string>();
    for (const s of scopes.split('+')) {
      if (!isScope(s)) throw new Error(`entry ${i + 1}: unknown scope '${s}' (read, write, read:<kind>, write:<kind>)`);
      set.add(s);
    }
    entries.push({ tenant, scopes: set, digest: digest(token) });
  });
  if (entries.length === 0) throw new Error('holds no token');
  const seen = new Set<string>();
  for (const e of entries) {
    const k = e.digest.toString('hex');
    if (seen.has(k)) throw new Error('the same token is listed twice');
    seen.add(k);
  }
  return entries;
}

export const generateToken = (): string => randomBytes(24).toString('base64url');

export class TokenVerifier {
  constructor(private readonly entries: readonly TokenEntry[]) {}

  /**
   * The principal of a presented token, or undefined. Every configured digest is compared with
   * `timingSafeEqual`, without an early exit, so the time taken does not depend on which (if any)
   * token matched.
   */
  verify(token: string): Principal | undefined {
    const d = digest(token);
    let found: TokenEntry | undefined;
    for (const e of this.entries) {
      if (timingSafeEqual(d, e.digest) && found === undefined) found = e;
    }
    return found && { tenant: found.tenant, scopes: found.scopes, id: found.digest.toString('hex') };
  }
}
