/**
 * The pages' routes (src/web.ts) over a build of services/web made here: the docs page at its
 * own address from the build's docs.html, the fleet page at /, their assets, the map style; and
 * no page from a folder without the build. The real build in a real browser: test/browser/.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DOCS_PATH, webPages } from '../src/web.js';

let dir: string;
let app: FastifyInstance;
let warnings: string[];
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-web-'));
  warnings = [];
  app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => warnings.push(JSON.parse(line).msg) } } });
});
afterEach(async () => {
  await app.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function build(): void {
  fs.mkdirSync(path.join(dir, 'assets'));
  fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>OTM fleet</title>');
  fs.writeFileSync(path.join(dir, 'docs.html'), '<!doctype html><title>API documentation</title><script src="/assets/docs-1.js"></script>');
  fs.writeFileSync(path.join(dir, 'assets', 'docs-1.js'), 'console.log(1);');
}

describe('the pages', () => {
  it('serves the docs page and the fleet page from the build in webDir', async () => {
    build();
    await app.register(webPages, { webDir: dir, mapStyle: 'https://tiles.example.org/{z}/{x}/{y}.png' });
    for (const url of [DOCS_PATH, `${DOCS_PATH}/`]) {
      const res = await app.inject({ method: 'GET', url });
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(res.body).toContain('<title>API documentation</title>');
    }
    const fleet = await app.inject({ method: 'GET', url: '/' });
    expect(fleet.statusCode).toBe(200);
    expect(fleet.body).toContain('<title>OTM fleet</title>');
    const asset = await app.inject({ method: 'GET', url: '/assets/docs-1.js' });
    expect(asset.statusCode).toBe(200);
    expect(asset.headers['content-type']).toMatch(/javascript/);
    expect((await app.inject({ method: 'GET', url: '/config.json' })).json()).toEqual({
      mapStyle: 'https://tiles.example.org/{z}/{x}/{y}.png',
    });
    // One address for the docs page; nothing of the old one's files.
    expect((await app.inject({ method: 'GET', url: '/docs.html' })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: `${DOCS_PATH}/swagger-ui-bundle.js` })).statusCode).toBe(404);
    expect(warnings).toEqual([]);
  });

  it('serves no page, and says why, from a folder without the build', async () => {
    fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html>');
    await app.register(webPages, { webDir: dir });
    for (const url of ['/', DOCS_PATH, '/config.json']) expect((await app.inject({ method: 'GET', url })).statusCode).toBe(404);
    expect(warnings).toEqual([expect.stringMatching(/^the pages are not built \(docs\.html missing in .*\): `npm run build` builds them/)]);
  });
});
