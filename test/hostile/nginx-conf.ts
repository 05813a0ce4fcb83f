/**
 * deploy/nginx/otm.conf as the hostile tests run it on a real nginx (test/infra/services.ts
 * `startNginx`): the deployed file with its upstream servers and its listen port changed to
 * loopback ones, and, where a test asks for it, the upstreams' keep-alive timeout scaled down.
 * Nothing else is changed, so that the tests test the file that is deployed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The deployed proxy configuration. */
export const CONF = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../deploy/nginx/otm.conf');

/** An `upstream name { ... }` block (they hold no nested braces). */
const UPSTREAM_BLOCK_RE = /^upstream\s+\S+\s*\{[^}]*\}/gm;
/** A `keepalive_timeout` line, with its value in seconds or milliseconds. */
const KEEPALIVE_TIMEOUT_RE = /^(\s*keepalive_timeout\s+)(\d+)(ms|s)?\s*;/m;

/**
 * How long nginx keeps an idle connection to the service: the `keepalive_timeout` of the
 * upstream blocks, in milliseconds. Both upstreams must have one, and the same.
 */
export function upstreamKeepaliveTimeoutMs(text = fs.readFileSync(CONF, 'utf8')): number {
  const values = (text.match(UPSTREAM_BLOCK_RE) ?? []).map((block) => {
    const m = KEEPALIVE_TIMEOUT_RE.exec(block);
    if (m === null) throw new Error(`${CONF}: an upstream block without keepalive_timeout (nginx would keep idle connections 60 s)`);
    return Number(m[2]) * (m[3] === 'ms' ? 1 : 1000);
  });
  if (values.length !== 2 || values[0] !== values[1]) {
    throw new Error(`${CONF}: expected two upstream blocks with the same keepalive_timeout, found ${values.join(', ') || 'none'}`);
  }
  return values[0]!;
}

/**
 * deploy/nginx/otm.conf with its upstream servers and its listen port changed, and nothing else
 * unless `keepaliveTimeoutMs` is given: then both upstreams' `keepalive_timeout` is that many
 * milliseconds. Each replacement must match exactly once, so that a change to the file's shape
 * fails here rather than testing something else.
 */
export function deployedConf(
  listen: string,
  upstreams: { ingress: string; query: string },
  opts: { keepaliveTimeoutMs?: number } = {},
): string {
  let text = fs.readFileSync(CONF, 'utf8');
  const replaceOnce = (re: RegExp, by: string) => {
    const hits = text.match(new RegExp(re.source, `${re.flags}g`))?.length ?? 0;
    if (hits !== 1) throw new Error(`${CONF}: expected one match of ${re}, found ${hits}`);
    text = text.replace(re, by);
  };
  replaceOnce(/^(\s*server\s+)ingress:8080\b/m, `$1${upstreams.ingress}`);
  replaceOnce(/^(\s*server\s+)query:8080\b/m, `$1${upstreams.query}`);
  replaceOnce(/^(\s*listen\s+)8080\s*;/m, `$1${listen};`);
  if (opts.keepaliveTimeoutMs !== undefined) {
    upstreamKeepaliveTimeoutMs(text); // both upstreams have one
    const ms = Math.round(opts.keepaliveTimeoutMs);
    text = text.replace(UPSTREAM_BLOCK_RE, (block) => block.replace(KEEPALIVE_TIMEOUT_RE, `$1${ms}ms;`));
    if (upstreamKeepaliveTimeoutMs(text) !== ms) throw new Error(`${CONF}: the upstreams' keepalive_timeout was not replaced`);
  }
  return text;
}
