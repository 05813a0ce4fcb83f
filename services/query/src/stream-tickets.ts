/**
 * Stream tickets (`POST /api/v5/stream/tickets`): short-lived, signed, good for `GET
 * /api/v5/stream?ticket=` on any process with the deployment's configuration, for clients that
 * cannot send an Authorization header (a browser's EventSource).
 */
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Principal, TokenEntry } from '@otm/core';

/** How long a stream ticket is good for. */
export const TICKET_TTL_MS = 60_000;

/**
 * The key stream tickets are signed with, the same in every process of a deployment: from
 * OTM_STREAM_TICKET_SECRET when set, else from the configured tokens (their SHA-256 digests with
 * tenant and scopes, sorted): HKDF-SHA256. Without either, a random key: such a process's tickets
 * are good only on itself (and no ticket can be made without a key nobody else has).
 */
export function streamTicketKey(tokens: readonly TokenEntry[], secret?: string): Buffer {
  let material: Buffer;
  if (secret !== undefined && secret !== '') material = Buffer.from(secret, 'utf8');
  else if (tokens.length > 0) {
    const parts = tokens.map((t) => Buffer.concat([t.digest, Buffer.from(`:${t.tenant}:${[...t.scopes].sort().join('+')}\n`)]));
    material = Buffer.concat(parts.sort((a, b) => Buffer.compare(a, b)));
  } else material = randomBytes(32);
  return Buffer.from(hkdfSync('sha256', material, 'otm stream tickets', 'v1', 32));
}

interface TicketBody {
  /** What it is good for. */
  readonly p: 'stream';
  readonly t: string;
  readonly s: string[];
  /** The token's reference (StreamTickets.ref). */
  readonly k: string;
  /** Expiry, ms since the epoch. */
  readonly e: number;
}

const isTicketBody = (v: unknown): v is TicketBody => {
  if (typeof v !== 'object' || v === null) return false;
  const b = v as Record<string, unknown>;
  return (
    b.p === 'stream' &&
    typeof b.t === 'string' &&
    typeof b.k === 'string' &&
    typeof b.e === 'number' &&
    Array.isArray(b.s) &&
    b.s.every((s) => s === 'read' || s === 'write')
  );
};

/**
 * Stream tickets: `<payload>.<signature>`, the payload base64url JSON of the tenant, the scopes, a
 * reference to the token and the expiry; the signature HMAC-SHA256 of the payload with the key of
 * `streamTicketKey`, compared in constant time. Self-contained: any process with the same key
 * takes them, none keeps them. Good for `GET /api/v5/stream` only, for TICKET_TTL_MS; a stream
 * opened with one stays open after it expires.
 */
export class StreamTickets {
  /** The token references of principals that came from a ticket. */
  private readonly refs = new WeakMap<Principal, string>();

  constructor(
    private readonly key: Buffer,
    private readonly ttlMs = TICKET_TTL_MS,
  ) {}

  /**
   * Which token a principal came from, as streams are counted: a keyed hash of its id (the token's
   * SHA-256; `fallback` when it has none), so that a ticket, which travels in a URL, shows nothing
   * derived from the token that could be checked against guesses of it without the key.
   */
  ref(principal: Principal, fallback: string): string {
    return (
      this.refs.get(principal) ??
      this.mac(`token\n${principal.id ?? fallback}`)
        .subarray(0, 18)
        .toString('base64url')
    );
  }

  issue(principal: Principal, ref: string, now = Date.now()): { ticket: string; expiresAt: string } {
    const expires = now + this.ttlMs;
    const body: TicketBody = { p: 'stream', t: principal.tenant, s: [...principal.scopes].sort(), k: ref, e: expires };
    const payload = Buffer.from(JSON.stringify(body)).toString('base64url');
    return { ticket: `${payload}.${this.mac(`ticket\n${payload}`).toString('base64url')}`, expiresAt: new Date(expires).toISOString() };
  }

  /** The principal of a ticket that this key signed and that has not expired, else undefined. */
  verify(ticket: string, now = Date.now()): Principal | undefined {
    if (ticket.length > 2_048) return undefined;
    const dot = ticket.indexOf('.');
    if (dot <= 0) return undefined;
    const payload = ticket.slice(0, dot);
    const given = Buffer.from(ticket.slice(dot + 1), 'base64url');
    const expected = this.mac(`ticket\n${payload}`);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    let body: unknown;
    try {
      body = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    } catch {
      return undefined;
    }
    if (!isTicketBody(body) || !(body.e > now)) return undefined;
    const principal: Principal = { tenant: body.t, scopes: new Set(body.s) };
    this.refs.set(principal, body.k);
    return principal;
  }

  private mac(text: string): Buffer {
    return createHmac('sha256', this.key).update(text).digest();
  }
}
