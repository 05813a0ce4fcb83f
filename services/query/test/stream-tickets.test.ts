/** Stream tickets (stream-tickets.ts): signed, self-contained, good on any process with the same key, for a minute. */
import { describe, expect, it } from 'vitest';
import { parseTokens } from '@otm/core';
import { StreamTickets, streamTicketKey } from '../src/stream.js';

describe('stream tickets', () => {
  const key = streamTicketKey(parseTokens('aaaaaaaaaa:acme:read,bbbbbbbbbb:globex:read+write'));
  const principal = { tenant: 'acme', scopes: new Set(['read'] as const), id: 'digest' };

  it('are taken by any holder of the same key until they expire; carry the tenant, scopes and token reference', () => {
    const tickets = new StreamTickets(key);
    const ref = tickets.ref(principal, 'fallback');
    const { ticket, expiresAt } = tickets.issue(principal, ref, 1_000_000);
    expect(expiresAt).toBe(new Date(1_060_000).toISOString());
    // Another process: the same tokens, in another order, give the same key.
    const elsewhere = new StreamTickets(streamTicketKey(parseTokens('bbbbbbbbbb:globex:read+write,aaaaaaaaaa:acme:read')));
    const p = elsewhere.verify(ticket, 1_059_999)!;
    expect(p.tenant).toBe('acme');
    expect([...p.scopes]).toEqual(['read']);
    expect(elsewhere.ref(p, 'other')).toBe(ref);
    expect(elsewhere.verify(ticket, 1_060_000)).toBeUndefined();
    expect(ref).not.toContain('digest');
  });

  it('refuse what another key signed, and any change', () => {
    const tickets = new StreamTickets(key);
    const { ticket } = tickets.issue(principal, 'r', Date.now());
    const [payload, sig] = ticket.split('.') as [string, string];
    const other = new StreamTickets(streamTicketKey(parseTokens('cccccccccc:acme:read')));
    expect(other.verify(ticket)).toBeUndefined();
    expect(new StreamTickets(streamTicketKey([], 'a secret of thirty-two characters or more')).verify(ticket)).toBeUndefined();
    const flipped = `${payload.slice(0, 5)}${payload[5] === 'A' ? 'B' : 'A'}${payload.slice(6)}.${sig}`;
    for (const t of [flipped, `${payload}.${sig.slice(1)}`, `${payload}`, '', '.', 'x'.repeat(5_000)])
      expect(tickets.verify(t)).toBeUndefined();
    // With no tokens and no secret, the key is random: nothing derivable.
    expect(streamTicketKey([]).equals(streamTicketKey([]))).toBe(false);
    expect(
      streamTicketKey([], 'a secret of thirty-two characters or more').equals(
        streamTicketKey([], 'a secret of thirty-two characters or more'),
      ),
    ).toBe(true);
  });
});
