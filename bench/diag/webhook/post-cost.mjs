/**
 * What one POST of a batch costs this process's CPU, to a receiver in another process on loopback:
 * undici alone (as rate.mjs's baseline POSTs), undici with the signal of the attempt's time bound
 * made as `AbortSignal.any([signal, AbortSignal.timeout(ms)])` or as one AbortController and one
 * timer (deliver.ts), and the dispatcher's `WebhookClient.post` (signed outside the loop). Variants
 * alternated, `rounds` times each.
 *
 *   npm run build
 *   node bench/diag/webhook/post-cost.mjs [posts=2000] [rounds=3] [bodyBytes=52000]
 */
import { fork } from 'node:child_process';
import http from 'node:http';
import { Agent } from 'undici';
import { TargetRule, WebhookClient, signature } from '@otm/dispatcher';

if (process.argv[2] === 'receiver') {
  const server = http.createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => res.writeHead(200).end('ok'));
  });
  server.listen(0, '127.0.0.1', () => process.send(server.address().port));
} else {
  const POSTS = Number(process.argv[2] ?? 2_000);
  const ROUNDS = Number(process.argv[3] ?? 3);
  const body = Buffer.alloc(Number(process.argv[4] ?? 52_000), 'a');
  const child = fork(new URL(import.meta.url).pathname, ['receiver']);
  const port = await new Promise((resolve) => child.once('message', resolve));
  const url = new URL(`http://127.0.0.1:${port}/hook`);
  const agent = new Agent({ connections: 1, headersTimeout: 10_000, bodyTimeout: 10_000, keepAliveTimeout: 4_000 });
  const client = new WebhookClient(new TargetRule([{ address: '127.0.0.1', prefix: 32, family: 'ipv4' }]));
  const outer = new AbortController();
  const headers = { 'content-type': 'application/json', 'user-agent': 'otm-webhooks/1', 'otm-signature': signature('s', body, 1) };
  const post = (signal) => agent.request({ origin: url.origin, path: url.pathname, method: 'POST', body, headers, signal });
  const variants = {
    'undici, no signal': async () => (await post(undefined)).body.dump(),
    'undici, AbortSignal.any + timeout': async () => (await post(AbortSignal.any([outer.signal, AbortSignal.timeout(25_000)]))).body.dump(),
    'undici, controller + timer': async () => {
      const c = new AbortController();
      const stop = () => c.abort(outer.signal.reason);
      const timer = setTimeout(() => c.abort(), 25_000);
      outer.signal.addEventListener('abort', stop, { once: true });
      try {
        await (await post(c.signal)).body.dump();
      } finally {
        clearTimeout(timer);
        outer.signal.removeEventListener('abort', stop);
      }
    },
    'WebhookClient.post': async () => {
      const r = await client.post(url.href, body, headers, outer.signal);
      if (r.outcome !== 'delivered') throw new Error(JSON.stringify(r));
    },
  };
  const cpu = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  console.log(`POSTs of ${body.length.toLocaleString('en')} bytes, ${POSTS.toLocaleString('en')} a variant a round`);
  for (let round = 1; round <= ROUNDS; round++) {
    const parts = [];
    for (const [name, fn] of Object.entries(variants)) {
      const c0 = cpu();
      for (let i = 0; i < POSTS; i++) await fn();
      parts.push(`${name} ${((cpu() - c0) / POSTS).toFixed(1)} µs`);
    }
    console.log(`  round ${round}: ${parts.join('; ')}`);
  }
  child.kill();
  await client.close();
  await agent.close();
}
