/**
 * The webhook rows' baseline: bodies POSTed one at a time with undici (the dispatcher's client),
 * without reading a feed, signing or recording anything, from a process of its own, as the
 * dispatcher of `otm serve` is one process and the bench's receiver another: each POST then waits
 * for its answer across two processes, as each delivery does. (POSTed from the bench process
 * itself, sender and receiver share one event loop and a round trip costs no wake-up of another
 * process: that figure is printed beside it, as `inProcess`.)
 *
 * As a module: `postFromChild(url, bodies)` → `{ seconds, cpuSeconds }` of the child's POST loop,
 * its second pass over the bodies (the first warms it up).
 * As a script (what the module runs): `node bench/lib/post-bodies.mjs <url> <file>`, the file
 * holding the bodies each after its length (4 bytes, big-endian); prints the figures as JSON.
 * Also the receiving end the webhook rows deliver to (`receiver`).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';

const SELF = fileURLToPath(import.meta.url);

/**
 * A webhook receiver on 127.0.0.1 that answers 200 and keeps the bodies: `{ url, bodies,
 * changes(), reset(), close() }`, `changes()` counted without parsing a body (one "cursor" member a
 * change).
 */
export async function receiver() {
  let bodies = [];
  let changes = 0;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      bodies.push(body);
      for (let at = body.indexOf('"cursor":'); at >= 0; at = body.indexOf('"cursor":', at + 9)) changes++;
      res.writeHead(200).end('ok');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/hook`,
    get bodies() {
      return bodies;
    },
    changes: () => changes,
    reset() {
      bodies = [];
      changes = 0;
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** POSTs `bodies` to `url` one at a time from this process: seconds and CPU seconds. */
export async function postHere(url, bodies) {
  const agent = new Agent({ connections: 1 });
  try {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    for (const body of bodies) {
      const r = await request(url, { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher: agent });
      await r.body.dump();
      if (r.statusCode !== 200) throw new Error(`baseline POST: ${r.statusCode}`);
    }
    const cpu = process.cpuUsage(cpu0);
    return { seconds: (performance.now() - t0) / 1000, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
  } finally {
    await agent.close();
  }
}

/** POSTs `bodies` to `url` one at a time from a child process of its own: its seconds and CPU seconds. */
export async function postFromChild(url, bodies) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'otm-post-bodies-')), 'bodies');
  const parts = [];
  for (const b of bodies) {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(b.length);
    parts.push(len, b);
  }
  fs.writeFileSync(file, Buffer.concat(parts));
  try {
    const out = await new Promise((resolve, reject) =>
      execFile(process.execPath, [SELF, url, file], { maxBuffer: 1 << 20 }, (e, stdout, stderr) =>
        e ? reject(new Error(`${e.message}\n${stderr}`)) : resolve(stdout),
      ),
    );
    return JSON.parse(out);
  } finally {
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
  }
}

if (process.argv[1] === SELF) {
  const [url, file] = process.argv.slice(2);
  const all = fs.readFileSync(file);
  const bodies = [];
  for (let at = 0; at < all.length;) {
    const n = all.readUInt32BE(at);
    bodies.push(all.subarray(at + 4, at + 4 + n));
    at += 4 + n;
  }
  // Once to warm up (the JIT, the connection's code paths; the dispatcher is warm by then too),
  // then the figures of a second pass.
  await postHere(url, bodies);
  process.stdout.write(JSON.stringify(await postHere(url, bodies)));
}
