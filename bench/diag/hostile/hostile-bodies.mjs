/**
 * What hostile bodies of about 1 MiB cost `otm serve` end to end, beside a valid trip of the same
 * size, and whether the process keeps answering meanwhile: for each shape, the median ms until the
 * PUT (or bulk POST) is answered, its ratio to the valid trip's, the answer's status and size, and
 * the longest wait of a `/healthz` poll (every 10 ms) during the request. Shapes:
 * - valid trip: the typical trip's stops repeated with fresh ids (~1 MiB, inline actions and locations);
 * - many inline: 2,500 inline stop actions, each holding an inline location;
 * - unknown members: ~95,000 unknown top-level members;
 * - wrong types: an `actions` array of ~300,000 numbers;
 * - bulk of invalid items: ~750 KB of invalid vehicles;
 * - tiny bulk items: a 16 MiB `[0,0,…]` bulk body (answered 413 on the item count).
 *
 *   npm run build && node --import ./bench/lib/register-ts.mjs bench/diag/hostile/hostile-bodies.mjs [rounds=3]
 *
 * Loopback only; each shape is sent `rounds` times, one at a time.
 */
import fs from 'node:fs';
import { startServe, stop } from '../../../test/process.ts';
import { fmt, median, mkTemp, request, REPO } from '../../lib/util.mjs';

const ROUNDS = Number(process.argv[2] ?? 3);
const TOKEN = 'hostile-bodies-diag-token';
const uuid = (prefix, n) => `${prefix}-0000-4000-8000-${String(n).padStart(12, '0')}`;
const typical = JSON.parse(fs.readFileSync(`${REPO}/packages/model/test/fixtures/typical-trip.json`, 'utf8'));

function validTrip() {
  const trip = structuredClone(typical);
  const stops = trip.actions;
  trip.actions = [];
  let n = 0;
  while (JSON.stringify(trip).length < 1_000_000) {
    for (const a of stops) {
      const copy = structuredClone(a);
      copy.entity.id = uuid('d1000000', n++);
      if (copy.entity.location?.entity?.id) copy.entity.location.entity.id = uuid('d2000000', n++);
      trip.actions.push(copy);
    }
  }
  trip.id = uuid('d3000000', 1);
  return JSON.stringify(trip);
}

function manyInline(n) {
  return JSON.stringify({
    entityType: 'trip',
    id: uuid('d4000000', 1),
    actions: Array.from({ length: n }, (_, i) => ({
      associationType: 'inline',
      entity: {
        actionType: 'stop',
        id: uuid('d5000000', i),
        location: {
          associationType: 'inline',
          entity: { entityType: 'location', id: uuid('d6000000', i), geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 4 } },
        },
      },
    })),
  });
}

function unknownMembers() {
  const parts = ['"entityType":"trip"'];
  for (let i = 0, size = 0; size < 1_000_000; i++) {
    parts.push(`"u${String(i).padStart(5, '0')}":0`);
    size += parts[i + 1].length + 1;
  }
  return `{${parts.join(',')}}`;
}

const wrongTypes = () => `{"entityType":"trip","actions":[${Array.from({ length: 300_000 }, () => '1').join(',')}]}`;

function invalidBulk() {
  const items = [];
  for (let i = 0, size = 0; size < 750_000; i++) {
    items.push(JSON.stringify({ entityType: 'vehicle', id: uuid('d7000000', i), vehicleType: 'spaceship', licencePlate: 'X', bogus: i }));
    size += items[i].length + 1;
  }
  return `[${items.join(',')}]`;
}

const tinyItems = () => `[${'0,'.repeat(8_388_000)}0]`;

const SHAPES = [
  ['valid trip', '/api/v5/trips', 'PUT', validTrip],
  ['many inline', '/api/v5/trips', 'PUT', () => manyInline(2500)],
  ['unknown members', '/api/v5/trips', 'PUT', unknownMembers],
  ['wrong types', '/api/v5/trips', 'PUT', wrongTypes],
  ['bulk of invalid items', '/api/v5/bulk/vehicles', 'POST', invalidBulk],
  ['tiny bulk items', '/api/v5/bulk/events', 'POST', tinyItems],
];

/** Polls /healthz every 10 ms until stopped; resolves with the longest wait for an answer. */
function healthPoller(url) {
  let running = true;
  let worst = 0;
  const done = (async () => {
    while (running) {
      const t = performance.now();
      // A kept-alive connection the service closed meanwhile fails once; the next poll opens another.
      await request(`${url}/healthz`).catch(() => {});
      worst = Math.max(worst, performance.now() - t);
      await new Promise((r) => setTimeout(r, 10));
    }
    return worst;
  })();
  return { stop: () => ((running = false), done) };
}

const dataDir = mkTemp('otm-hostile-');
const svc = await startServe({ OTM_DATA_DIR: dataDir, OTM_TOKENS: `${TOKEN}:acme:read+write` });
try {
  const rows = [];
  for (const [name, path, method, make] of SHAPES) {
    const body = make();
    process.stderr.write(`${name}: ${body.length} bytes\n`);
    const times = [];
    let worstHealth = 0;
    let answer;
    for (let r = 0; r < ROUNDS; r++) {
      const poll = healthPoller(svc.url);
      const t = performance.now();
      answer = await Promise.race([
        request(`${svc.url}${path}`, { method, token: TOKEN, body }).catch((e) => ({ status: e.code ?? 'error', body: '' })),
        new Promise((resolve) => setTimeout(() => resolve({ status: 'no answer in 60 s', body: '' }), 60_000)),
      ]);
      times.push(performance.now() - t);
      worstHealth = Math.max(worstHealth, await poll.stop());
    }
    rows.push({
      name,
      kb: body.length / 1024,
      ms: median(times),
      status: answer.status,
      answerKb: answer.body.length / 1024,
      health: worstHealth,
    });
  }
  const base = rows[0].ms;
  process.stdout.write('shape                   body KB   answer ms   x valid trip   status   answer KB   worst /healthz ms\n');
  for (const r of rows) {
    process.stdout.write(
      `${r.name.padEnd(22)} ${fmt(r.kb, 0).padStart(8)} ${fmt(r.ms, 1).padStart(11)} ${fmt(r.ms / base, 2).padStart(14)} ${String(r.status).padStart(8)} ${fmt(r.answerKb, 1).padStart(11)} ${fmt(r.health, 1).padStart(19)}\n`,
    );
  }
} finally {
  await stop(svc);
  fs.rmSync(dataDir, { recursive: true, force: true });
}
