/**
 * The bulk route's own pieces: the answer, whose size is bounded whatever the items hold, and
 * what a request's Content-Type and Content-Encoding say its body is.
 */
import { describe, expect, it } from 'vitest';
import { OtmServiceError } from '@otm/core';
import type { OtmError } from '@otm/model';
import { bulkAnswer, bulkContent } from '../src/routes.js';

const id = (i: number) => `6d000000-0000-4000-8000-${String(i).padStart(12, '0')}`;

describe('bulkAnswer', () => {
  it('lists each item by index: the id of an accepted one, the errors of a rejected one', () => {
    const errors = new Map<number, OtmError[]>([[1, [{ type: 'missingField', field: 'eventType', message: 'missing' }]]]);
    expect(JSON.parse(bulkAnswer({ count: 3, ids: [id(0), '', id(2)], errors }))).toEqual({
      accepted: 2,
      rejected: 1,
      items: [
        { index: 0, id: id(0) },
        { index: 1, errors: errors.get(1) },
        { index: 2, id: id(2) },
      ],
    });
  });

  it('is at most 100 bytes a document beyond 256 KiB of listed problems, however many problems and however long', () => {
    const count = 10_000;
    const long = 'x'.repeat(100_000);
    const cases: Array<(i: number) => OtmError[]> = [
      // Many problems an item.
      () =>
        Array.from({ length: 100 }, (_, k) => ({
          type: 'invalidField',
          field: `member${k}`,
          message: `unknown member of locationUpdateEvent`,
        })),
      // Few, but long (a long member name is named in the answer).
      () => [{ type: 'invalidField', field: long, message: `unknown member ${long}` }],
      // One short problem an item, for every item.
      () => [{ type: 'invalidJson', message: 'the line is not valid JSON' }],
    ];
    for (const make of cases) {
      const errors = new Map<number, OtmError[]>();
      const ids: string[] = [];
      for (let i = 0; i < count; i++) {
        if (i % 3 === 0) ids.push(id(i));
        else {
          ids.push('');
          errors.set(i, make(i));
        }
      }
      const text = bulkAnswer({ count, ids, errors });
      expect(Buffer.byteLength(text)).toBeLessThanOrEqual(100 * count + 262_144);
      const answer = JSON.parse(text);
      expect(answer).toMatchObject({ accepted: count - errors.size, rejected: errors.size });
      expect(answer.items).toHaveLength(count);
      for (let i = 0; i < count; i++) {
        const item = answer.items[i];
        if (errors.has(i)) expect(item.errors.length, `item ${i}`).toBeGreaterThan(0);
        else expect(item).toEqual({ index: i, id: id(i) });
      }
      const listed = answer.items
        .flatMap((i: { errors?: OtmError[] }) => i.errors ?? [])
        .filter((e: OtmError) => !e.message.startsWith('problems not listed'));
      expect(listed.length).toBeLessThanOrEqual(1_000);
    }
  });

  it('lists the problems of the first rejected items in full, then says once why the others are not listed', () => {
    const errors = new Map<number, OtmError[]>();
    for (let i = 0; i < 3_000; i++) errors.set(i, [{ type: 'invalidField', field: 'lat', message: 'must be a number' }]);
    const answer = JSON.parse(bulkAnswer({ count: 3_000, ids: new Array(3_000).fill(''), errors }));
    expect(answer.items[999].errors).toEqual(errors.get(999));
    expect(answer.items[1_000].errors).toEqual([
      { type: 'invalidField', field: '$', message: expect.stringMatching(/^problems not listed: .*at most 1000 error items/) },
    ]);
    expect(answer.items[2_999].errors).toEqual([{ type: 'invalidField', field: '$', message: 'problems not listed' }]);
  });
});

describe('bulkContent', () => {
  const refused = (ct: string | undefined, ce?: string) => {
    const r = bulkContent(ct, ce);
    expect(r, `${ct} ${ce}`).toBeInstanceOf(OtmServiceError);
    return r as OtmServiceError;
  };

  it('takes JSON and NDJSON, in UTF-8 however the charset is written, as they are or gzip-compressed', () => {
    for (const ct of [
      'application/json',
      'APPLICATION/JSON',
      'application/json;charset=utf-8',
      'application/json ; Charset = "UTF-8" ; q="a;b"',
      'application/geo+json',
      'application/json;',
    ]) {
      expect(bulkContent(ct, undefined), ct).toEqual({ format: 'json', gzip: false });
    }
    for (const ct of ['application/x-ndjson', 'application/ndjson; charset="utf-8"'])
      expect(bulkContent(ct, undefined), ct).toEqual({ format: 'ndjson', gzip: false });
    expect(bulkContent('application/json', 'gzip')).toEqual({ format: 'json', gzip: true });
    expect(bulkContent('application/json', ' GZip ')).toEqual({ format: 'json', gzip: true });
    expect(bulkContent('application/json', 'identity')).toEqual({ format: 'json', gzip: false });
    expect(bulkContent(undefined, undefined)).toBeUndefined();
  });

  it('refuses other types, other charsets and other codings with 415 in the model format', () => {
    for (const ct of [
      'text/plain',
      'application/xml',
      'application/jsonx',
      'application/json; charset=latin1',
      'application/json; charset="utf-16"',
      'application/json; charset=utf-8; charset=ascii',
      'application/json; charset="utf-8',
    ]) {
      const e = refused(ct);
      expect(e.status).toBe(415);
      expect(e.items).toEqual([{ type: 'unsupportedMediaType', message: expect.any(String) }]);
    }
    for (const ce of ['br', 'deflate', 'compress', 'x-gzip', 'gzip, gzip', 'zstd']) {
      const e = refused('application/json', ce);
      expect(e.status).toBe(415);
      expect(e.headers).toEqual({ 'accept-encoding': 'gzip' });
      expect(e.items).toEqual([{ type: 'unsupportedMediaType', message: expect.stringContaining('gzip') }]);
    }
  });
});
