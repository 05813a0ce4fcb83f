/**
 * Validation cost versus JSON.parse of the same body, on the model package's build output
 * (packages/model/dist). The `validate` group of `npm run bench` runs it and reads two rows.
 *
 *   npm run bench:validate            (builds, then runs node bench/validate-bench.mjs)
 *
 * For each document: microseconds per JSON.parse of the body, per validateEntity of the parsed
 * document, their ratio (target <= 1.0), and a baseline: plain ajv over the model's own schemas
 * (oneOf without discriminator dispatch, no unknown-member check), compiled the usual way; `plain ok`
 * says whether it accepts the document (when it does not, it stops at the first failure, so its time
 * is not comparable).
 * `inline µs` / `inline n`: cost and result count of inlineEntities on the same parsed document.
 * Prints figures only; nothing is asserted.
 */
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import { MODEL, inlineEntities, validateEntity } from '../packages/model/dist/index.js';

const fixtures = new URL('../packages/model/test/fixtures/', import.meta.url);
/** The model's examples: { name, kind, valid, document }. */
const examples = JSON.parse(readFileSync(new URL('model-examples.json', fixtures), 'utf8'));
const typicalTrip = JSON.parse(readFileSync(new URL('typical-trip.json', fixtures), 'utf8'));

/** { name, kind, body }: the documents timed. */
const cases = [{ name: 'typical-trip (own)', kind: 'trips', body: JSON.stringify(typicalTrip) }];
cases.push({
  name: 'updateEvent (own)',
  kind: 'events',
  body: JSON.stringify({
    eventType: 'updateEvent',
    lifecycle: 'actual',
    entity: { entityType: 'consignment', id: '047cfa4d-fd8b-47ba-b8e9-87067294d2fa', status: 'completed' },
  }),
});
for (const n of [
  'trip',
  'vehicle',
  'location',
  'stop',
  'move',
  'load',
  'locationUpdateEvent',
  'associationCreatedEvent',
  'consignment-constraint',
  'transportOrder',
  'items',
  'actor-base',
]) {
  const e = examples.find((x) => x.name === n);
  if (e?.kind) cases.push({ name: n, kind: e.kind, body: JSON.stringify(e.document) });
}

function plainAjvBaseline() {
  const raw = JSON.parse(JSON.stringify(MODEL.schemas).replaceAll('#/components/schemas/', 'base#/$defs/'));
  for (const s of Object.values(raw)) delete s.discriminator; // ajv rejects OpenAPI mapping
  const strip = (o) => {
    if (o && typeof o === 'object') {
      delete o.discriminator;
      for (const v of Object.values(o)) strip(v);
    }
  };
  strip(raw);
  const ajv = new Ajv({ strict: false, allErrors: false });
  for (const [f, def] of Object.entries(fullFormats)) ajv.addFormat(f, def);
  ajv.addFormat('recurrence', true);
  ajv.addSchema({ $id: 'base', $defs: raw });
  return (schema) => ajv.getSchema(`base#/$defs/${schema}`);
}

function perOp(fn, minMs = 300) {
  for (let i = 0; i < 2000; i++) fn(); // warm-up
  let n = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < minMs) {
    for (let i = 0; i < 1000; i++) fn();
    n += 1000;
    t = performance.now();
  }
  return ((t - t0) * 1000) / n;
}

const kindSchema = new Map(Object.entries(MODEL.kinds).map(([k, v]) => [k, v.schema]));
let sink;
const t0 = performance.now();
validateEntity('trips', {});
const firstMs = performance.now() - t0;

const t1 = performance.now();
const baseline = plainAjvBaseline();
const baseTrip = baseline('trip');
const baseCompileMs = performance.now() - t1;

const rows = [
  ['document', 'kind', 'bytes', 'parse µs', 'validate µs', 'ratio', 'plain ajv µs', 'plain ok', 'valid', 'inline µs', 'inline n'],
];
for (const c of cases) {
  const doc = JSON.parse(c.body);
  const parse = perOp(() => {
    sink = JSON.parse(c.body);
  });
  const val = perOp(() => {
    sink = validateEntity(c.kind, doc);
  });
  const base = baseline(kindSchema.get(c.kind));
  const plain = perOp(() => {
    sink = base(doc);
  });
  const inline = perOp(() => {
    sink = inlineEntities(c.kind, doc);
  });
  rows.push([
    c.name,
    c.kind,
    String(c.body.length),
    parse.toFixed(2),
    val.toFixed(2),
    (val / parse).toFixed(2),
    plain.toFixed(2),
    base(doc) ? 'yes' : 'no',
    validateEntity(c.kind, doc).length === 0 ? 'yes' : 'NO',
    inline.toFixed(2),
    String(inlineEntities(c.kind, doc).length),
  ]);
}
void sink;
void baseTrip;
const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
for (const r of rows) console.log(r.map((x, i) => (i < 2 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join('  '));
console.log(
  `\nfirst validateEntity('trips') incl. compile: ${firstMs.toFixed(0)} ms; plain ajv compile of trip: ${baseCompileMs.toFixed(0)} ms`,
);
console.log(`node ${process.version}; ratio = validate / parse (target <= 1.0); inline = inlineEntities (plan built on first use)`);
