import { describe, expect, it } from 'vitest';
import { TokenVerifier, allows, generateToken, parseTokens } from '../src/index.js';

describe('tokens', () => {
  const verifier = new TokenVerifier(parseTokens('s3cret-token:acme:read+write,viewer-token:acme:read,other-token:globex:write'));

  it('finds the principal of a known token', () => {
    expect(verifier.verify('s3cret-token')).toMatchObject({ tenant: 'acme' });
    expect([...verifier.verify('viewer-token')!.scopes]).toEqual(['read']);
    expect(verifier.verify('other-token')?.tenant).toBe('globex');
  });

  it('knows no other token, nor a prefix or extension of one', () => {
    for (const t of ['', 's3cret', 's3cret-token ', 's3cret-tokenX', 'S3CRET-TOKEN']) expect(verifier.verify(t)).toBeUndefined();
  });

  it('keeps digests only, never the token', () => {
    const [entry] = parseTokens('s3cret-token:acme:read');
    expect(JSON.stringify(entry)).not.toContain('s3cret-token');
    expect(entry!.digest.length).toBe(32);
  });

  it('takes per-kind scopes, of kinds of the model only', () => {
    const [unit] = parseTokens('telematics-unit-7:acme:write:events+read:vehicles');
    expect([...unit!.scopes]).toEqual(['write:events', 'read:vehicles']);
    expect(() => parseTokens('telematics-unit-7:acme:write:parcels')).toThrow(/unknown scope 'write:parcels'/);
    expect(() => parseTokens('telematics-unit-7:acme:admin')).toThrow(/unknown scope/);
  });

  it('allows: the plain scope covers every kind, a per-kind scope its kind only', () => {
    const unit = new Set(['write:events', 'read:vehicles']);
    expect(allows(unit, 'write', 'events')).toBe(true);
    expect(allows(unit, 'write', 'trips')).toBe(false);
    expect(allows(unit, 'write', undefined)).toBe(false);
    expect(allows(unit, 'read', 'vehicles')).toBe(true);
    expect(allows(unit, 'read', 'events')).toBe(false);
    expect(allows(new Set(['read']), 'read', 'trips')).toBe(true);
    expect(allows(new Set(['read']), 'read', undefined)).toBe(true);
    expect(allows(new Set(['read']), 'write', 'trips')).toBe(false);
  });

  it('rejects a token listed twice', () => {
    expect(() => parseTokens('same-token:a:read,same-token:b:write')).toThrow(/twice/);
  });

  it('generates long random tokens', () => {
    const a = generateToken();
    expect(a).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(generateToken()).not.toBe(a);
  });
});
