/**
 * The bulk checker: a body checked on a worker thread gives the same answer as one checked on the
 * event loop; a body that owns its memory is moved to the thread, one that shares it is copied.
 * The thread runs the compiled module: `npm test` builds before it runs the tests.
 */
import { afterAll, describe, expect, it, vi } from 'vitest';
import { eventFacts, eventFactsAt, registry } from '@otm/core';
import { BulkChecker, OUTCOME, checkBulk, type BulkCheckTask, type CheckedBulk } from '../src/index.js';
import { ITEM_ERRORS, cappedErrors } from '../src/bulk/check-body.js';

const location = (i: number, extra: Record<string, unknown> = {}) => ({
  eventType: 'locationUpdateEvent',
  id: `6b000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  lastModified: '2026-11-23T10:00:00Z',
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: '6c000000-0000-4000-8000-000000000001' },
  ...extra,
});

const items = [
  location(1),
  { ...location(2), geoReference: { type: 'latLonPointGeoReference', lat: 'north', lon: 5 } },
  location(3, { vehicle: { associationType: 'inline', entity: { entityType: 'vehicle', id: '6c000000-0000-4000-8000-000000000002' } } }),
  {
    eventType: 'updateEvent',
    id: '6b000000-0000-4000-8000-000000000004',
    lifecycle: 'actual',
    entity: { entityType: 'vehicle', id: '6c000000-0000-4000-8000-000000000001', licensePlate: 'X' },
  },
];
const task = (body: Uint8Array | string, over: Partial<BulkCheckTask> = {}): BulkCheckTask => ({
  body,
  format: 'json',
  kind: 'events',
  maxDepth: 64,
  maxItems: 100,
  ...over,
});

describe('checkBulk', () => {
  it('sorts items into telemetry (kept as text), others, and rejected ones with their errors', () => {
    const r = checkBulk(task(JSON.stringify(items))) as CheckedBulk;
    expect(r.ok).toBe(true);
    expect([...r.outcome]).toEqual([OUTCOME.telemetry, OUTCOME.rejected, OUTCOME.other, OUTCOME.other]);
    expect(r.texts[0]).toBe(JSON.stringify(items[0]));
    expect(r.partitions[0]).toBe('6c000000-0000-4000-8000-000000000001');
    expect(r.ranks[0]).toBe(4); // actual
    expect(r.modified[0]).toBe(Date.parse('2026-11-23T10:00:00Z'));
    expect(r.rejected).toEqual([[1, [expect.objectContaining({ type: 'invalidField', field: 'geoReference.lat' })]]]);
    expect(r.ids).toEqual([items[0]!.id, '', items[2]!.id, items[3]!.id]);
  });

  it('reads the facts the event store lists each telemetry event by, for bodies of events only', () => {
    const r = checkBulk(task(JSON.stringify(items))) as CheckedBulk;
    expect(eventFactsAt(r.facts!, 0)).toEqual(eventFacts(items[0]!));
    expect(eventFactsAt(r.facts!, 0)).toMatchObject({ vehicle: '6c000000-0000-4000-8000-000000000001', lat: 52, located: true });
    // Rejected, and not telemetry for the event store alone (an entity inline, an update): none.
    for (const i of [1, 2, 3]) expect(eventFactsAt(r.facts!, i)).toBeUndefined();
    const vehicles = checkBulk(task(JSON.stringify([{ id: 'v1', licensePlate: 'X' }]), { kind: 'vehicles' })) as CheckedBulk;
    expect(vehicles.ok).toBe(true);
    expect(vehicles.facts).toBeUndefined();
  });

  it('answers a plain telemetry document as its span of the body, others as the text JSON.stringify makes', () => {
    const plain =
      '{"eventType":"locationUpdateEvent","id":"6b000000-0000-4000-8000-000000000010","lifecycle":"actual","geoReference":{"type":"latLonPointGeoReference","lat":52.4000,"lon":5.10}}';
    const spaced =
      '{"eventType": "locationUpdateEvent","id":"6b000000-0000-4000-8000-000000000011","geoReference":{"type":"latLonPointGeoReference","lat":52,"lon":5}}';
    const repeated =
      '{"eventType":"locationUpdateEvent","id":"6b000000-0000-4000-8000-000000000012","id":"6b000000-0000-4000-8000-000000000013","geoReference":{"type":"latLonPointGeoReference","lat":52,"lon":5}}';
    const noId = '{"eventType":"locationUpdateEvent","geoReference":{"type":"latLonPointGeoReference","lat":52,"lon":5}}';
    const entity = '{"entityType":"vehicle","id":"6c000000-0000-4000-8000-000000000009"}';
    for (const [format, body] of [
      ['json', Buffer.from(`[${plain},${spaced},${repeated},${noId}]`)],
      ['ndjson', Buffer.from(`${plain}\r\n${spaced}\n\n${repeated}\n${noId}`)],
    ] as const) {
      const r = checkBulk(task(body, { format })) as CheckedBulk;
      expect([...r.outcome]).toEqual([OUTCOME.telemetry, OUTCOME.telemetry, OUTCOME.telemetry, OUTCOME.telemetry]);
      expect(r.texts[0]).toBe('');
      expect(Buffer.from(r.body!).subarray(r.spans[0], r.spans[1]).toString()).toBe(plain);
      // Whitespace, a repeated name, a generated id: encoded again, as a single PUT would store it.
      expect(r.texts[1]).toBe(JSON.stringify(JSON.parse(spaced)));
      expect(r.texts[2]).toBe(JSON.stringify(JSON.parse(repeated)));
      expect(r.ids[2]).toBe('6b000000-0000-4000-8000-000000000013');
      expect(JSON.parse(r.texts[3]!)).toEqual({ id: r.ids[3], ...JSON.parse(noId) });
      expect([...r.spans.subarray(2)]).toEqual([0, 0, 0, 0, 0, 0]);
    }
    // A body given as text, and documents that are not telemetry: always text.
    expect(checkBulk(task(`[${plain}]`))).toMatchObject({ texts: [JSON.stringify(JSON.parse(plain))], body: undefined });
    const r = checkBulk(task(Buffer.from(`[${entity}]`), { kind: 'vehicles' })) as CheckedBulk;
    expect(r).toMatchObject({ texts: [entity], body: undefined });
  });

  it('refuses a body that is not an array, and too many documents, with the error to answer', () => {
    expect(checkBulk(task('{}'))).toMatchObject({ ok: false, status: 400, code: 'invalidDocument', items: [{ type: 'invalidJson' }] });
    expect(checkBulk(task('[{},{},{}]', { maxItems: 2 }))).toMatchObject({ ok: false, status: 413, items: [{ type: 'payloadTooLarge' }] });
  });

  it('refuses too many documents before parsing any: an array, or NDJSON lines (blank ones not counted)', () => {
    const parse = vi.spyOn(JSON, 'parse');
    try {
      const tooMany = {
        ok: false,
        status: 413,
        items: [{ type: 'payloadTooLarge', message: expect.stringContaining('at most 10 documents') }],
      };
      expect(checkBulk(task(Buffer.from(`[${'{"a":1},'.repeat(10)}{"a":1}]`), { maxItems: 10 }))).toMatchObject(tooMany);
      expect(checkBulk(task(Buffer.from('{"a":1}\n'.repeat(11)), { format: 'ndjson', maxItems: 10 }))).toMatchObject(tooMany);
      expect(parse).not.toHaveBeenCalled();
    } finally {
      parse.mockRestore();
    }
    const lines = Buffer.from(`${items.map((d) => `${JSON.stringify(d)}\n \r\n`).join('\n')}\n\n`);
    expect(checkBulk(task(lines, { format: 'ndjson', maxItems: 4 }))).toMatchObject({ ok: true, count: 4 });
    expect(checkBulk(task(lines, { format: 'ndjson', maxItems: 3 }))).toMatchObject({ ok: false, status: 413 });
  });

  it('takes NDJSON line by line: a byte order mark at its start dropped, a body not UTF-8 refused', () => {
    const [a, b] = [JSON.stringify(items[0]), JSON.stringify({ ...items[0], id: '6b000000-0000-4000-8000-000000000005' })];
    const withBom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(`${a}\n${b}`)]);
    const r = checkBulk(task(withBom, { format: 'ndjson' })) as CheckedBulk;
    expect([...r.outcome]).toEqual([OUTCOME.telemetry, OUTCOME.telemetry]);
    expect(Buffer.from(r.body!).subarray(r.spans[0], r.spans[1]).toString()).toBe(a);
    const notUtf8 = Buffer.concat([Buffer.from(`${a}\n{"x":"`), Buffer.from([0xc3, 0x28]), Buffer.from('"}\n')]);
    expect(checkBulk(task(notUtf8, { format: 'ndjson' }))).toMatchObject({
      ok: false,
      status: 400,
      items: [{ type: 'invalidJson', message: expect.stringContaining('UTF-8') }],
    });
  });

  it('keeps at most ITEM_ERRORS error items of a rejected document, the last saying how many more there were', () => {
    const doc: Record<string, unknown> = { ...items[0] };
    for (let i = 0; i < 30; i++) doc[`unknown${i}`] = i;
    const r = checkBulk(task(JSON.stringify([doc]))) as CheckedBulk;
    const errors = r.rejected[0]![1];
    expect(errors).toHaveLength(ITEM_ERRORS);
    expect(errors[ITEM_ERRORS - 1]).toEqual({
      type: 'invalidField',
      field: '$',
      message: expect.stringMatching(/^21 more problems not listed/),
    });
    // The model's own last item, when it left some out, is counted in.
    const many = Array.from({ length: 99 }, (_, i) => ({ type: 'invalidField' as const, field: `f${i}`, message: 'bad' }));
    const fromModel = [
      ...many,
      { type: 'invalidField' as const, field: '$', message: '50 more problems not listed (at most 100 items are reported)' },
    ];
    expect(cappedErrors(fromModel).at(-1)!.message).toMatch(/^140 more problems not listed/);
    expect(cappedErrors(many.slice(0, ITEM_ERRORS))).toHaveLength(ITEM_ERRORS);
  });
});

describe('BulkChecker on a worker thread', () => {
  const checker = new BulkChecker({ threads: 1, minBytes: 0 });
  afterAll(() => checker.close());

  it('answers what checkBulk answers on the event loop', async () => {
    const text = JSON.stringify(items);
    expect(checker.threads).toBe(1);
    expect(await checker.check(task(text))).toEqual(checkBulk(task(text)));
    expect(await checker.check(task(`${JSON.stringify(items[0])}\n\nnot json\n`, { format: 'ndjson' }))).toEqual(
      checkBulk(task(`${JSON.stringify(items[0])}\n\nnot json\n`, { format: 'ndjson' })),
    );
    expect(await checker.check(task('[{},{},{}]', { maxItems: 2 }))).toMatchObject({ ok: false, status: 413 });
    // Counted at GET /metrics, by where they were checked.
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/otm_bulk_check_seconds_count\{where="thread"\} [3-9]/);
    expect(metrics).toMatch(/otm_bulk_checks_in_flight 0/);
  });

  it('moves a body that owns its memory to the thread, and copies one that shares it', async () => {
    const text = JSON.stringify(Array.from({ length: 50 }, (_, i) => location(100 + i)));
    const owned = Buffer.from(new TextEncoder().encode(text).buffer);
    expect(owned.byteOffset).toBe(0);
    const r = (await checker.check(task(owned))) as CheckedBulk;
    expect(r.count).toBe(50);
    expect(owned.byteLength).toBe(0); // moved: detached here
    // …and moved back with the answer, the documents' texts being spans of it.
    const back = Buffer.from(r.body!.buffer, r.body!.byteOffset, r.body!.byteLength);
    expect(back.subarray(r.spans[2 * 49], r.spans[2 * 49 + 1]).toString()).toBe(JSON.stringify(location(149)));

    const shared = Buffer.from('[]'); // a slice of Node's shared pool
    expect(shared.byteLength).toBeLessThan(shared.buffer.byteLength);
    expect(await checker.check(task(shared))).toMatchObject({ ok: true, count: 0 });
    expect(shared.toString()).toBe('[]');
  });
});
