/**
 * Hostile bulk bodies (`POST /api/v5/bulk/<kind>`) cannot make the service hold memory in
 * proportion to their item count, nor answer with more than their own size and a bounded rest:
 * - too many items is a 413 found by counting the body's bytes, before anything is parsed;
 * - NDJSON lines are taken one at a time, never split into an array of every line;
 * - a body over the bulk limit is a 413 that names the bulk limit, not the single-PUT one;
 * - the answer lists a bounded number of problems an item, and a bounded amount in all.
 * Bodies are checked on the event loop here (the default of `startService`), where the test can
 * see which texts were parsed.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { auth, startService, type TestService } from '../../services/otm/test/helpers.js';

const BULK_LIMIT = 16_777_216;
const MAX_ITEMS = 10_000;

const location = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `7a000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
});

describe('bulk bodies: limits enforced before the work they bound', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => svc.close());
  afterEach(() => vi.restoreAllMocks());
  const post = (payload: string | Buffer, type = 'application/json', url = '/api/v5/bulk/events') =>
    svc.app.inject({ method: 'POST', url, headers: { ...auth(), 'content-type': type }, payload });

  it('refuses a JSON array of more items than the limit with 413 naming it, without parsing the body', async () => {
    const parse = vi.spyOn(JSON, 'parse');
    for (const body of [
      `[${'0,'.repeat(MAX_ITEMS)}0]`,
      `[${'0,'.repeat(2_000_000)}0]`,
      ` [ ${'{"a":[1,2,"]"]} , '.repeat(MAX_ITEMS + 1)}{} ]`,
    ]) {
      parse.mockClear();
      const res = await post(body);
      const parsedBig = parse.mock.calls.some(([text]) => typeof text === 'string' && text.length >= MAX_ITEMS);
      expect(parsedBig, 'the body was parsed').toBe(false);
      expect(res.statusCode).toBe(413);
      expect(res.json()).toEqual([{ type: 'payloadTooLarge', message: expect.stringContaining(`at most ${MAX_ITEMS} documents`) }]);
    }
  });

  it('counts only top-level items: commas inside strings, objects and nested arrays are not items', async () => {
    const doc = { ...location(1), externalAttributes: { note: 'a, "b", [c], {d}', list: Array.from({ length: 50 }, (_, i) => i) } };
    const items = Array.from({ length: MAX_ITEMS }, (_, i) => ({ ...doc, id: location(i).id }));
    const res = await post(JSON.stringify(items));
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ accepted: MAX_ITEMS, rejected: 0 });
  });

  it('refuses NDJSON of more non-blank lines than the limit with 413, without parsing a line or splitting the body', async () => {
    const parse = vi.spyOn(JSON, 'parse');
    const split = vi.spyOn(String.prototype, 'split');
    const body = `\n\n${'0\n\r\n \n'.repeat(MAX_ITEMS + 1)}`;
    const res = await post(body, 'application/x-ndjson');
    const lineParses = parse.mock.calls.filter(([text]) => text === '0').length;
    const bigSplits = split.mock.contexts.filter((s) => String(s).length >= MAX_ITEMS).length;
    vi.restoreAllMocks();
    expect(lineParses, 'lines were parsed').toBe(0);
    expect(bigSplits, 'the body was split').toBe(0);
    expect(res.statusCode).toBe(413);
    expect(res.json()).toEqual([{ type: 'payloadTooLarge', message: expect.stringContaining(`at most ${MAX_ITEMS} documents`) }]);
  });

  it('takes NDJSON of blank lines only (nothing to do) without splitting it into lines', async () => {
    const split = vi.spyOn(String.prototype, 'split');
    const res = await post('\n'.repeat(4 * 1_048_576), 'application/x-ndjson');
    const bigSplits = split.mock.contexts.filter((s) => String(s).length >= 1_048_576).length;
    vi.restoreAllMocks();
    expect(bigSplits, 'the body was split').toBe(0);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ accepted: 0, rejected: 0, items: [] });
  });

  it('takes exactly the limit of NDJSON lines, blank lines between them not counted', async () => {
    const lines = Array.from({ length: MAX_ITEMS }, (_, i) => JSON.stringify(location(100_000 + i)));
    const res = await post(`${lines.join('\n\n')}\n \n`, 'application/x-ndjson');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ accepted: MAX_ITEMS, rejected: 0 });
  });

  it('answers 413 naming the bulk limit (not the single-PUT limit) to a body over it', async () => {
    const res = await post(Buffer.alloc(BULK_LIMIT + 1, 0x20));
    expect(res.statusCode).toBe(413);
    expect(res.json()).toEqual([{ type: 'payloadTooLarge', message: expect.stringContaining(String(BULK_LIMIT)) }]);
    expect(res.body).not.toContain('1048576');
  });

  it('keeps answering an empty body, null, a non-array and an empty array as before', async () => {
    for (const body of ['', '  ', 'null', '{}', '{"items":[1,2,3]}', '"text"', '17', 'nope']) {
      const res = await post(body);
      expect(res.statusCode, body).toBe(400);
      expect(res.json(), body).toEqual([expect.objectContaining({ type: 'invalidJson' })]);
    }
    for (const [body, type] of [
      ['[]', 'application/json'],
      [' [ ] ', 'application/json'],
      ['', 'application/x-ndjson'],
      ['\n \n', 'application/x-ndjson'],
    ] as const) {
      const res = await post(body, type);
      expect(res.statusCode, body).toBe(200);
      expect(res.json(), body).toEqual({ accepted: 0, rejected: 0, items: [] });
    }
    // A broken array under the item limit is still a 400 from the parser.
    expect((await post('[1,2')).statusCode).toBe(400);
  });
});

describe('bulk answers: bounded by the body, whatever its items hold', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => svc.close());
  const post = (payload: string, type = 'application/json', url = '/api/v5/bulk/events') =>
    svc.app.inject({ method: 'POST', url, headers: { ...auth(), 'content-type': type }, payload });

  /** Bytes the answer may hold beyond the body: an entry an item, and a fixed budget of listed problems. */
  const slack = (items: number) => 100 * items + 262_144;

  it('lists at most 10 problems of one item, the last saying how many were left out', async () => {
    const doc: Record<string, unknown> = { ...location(1), geoReference: { type: 'latLonPointGeoReference', lat: 'x', lon: 'y' } };
    for (let i = 0; i < 30; i++) doc[`unknown${i}`] = i;
    const res = await post(JSON.stringify([doc, location(2)]));
    expect(res.statusCode).toBe(200);
    const [first, second] = res.json().items;
    expect(first.errors).toHaveLength(10);
    expect(first.errors[0]).toMatchObject({ type: 'invalidField', field: 'geoReference.lat' });
    expect(first.errors[9]).toEqual({ type: 'invalidField', field: '$', message: expect.stringMatching(/^23 more problems not listed/) });
    expect(second).toEqual({ index: 1, id: location(2).id });
  });

  it('answers a body of many invalid items with no more than the body and a bounded rest', async () => {
    const doc: Record<string, unknown> = {
      eventType: 'locationUpdateEvent',
      lifecycle: 'actual',
      geoReference: { type: 'latLonPointGeoReference', lat: 'x', lon: 'y' },
    };
    for (let i = 0; i < 30; i++) doc[`x${i}`] = i;
    for (const [body, count] of [
      [JSON.stringify(Array.from({ length: 1_000 }, () => doc)), 1_000],
      [JSON.stringify(Array.from({ length: MAX_ITEMS }, () => ({}))), MAX_ITEMS],
      [`[${Array.from({ length: 2_000 }, (_, i) => (i % 2 === 0 ? JSON.stringify(location(i)) : '0')).join(',')}]`, 2_000],
    ] as const) {
      const res = await post(body);
      expect(res.statusCode).toBe(200);
      expect(res.body.length).toBeLessThanOrEqual(body.length + slack(count));
      const answer = res.json();
      expect(answer.items).toHaveLength(count);
      // Every rejected item still says it was rejected, with at least one error item.
      const rejected = answer.items.filter((i: { errors?: unknown[] }) => i.errors !== undefined);
      expect(rejected).toHaveLength(answer.rejected);
      for (const item of rejected) expect(item.errors.length).toBeGreaterThan(0);
      // Problems are listed in full for the first items only: at most 1000 error items in all,
      // beside the one short item of each item past that.
      const listed = rejected
        .flatMap((i: { errors: Array<{ message: string }> }) => i.errors)
        .filter((e: { message: string }) => !/not listed/.test(e.message));
      expect(listed.length).toBeLessThanOrEqual(1_000);
    }
  });

  it('answers NDJSON lines that are not JSON within the same bound', async () => {
    const body = `${'{"no json here, just a long line of text that goes on and on and on'.repeat(4)}\n`.repeat(5_000);
    const res = await post(body, 'application/x-ndjson');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ accepted: 0, rejected: 5_000 });
    expect(res.body.length).toBeLessThanOrEqual(body.length + slack(5_000));
  });
});
