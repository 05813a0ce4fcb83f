/**
 * JWT bearer tokens (OTM_JWT_*): a JWKS file written here with keys made here, tokens signed
 * here. The embedded service, through app.inject; the JWKS URL path against a JWKS served over
 * plain http on loopback (allowed there only: packages/core/src/config.ts).
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, loadConfig, parseTokens, type JwtConfig } from '@otm/core';
import { JwtVerifier } from '@otm/http';
import { createEmbeddedService, type EmbeddedService } from '../src/index.js';
import { TOKENS } from './helpers.js';

const ISSUER = 'https://idp.example.com/';
const AUDIENCE = 'otm-api';
const vehicle = { entityType: 'vehicle', name: 'Bob', licensePlate: 'AB-12-CD' };

interface Key {
  readonly kid: string;
  readonly alg: string;
  readonly privateKey: CryptoKey;
  readonly jwk: JWK;
}
async function makeKey(kid: string, alg: 'ES256' | 'RS256' | 'EdDSA'): Promise<Key> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { kid, alg, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}

function sign(
  key: Key,
  claims: Record<string, unknown> = {},
  opts: { iss?: string; aud?: string; exp?: number | string; nbf?: number | string } = {},
): Promise<string> {
  let jwt = new SignJWT({ tenant: 'acme', scope: 'read write', ...claims })
    .setProtectedHeader({ alg: key.alg, kid: key.kid })
    .setIssuer(opts.iss ?? ISSUER)
    .setAudience(opts.aud ?? AUDIENCE)
    .setSubject('unit-42')
    .setIssuedAt()
    .setExpirationTime(opts.exp ?? '5m');
  if (opts.nbf !== undefined) jwt = jwt.setNotBefore(opts.nbf);
  return jwt.sign(key.privateKey);
}

const writeJwks = (file: string, keys: readonly Key[]) => fs.writeFileSync(file, JSON.stringify({ keys: keys.map((k) => k.jwk) }));

let dir: string;
let jwksFile: string;
let es: Key;
let rs: Key;
let ed: Key;
let svc: EmbeddedService;

async function start(jwt: JwtConfig): Promise<EmbeddedService> {
  const s = await createEmbeddedService(
    { dataDir: fs.mkdtempSync(path.join(dir, 'data-')), bodyLimit: 1_048_576, maxDepth: 64, jwt },
    parseTokens(TOKENS),
    createLogger('silent'),
  );
  await s.app.ready();
  return s;
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-jwt-'));
  jwksFile = path.join(dir, 'jwks.json');
  [es, rs, ed] = await Promise.all([makeKey('es-1', 'ES256'), makeKey('rs-1', 'RS256'), makeKey('ed-1', 'EdDSA')]);
  writeJwks(jwksFile, [es, rs]);
  svc = await start({ jwks: { file: jwksFile }, issuer: ISSUER, audience: AUDIENCE, tenantClaim: 'tenant', scopeClaim: 'scope' });
});
afterAll(async () => {
  await svc.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const put = (token: string, kind = 'vehicles', body: object = vehicle, s = svc) =>
  s.app.inject({
    method: 'PUT',
    url: `/api/v5/${kind}`,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    payload: body,
  });
const get = (token: string, url: string, s = svc) => s.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } });

describe('JWT bearer tokens against a JWKS file', () => {
  it('a valid token (ES256 or RS256) is taken, with the tenant of its claim', async () => {
    for (const key of [es, rs]) {
      const token = await sign(key);
      const res = await put(token);
      expect(res.statusCode).toBe(200);
      const id = res.json<{ id: string }>().id;
      expect((await get(token, `/api/v5/vehicles/${id}`)).statusCode).toBe(200);
      // The tenant is the claim's: a static token of acme sees it, one of globex does not.
      expect((await get('writer-token-acme', `/api/v5/vehicles/${id}`)).statusCode).toBe(200);
      expect((await get('writer-token-globex', `/api/v5/vehicles/${id}`)).statusCode).toBe(404);
      const globex = await sign(key, { tenant: 'globex' });
      expect((await get(globex, `/api/v5/vehicles/${id}`)).statusCode).toBe(404);
    }
  });

  it('static tokens keep working beside JWTs', async () => {
    expect((await put('writer-token-acme')).statusCode).toBe(200);
  });

  const refusals: Array<[string, () => Promise<string>, RegExp]> = [
    ['wrong issuer', () => sign(es, {}, { iss: 'https://evil.example.com/' }), /wrong issuer/],
    ['wrong audience', () => sign(es, {}, { aud: 'another-api' }), /wrong audience/],
    ['expired beyond the skew', () => sign(es, {}, { exp: Math.floor(Date.now() / 1000) - 120 }), /expired/],
    ['not yet valid beyond the skew', () => sign(es, {}, { nbf: Math.floor(Date.now() / 1000) + 120 }), /not valid yet/],
    ['an unknown key', async () => sign(await makeKey('es-unknown', 'ES256')), /unknown key/],
    ['a known kid, another key', async () => sign({ ...(await makeKey('es-1', 'ES256')) }), /signature does not match/],
    [
      'HS256',
      () =>
        new SignJWT({ tenant: 'acme', scope: 'read write' })
          .setProtectedHeader({ alg: 'HS256', kid: 'es-1' })
          .setIssuer(ISSUER)
          .setAudience(AUDIENCE)
          .setExpirationTime('5m')
          .sign(new TextEncoder().encode('a-shared-secret-of-at-least-32-bytes!!')),
      /algorithm is not accepted/,
    ],
    [
      'alg none',
      () => Promise.resolve(`${b64({ alg: 'none' })}.${b64({ tenant: 'acme', scope: 'read write', iss: ISSUER, aud: AUDIENCE })}.x`),
      /algorithm is not accepted|not a valid JWT/,
    ],
    ['no tenant claim', () => sign(es, { tenant: undefined }), /'tenant' claim/],
    ['a malformed tenant', () => sign(es, { tenant: 'ac/me' }), /'tenant' claim/],
  ];
  it.each(refusals)('%s: 401 in the model error format, with a short reason', async (_what, make, reason) => {
    const res = await put(await make());
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toMatch(/^Bearer realm="otm", error="invalid_token"/);
    const items = res.json<Array<{ type: string; message: string }>>();
    expect(items).toHaveLength(1);
    expect(items[0]!.type).toBe('unauthorized');
    expect(items[0]!.message).toMatch(reason);
    expect(items[0]!.message).not.toMatch(/jose|ERR_|claim validation|stack/i);
  });

  it('takes a clock difference within the skew (60 s)', async () => {
    const now = Math.floor(Date.now() / 1000);
    expect((await put(await sign(es, {}, { exp: now - 30 }))).statusCode).toBe(200);
    expect((await put(await sign(es, {}, { nbf: now + 30 }))).statusCode).toBe(200);
  });

  it('enforces scopes as for static tokens: 403 without the scope, per-kind scopes, array claims', async () => {
    const reader = await sign(es, { scope: 'openid read' });
    const res = await put(reader);
    expect(res.statusCode).toBe(403);
    expect(res.json()).toEqual([{ type: 'forbidden', message: "this token lacks the 'write' scope (or 'write:vehicles')" }]);
    expect(res.headers['www-authenticate']).toBe('Bearer realm="otm", error="insufficient_scope", scope="write"');

    const telematics = await sign(es, { scope: ['write:events', 'read:vehicles'] });
    const event = {
      eventType: 'locationUpdateEvent',
      lifecycle: 'actual',
      creationDate: '2026-03-01T10:00:00Z',
      geoReference: { type: 'latLonPointGeoReference', lat: 52.37, lon: 4.89 },
    };
    expect((await put(telematics, 'events', event)).statusCode).toBe(200);
    expect((await put(telematics, 'trips', { entityType: 'trip', name: 'x' })).statusCode).toBe(403);
    expect((await put(telematics, 'vehicles')).statusCode).toBe(403);
    const v = (await put('writer-token-acme')).json<{ id: string }>().id;
    expect((await get(telematics, `/api/v5/vehicles/${v}`)).statusCode).toBe(200);
    expect((await get(telematics, `/api/v5/vehicles/${v}/track`)).statusCode).toBe(200);
    expect((await get(telematics, '/api/v5/vehicles/positions')).statusCode).toBe(200);
    expect((await get(telematics, '/api/v5/trips')).statusCode).toBe(403);
    expect((await get(telematics, '/api/v5/changes')).statusCode).toBe(403); // about no one kind: the plain scope
    const bulk = await svc.app.inject({
      method: 'POST',
      url: '/api/v5/bulk/events',
      headers: { authorization: `Bearer ${telematics}`, 'content-type': 'application/json' },
      payload: [event],
    });
    expect(bulk.statusCode).toBe(200);
    const noScopes = await sign(es, { scope: undefined });
    expect((await get(noScopes, `/api/v5/vehicles/${v}`)).statusCode).toBe(403);
  });

  it('reads the file again when it changes: a key added is taken at once, one removed is refused', async () => {
    const token = await sign(ed);
    expect((await put(token)).statusCode).toBe(401);
    writeJwks(jwksFile, [es, ed]); // rs removed, ed added
    // A token with an unknown kid makes the file be looked at again (at most once a second).
    await new Promise((r) => setTimeout(r, 1_100));
    expect((await put(token)).statusCode).toBe(200);
    const rsToken = await sign(rs);
    expect((await put(rsToken)).statusCode).toBe(401);
  });
});

function b64(o: unknown): string {
  return Buffer.from(JSON.stringify(o)).toString('base64url');
}

describe('JWT bearer tokens against a JWKS URL', () => {
  it('fetches the keys (http on loopback only), and answers 503 when the key server is gone', async () => {
    const key = await makeKey('url-1', 'ES256');
    let fetches = 0;
    const server = http.createServer((_req, res) => {
      fetches++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [key.jwk] }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`;
    const s = await start({ jwks: { url }, issuer: ISSUER, audience: AUDIENCE, tenantClaim: 'org', scopeClaim: 'permissions' });
    try {
      const token = await sign(key, { tenant: undefined, scope: undefined, org: 'acme', permissions: ['read', 'write'] });
      expect((await put(token, 'vehicles', vehicle, s)).statusCode).toBe(200);
      expect((await put(token, 'vehicles', vehicle, s)).statusCode).toBe(200);
      expect(fetches).toBe(1); // cached
    } finally {
      await s.close();
      await new Promise((r) => server.close(r));
    }
  });

  it('logs a key server that is away once a while, not once a request', async () => {
    const server = http.createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`;
    await new Promise((r) => server.close(r)); // nobody listens there now
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) });
    const verifier = new JwtVerifier(
      { jwks: { url }, issuer: ISSUER, audience: AUDIENCE, tenantClaim: 'tenant', scopeClaim: 'scope' },
      { logger },
    );
    const token = await sign(await makeKey('gone-1', 'ES256'));
    const began = Date.now();
    for (let i = 0; i < 20; i++) expect(await verifier.verify(token)).toMatchObject({ status: 503 });
    const logged = lines.filter((l) => l.msg === 'JWT keys unavailable');
    expect(logged.length).toBeGreaterThanOrEqual(1);
    // At most one line per 10 s for one cause.
    expect(logged.length).toBeLessThanOrEqual(1 + Math.floor((Date.now() - began) / 10_000));
  });

  it('the configuration takes https URLs, http only on loopback, and needs issuer and audience', () => {
    const base = { OTM_JWT_ISSUER: ISSUER, OTM_JWT_AUDIENCE: AUDIENCE };
    expect(loadConfig({ ...base, OTM_JWT_JWKS: 'https://idp.example.com/jwks' }).jwt?.jwks).toEqual({
      url: 'https://idp.example.com/jwks',
    });
    expect(loadConfig({ ...base, OTM_JWT_JWKS: 'http://127.0.0.1:9/jwks' }).jwt?.jwks).toEqual({ url: 'http://127.0.0.1:9/jwks' });
    expect(() => loadConfig({ ...base, OTM_JWT_JWKS: 'http://idp.example.com/jwks' })).toThrow(/OTM_JWT_JWKS/);
    expect(() => loadConfig({ OTM_JWT_JWKS: '/etc/jwks.json', OTM_JWT_AUDIENCE: AUDIENCE })).toThrow(/OTM_JWT_ISSUER/);
    expect(() => loadConfig({ OTM_JWT_JWKS: '/etc/jwks.json', OTM_JWT_ISSUER: ISSUER })).toThrow(/OTM_JWT_AUDIENCE/);
    expect(() => loadConfig({ OTM_JWT_ISSUER: ISSUER })).toThrow(/OTM_JWT_ISSUER/);
    const c = loadConfig({ ...base, OTM_JWT_JWKS: 'keys/jwks.json', OTM_JWT_SCOPE_CLAIM: 'scp' });
    expect(c.jwt).toMatchObject({ jwks: { file: path.resolve('keys/jwks.json') }, tenantClaim: 'tenant', scopeClaim: 'scp' });
    expect(loadConfig({}).jwt).toBeUndefined();
  });
});
