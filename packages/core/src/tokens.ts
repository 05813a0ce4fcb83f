/**
 * Bearer tokens from OTM_TOKENS: `token:tenant:scopes`, scopes `read` and/or `write` joined by `+`.
 * Tokens are kept only as SHA-256 digests and compared in constant time; they are never logged.
 */
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

export type Scope = 'read' | 'write';
export interface TokenEntry {
  readonly tenant: string;
  readonly scopes: ReadonlySet<Scope>;
  /** SHA-256 of the token. */
  readonly digest: Buffer;
}
export interface Principal {
  readonly tenant: string;
  readonly scopes: ReadonlySet<Scope>;
  /**
   * Which credential this is, never the credential itself: for an OTM_TOKENS entry the token's
   * SHA-256 in hex. What is counted per token (open streams) is counted by it; it is secret-derived,
   * so nothing shows it as it is (the stream tickets carry a keyed hash of it).
   */
  readonly id?: string;
}

const TENANT_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const TOKEN_RE = /^[\x21-\x7e]{8,512}$/;

// crypto.hash is the one-shot form of createHash (about half the cost per request).
const digest = (token: string): Buffer => hash('sha256', token, 'buffer');

export function parseTokens(spec: string): TokenEntry[] {
  const entries: TokenEntry[] = [];
  spec.split(',').forEach((raw, i) => {
    const item = raw.trim();
    if (item === '') return;
    const parts = item.split(':');
    if (parts.length !== 3) {
      throw new Error(`entry ${i + 1} must be token:tenant:scopes (three parts separated by ':')`);
    }
    const [token, tenant, scopes] = parts as [string, string, string];
    if (!TOKEN_RE.test(token) || token.includes(',')) {
      throw new Error(`entry ${i + 1}: a token must be 8 to 512 visible characters without ':' or ','`);
    }
    if (!TENANT_RE.test(tenant)) {
      throw new Error(`entry ${i + 1}: tenant '${tenant}' must be 1-64 letters, digits, '.', '_' or '-'`);
    }
    const set = new Set<Scope>();
    for (const s of scopes.split('+')) {
      if (s !== 'read' && s !== 'write') throw new Error(`entry ${i + 1}: unknown scope '${s}' (read, write)`);
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
