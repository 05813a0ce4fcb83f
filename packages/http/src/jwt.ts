/**
 * JWT bearer tokens (OTM_JWT_*), checked with `jose` against a JWKS: a file (read at start, read
 * again when it changes) or an https URL (jose's remote set: fetched, cached, refreshed). The
 * tenant and the scopes come from configurable claims; only asymmetric algorithms are accepted
 * (no `none`, no HS*: a shared secret would let anyone who checks tokens also make them). The
 * answer to a token that fails says why in a few words, never more (docs/auth.md).
 */
import fs from 'node:fs';
import { hash } from 'node:crypto';
import { createLocalJWKSet, createRemoteJWKSet, errors, jwtVerify, type JSONWebKeySet, type JWTVerifyGetKey } from 'jose';
import { ConfigError, TENANT_RE, ThrottledLog, isScope, type JwtConfig, type Logger, type Principal } from '@otm/core';
import type { AuthOutcome, BearerAuthenticator } from './auth.js';

/** The signing algorithms accepted: asymmetric ones only. */
export const JWT_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];

/** How far the clocks of the token's issuer and of this service may differ (exp, nbf, iat). */
export const JWT_CLOCK_TOLERANCE_S = 60;

/** A compact JWS: three base64url parts, the first a JSON header (`{"` is `eyJ`). */
const JWT_SHAPE = /^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

export interface JwtVerifierOptions {
  readonly logger?: Logger;
  /** How often a JWKS file is looked at for a change (default 60 s). */
  readonly recheckMs?: number;
  /** How often at most a token with an unknown key makes the file be looked at again (default 1 s). */
  readonly missRecheckMs?: number;
}

interface FileState {
  readonly stamp: string;
  readonly getKey: JWTVerifyGetKey;
}

function readJwks(file: string): FileState {
  const st = fs.statSync(file);
  const jwks = JSON.parse(fs.readFileSync(file, 'utf8')) as JSONWebKeySet;
  if (jwks === null || typeof jwks !== 'object' || !Array.isArray(jwks.keys)) throw new Error('not a JWKS: it has no "keys" array');
  return { stamp: `${st.ino}:${st.size}:${st.mtimeMs}`, getKey: createLocalJWKSet(jwks) };
}

const stampOf = (file: string): string | undefined => {
  try {
    const st = fs.statSync(file);
    return `${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch {
    return undefined;
  }
};

export class JwtVerifier implements BearerAuthenticator {
  private readonly getKey: JWTVerifyGetKey;
  private file: FileState | undefined;
  private checkedAt = Date.now();
  private missCheckedAt = 0;
  /** A key server that is away fails every request: one line a while per cause, with the count held back. */
  private readonly unavailableLog = new ThrottledLog(10_000);

  /** Throws a ConfigError naming OTM_JWT_JWKS when a JWKS file cannot be read at start. */
  constructor(
    private readonly config: JwtConfig,
    private readonly opts: JwtVerifierOptions = {},
  ) {
    if ('file' in config.jwks) {
      const path = config.jwks.file;
      try {
        this.file = readJwks(path);
      } catch (e) {
        throw new ConfigError('OTM_JWT_JWKS', `cannot read the JWKS file ${path}: ${(e as Error).message}`);
      }
      this.getKey = (header, token) => this.file!.getKey(header, token);
    } else {
      this.getKey = createRemoteJWKSet(new URL(config.jwks.url), {
        timeoutDuration: 5_000,
        cooldownDuration: 30_000,
        cacheMaxAge: 600_000,
      });
    }
  }

  accepts(token: string): boolean {
    return JWT_SHAPE.test(token);
  }

  /** Reads the JWKS file again if it changed (a bad new file keeps the keys in hand). */
  private reload(): boolean {
    if (!('file' in this.config.jwks) || this.file === undefined) return false;
    const path = this.config.jwks.file;
    if (stampOf(path) === this.file.stamp) return false;
    try {
      this.file = readJwks(path);
      return true;
    } catch (e) {
      this.opts.logger?.warn({ file: path, err: (e as Error).message }, 'the JWKS file could not be read again: the keys in hand stay');
      return false;
    }
  }

  async verify(token: string): Promise<AuthOutcome> {
    const now = Date.now();
    if (now - this.checkedAt >= (this.opts.recheckMs ?? 60_000)) {
      this.checkedAt = now;
      this.reload();
    }
    try {
      return await this.check(token);
    } catch (e) {
      // A key the file did not have: maybe it was just added (bounded: at most once a second).
      if (
        e instanceof errors.JWKSNoMatchingKey &&
        this.file !== undefined &&
        now - this.missCheckedAt >= (this.opts.missRecheckMs ?? 1_000)
      ) {
        this.missCheckedAt = now;
        if (this.reload()) {
          try {
            return await this.check(token);
          } catch (again) {
            return this.failure(again);
          }
        }
      }
      return this.failure(e);
    }
  }

  private async check(token: string): Promise<AuthOutcome> {
    const { payload } = await jwtVerify(token, this.getKey, {
      issuer: this.config.issuer,
      audience: this.config.audience,
      algorithms: JWT_ALGORITHMS,
      clockTolerance: JWT_CLOCK_TOLERANCE_S,
    });
    const tenant = payload[this.config.tenantClaim];
    if (typeof tenant !== 'string' || !TENANT_RE.test(tenant)) {
      return { status: 401, message: `the token has no valid '${this.config.tenantClaim}' claim (the tenant)` };
    }
    const raw = payload[this.config.scopeClaim];
    const listed =
      typeof raw === 'string' ? raw.split(' ') : Array.isArray(raw) ? raw.filter((s): s is string => typeof s === 'string') : [];
    // Scopes of other services (openid, profile, ...) are no concern of this one.
    const scopes = new Set(listed.filter(isScope));
    const principal: Principal = {
      tenant,
      scopes,
      id: `jwt:${hash('sha256', token, 'hex')}`,
      // A subject's tokens share its quota (a client that fetches a new token does not start afresh).
      ...(typeof payload.sub === 'string' && payload.sub !== '' ? { quotaKey: `jwt-sub:${hash('sha256', `${payload.sub}`, 'hex')}` } : {}),
    };
    return { principal };
  }

  private failure(e: unknown): AuthOutcome {
    const bad = (message: string): AuthOutcome => ({ status: 401, message: `the bearer token is not valid: ${message}` });
    if (e instanceof errors.JWTExpired) return bad('it has expired');
    if (e instanceof errors.JWTClaimValidationFailed) {
      switch (e.claim) {
        case 'iss':
          return bad('it has the wrong issuer');
        case 'aud':
          return bad('it has the wrong audience');
        case 'nbf':
          return bad('it is not valid yet');
        case 'iat':
          return bad('it was issued in the future');
        default:
          return bad(`its '${e.claim}' claim is not valid`);
      }
    }
    if (e instanceof errors.JWKSNoMatchingKey || e instanceof errors.JWKSMultipleMatchingKeys)
      return bad('it is signed with an unknown key');
    if (e instanceof errors.JOSEAlgNotAllowed || e instanceof errors.JOSENotSupported) return bad('its signing algorithm is not accepted');
    if (e instanceof errors.JWSSignatureVerificationFailed) return bad('its signature does not match');
    if (e instanceof errors.JWTInvalid || e instanceof errors.JWSInvalid || e instanceof errors.JWKInvalid)
      return bad('it is not a valid JWT');
    // The key server did not answer (or answered nonsense): not the token's fault.
    const err = (e as Error)?.message ?? String(e);
    const { log, skipped } = this.unavailableLog.take(err);
    if (log) this.opts.logger?.warn({ err, ...(skipped > 0 ? { alsoFailed: skipped } : {}) }, 'JWT keys unavailable');
    return { status: 503, message: 'the keys that check bearer tokens are unavailable for now: try again shortly' };
  }
}
