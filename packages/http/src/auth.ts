/**
 * Credentials other than the OTM_TOKENS (which `TokenVerifier` checks in place): JWTs (jwt.ts)
 * and API keys (`otm keys`), each checked asynchronously. The HTTP app tries them in order after
 * the static tokens; the first that `accepts` a token's shape decides.
 */
import type { Principal } from '@otm/core';

/** A principal, or why not: 401 (the credential) or 503 (what checks it is unreachable). */
export type AuthOutcome = { readonly principal: Principal } | { readonly status: 401 | 503; readonly message: string };

export interface BearerAuthenticator {
  /** Whether the token has this kind of credential's shape (no I/O). */
  accepts(token: string): boolean;
  verify(token: string): Promise<AuthOutcome>;
}
