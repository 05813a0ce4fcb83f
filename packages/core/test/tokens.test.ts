import { describe, expect, it } from 'vitest';
import { TokenVerifier, generateToken, parseTokens } from '../src/index.js';

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

  it('rejects a token listed twice', () => {
    expect(() => parseTokens('same-token:a:read,same-token:b:write')).toThrow(/twice/);
  });

  it('generates long random tokens', () => {
    const a = generateToken();
    expect(a).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(generateToken()).not.toBe(a);
  });
});
