/**
 * Finding documents in a bulk body's bytes, and telling when those bytes can be stored as they are.
 */
import { describe, expect, it } from 'vitest';
import { membersWithin } from '@otm/core';
import {
  arraySpans,
  countArrayItems,
  countLines,
  forEachLine,
  lineSpan,
  plainBodyText,
  scanValue,
  type ScannedValue,
} from '../src/item-bytes.js';

const countMembers = (v: unknown) => membersWithin(v, Infinity);

const bytes = (s: string) => Buffer.from(s, 'utf8');
const scan = (s: string): ScannedValue => scanValue(bytes(s), 0, { end: 0, plain: false, members: 0 });

/** A decimal number as sign, digits without leading or trailing zeros, and exponent (0.digits × 10^exp). */
function decimal(s: string): string {
  const m = /^(-?)(\d*)(?:\.(\d*))?(?:e([+-]?\d+))?$/i.exec(s)!;
  let digits = m[2]! + (m[3] ?? '');
  let exp = m[2]!.length + Number(m[4] ?? 0);
  const lead = /^0*/.exec(digits)![0].length;
  digits = digits.slice(lead).replace(/0+$/, '');
  exp -= lead;
  return digits === '' ? '0' : `${m[1]}0.${digits}e${exp}`;
}

describe('scanValue', () => {
  it('finds where a value ends and counts the members of its objects at any depth', () => {
    const text = '{"a":{"b":[1,{"c":null,"d":true}],"e":"x"},"f":false}';
    expect(scan(`${text},{"z":1}`)).toEqual({ end: text.length, plain: true, members: 6 });
    expect(scan('[]')).toEqual({ end: 2, plain: true, members: 0 });
    expect(scan('{}')).toEqual({ end: 2, plain: true, members: 0 });
    expect(scan('"top"')).toEqual({ end: 5, plain: true, members: 0 });
    expect(scan('-12.5,')).toEqual({ end: 5, plain: true, members: 0 });
  });

  it('is not misled by brackets, colons, commas and escaped quotes inside strings', () => {
    const text = '{"a:b":"}],{:\\"\\\\","c":"\\u00e9\\/\\n","ü":"ünïcödé ✓"}';
    expect(JSON.parse(text)).toBeTruthy();
    expect(scan(`${text}]`)).toEqual({ end: bytes(text).length, plain: true, members: 3 });
  });

  it('calls plain only bytes that every reader parses to the value checked', () => {
    expect(scan('{"lat":52.4000,"lon":-0.5,"n":0,"m":-0,"big":123456789012345,"tiny":0.000000000000001}').plain).toBe(true);
    expect(scan('{"s":"\\u0041\\ud83d\\ude00"}').plain).toBe(true);
    // Whitespace between tokens (not inside strings).
    expect(scan('{"a": 1}').plain).toBe(false);
    expect(scan('{"a":1 }').plain).toBe(false);
    expect(scan('{"a":[1,\n2]}').plain).toBe(false);
    expect(scan('{"a":"x y"}').plain).toBe(true);
    // Exponents, and more than 15 significant digits.
    expect(scan('{"a":1e5}').plain).toBe(false);
    expect(scan('{"a":1.5E-3}').plain).toBe(false);
    expect(scan('{"a":1234567890123456}').plain).toBe(false);
    expect(scan('{"a":0.1234567890123456}').plain).toBe(false);
    expect(scan('{"a":123456789.0123456}').plain).toBe(false);
    // A member name that starts with a digit (JavaScript lists those first).
    expect(scan('{"b":1,"1":2}').plain).toBe(false);
    expect(scan('{"b":"1"}').plain).toBe(true);
  });

  it('plain numbers read back as the same double from their shortest form', () => {
    // A decimal of at most 15 significant digits is the only such decimal of its double.
    for (let i = 0; i < 20_000; i++) {
      const digits = 1 + Math.floor(Math.random() * 15);
      let d = '';
      for (let k = 0; k < digits; k++) d += String(Math.floor(Math.random() * 10));
      const point = Math.floor(Math.random() * (digits + 1));
      let token = point === digits ? d : `${d.slice(0, point) || '0'}.${d.slice(point)}`;
      token = token.replace(/^0+(?=\d)/, '');
      if (Math.random() < 0.5) token = `-${token}`;
      const v = scan(token);
      expect(v.plain).toBe(true);
      // The token and the shortest form of its double denote the same decimal.
      expect(decimal(String(Number(token)))).toBe(decimal(token));
    }
  });
  it('stops at the end it is given, on bytes that are not JSON (it is only given JSON, but must never run on)', () => {
    for (const text of ['"abc', '{"a":"x\\', '[[[', '{"a":tru', '-', '"\\"']) {
      // Bytes beyond the end close every string and bracket: a scan that ran past the end would
      // stop there, far beyond it, instead of running on for ever. An escape at the very end may
      // step one byte over it.
      const b = bytes(`${text}${'x'.repeat(20)}"}]]]]`);
      const v = scanValue(b, 0, { end: 0, plain: false, members: 0 }, text.length);
      expect(v.end, text).toBeLessThanOrEqual(text.length + 2);
    }
  });
});

describe('arraySpans', () => {
  it('gives the byte span of each document of an array, whitespace around them left out', () => {
    const docs = ['{"a":1}', '{"b":"é","c":[{"d":2}]}', '{}'];
    const body = bytes(` [ ${docs[0]} ,\n${docs[1]},${docs[2]}\t]\n`);
    const found = arraySpans(body, 3)!;
    const at = (k: number) => body.subarray(found.spans[2 * k], found.spans[2 * k + 1]).toString();
    expect([at(0), at(1), at(2)]).toEqual(docs);
    expect([...found.plain]).toEqual([1, 1, 1]);
    expect([...found.members]).toEqual([1, 3, 0]);
  });

  it('matches JSON.stringify for documents of every shape', () => {
    const docs = Array.from({ length: 200 }, (_, i) => ({
      id: `id-${i}`,
      n: i * 1.25,
      neg: -i,
      s: `quote " backslash \\ newline \n tab \t ${String.fromCharCode(i)} ü ✓`,
      nested: { list: [i, { x: null, y: [true, false, [], {}] }], empty: '' },
    }));
    const body = bytes(JSON.stringify(docs));
    const found = arraySpans(body, docs.length)!;
    docs.forEach((doc, k) => {
      expect(body.subarray(found.spans[2 * k], found.spans[2 * k + 1]).toString()).toBe(JSON.stringify(doc));
      expect(found.plain[k]).toBe(1);
      expect(found.members[k]).toBe(countMembers(doc));
    });
  });

  it('agrees with the parsed values on random documents: spans, members, and when the bytes are plain', () => {
    // A seeded generator, so that a failure can be replayed.
    let seed = 20261123;
    const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    const chars = ['a', 'Z', ' ', '"', '\\', '/', '\n', '\t', '\u0001', 'é', '✓', '😀', '{', '}', '[', ']', ':', ','];
    const str = () => Array.from({ length: Math.floor(rnd() * 8) }, () => pick(chars)).join('');
    const num = () =>
      pick([0, -0, 1, -17, 52.4, 0.1, 1e21, 1e-7, 123456789012345, 1234567890123456, 2 ** 53, Math.PI, -1.5e-300, rnd() * 1000]);
    const value = (depth: number): unknown => {
      const r = rnd();
      if (depth <= 0 || r < 0.4) return pick([() => str(), () => num(), () => true, () => false, () => null])();
      if (r < 0.7) return Array.from({ length: Math.floor(rnd() * 4) }, () => value(depth - 1));
      const o: Record<string, unknown> = {};
      for (let i = Math.floor(rnd() * 5); i > 0; i--) o[rnd() < 0.1 ? String(Math.floor(rnd() * 9)) + str() : str()] = value(depth - 1);
      return o;
    };
    // What the bytes JSON.stringify makes must be called, from the parsed value: not plain with a
    // number JavaScript writes with an exponent or with more than 15 digits, or a name starting with a digit.
    const plainValue = (v: unknown): boolean => {
      if (typeof v === 'number') {
        const t = String(v);
        return !/e/i.test(t) && t.replace(/^-/, '').replace('.', '').replace(/^0+/, '').length <= 15;
      }
      if (Array.isArray(v)) return v.every(plainValue);
      if (v !== null && typeof v === 'object') return Object.entries(v).every(([k, x]) => !/^[0-9]/.test(k) && plainValue(x));
      return true;
    };
    for (let round = 0; round < 200; round++) {
      const docs = Array.from({ length: 1 + Math.floor(rnd() * 6) }, () => value(4));
      const texts = docs.map((d) => JSON.stringify(d));
      const spaced = rnd() < 0.3;
      const body = bytes(`[${texts.map((t, i) => (spaced && i % 2 === 1 ? JSON.stringify(docs[i], null, 1) : t)).join(' , ')}]`);
      const found = arraySpans(body, docs.length)!;
      expect(found, `round ${round}`).toBeDefined();
      docs.forEach((doc, k) => {
        const text = body.subarray(found.spans[2 * k], found.spans[2 * k + 1]).toString();
        expect(JSON.parse(text)).toEqual(JSON.parse(texts[k]!));
        expect(found.members[k]).toBe(countMembers(doc));
        const hasSpace = spaced && k % 2 === 1 && text !== texts[k];
        expect(found.plain[k] === 1, `round ${round}, item ${k}: ${text}`).toBe(!hasSpace && plainValue(doc));
      });
    }
  });

  it('answers undefined when the body is not an array of that many values', () => {
    expect(arraySpans(bytes('{"a":1}'), 1)).toBeUndefined();
    expect(arraySpans(bytes('[{"a":1},{"b":2}]'), 1)).toBeUndefined();
    expect(arraySpans(bytes('[{"a":1}]'), 2)).toBeUndefined();
    expect(arraySpans(bytes('[]'), 0)).toMatchObject({ spans: new Uint32Array(0) });
  });
});

describe('lineSpan, plainBodyText and member counts', () => {
  it('takes an NDJSON line without the whitespace around it', () => {
    const body = bytes('  {"a":1}\r\n{"b":2} x');
    const v: ScannedValue = { end: 0, plain: false, members: 0 };
    expect(lineSpan(body, 0, 10, v)).toMatchObject({ start: 2, v: { end: 9, plain: true, members: 1 } });
    // Something after the value on the line: not plain.
    expect(lineSpan(body, 11, body.length, v).v.plain).toBe(false);
  });

  it('gives a single body its own text when it holds nothing but the plain document', () => {
    const body = (t: string) => [bytes(t), t, JSON.parse(t)] as const;
    expect(plainBodyText(...body('{"a":"é","b":1.50}'))).toBe('{"a":"é","b":1.50}');
    expect(plainBodyText(...body(' \r\n{"a":"é✓","b":[1]}\n'))).toBe('{"a":"é✓","b":[1]}');
    expect(plainBodyText(...body('{"a": 1}'))).toBeUndefined();
    expect(plainBodyText(...body('{"a":1,"a":2}'))).toBeUndefined();
    expect(plainBodyText(...body('{"a":1e3}'))).toBeUndefined();
    expect(plainBodyText(bytes('   '), '   ', undefined)).toBeUndefined();
  });

  it('counts fewer members than the bytes hold when a name is repeated', () => {
    const text = '{"a":1,"b":{"c":2,"c":3},"a":4}';
    expect(scan(text).members).toBe(5);
    expect(countMembers(JSON.parse(text))).toBe(3);
  });
});

describe('countArrayItems and countLines: documents counted before anything is parsed', () => {
  /** The bytes of `text`, recording the furthest index read (the counters read nothing but indexes and length). */
  const watched = (text: string) => {
    const b = bytes(text);
    const seen = { furthest: -1 };
    const proxy = new Proxy(b, {
      get(target, key) {
        if (typeof key === 'string' && /^\d+$/.test(key)) seen.furthest = Math.max(seen.furthest, Number(key));
        return Reflect.get(target, key);
      },
    });
    return { b: proxy as Uint8Array, seen };
  };

  it('counts the values at the top level of an array, as JSON.parse finds them', () => {
    for (const text of [
      '[]',
      ' [ ] ',
      '[1]',
      '[ 1 , "a,b" , {"x":[1,2],"y":{"z":","}} , [[],[",]"]] , null , true , false , -1.5e3 ]',
      String.raw`["\\", "\\\"],[", "\u005d,", {"\"":","}]`,
      '\n\t[\r\n{"a":1}\n,\n{"b":2}\n]\n',
      JSON.stringify(Array.from({ length: 300 }, (_, i) => ({ i, s: `"[{,}]"\\${String.fromCharCode(i)}`, l: [i, [i], { i }] }))),
    ]) {
      expect(countArrayItems(bytes(text), 1_000), text).toBe((JSON.parse(text) as unknown[]).length);
    }
    // After a UTF-8 byte order mark too.
    expect(countArrayItems(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes('[1,2]')]), 10)).toBe(2);
  });

  it('answers -1 for a body that is not an array, without looking further than its first value', () => {
    for (const text of ['', '   ', '{"a":[1,2,3]}', 'null', '"[1,2]"', '17', 'x[1]'])
      expect(countArrayItems(bytes(text), 10), text).toBe(-1);
  });

  it('stops as soon as the count passes the limit, reading nothing after the first document too many', () => {
    const head = `[${'{"a":[1,2]},'.repeat(10)}0`;
    const { b, seen } = watched(`${head},${'0,'.repeat(100_000)}0]`);
    expect(countArrayItems(b, 10)).toBe(11);
    expect(seen.furthest).toBe(head.length - 1);
    expect(countArrayItems(bytes(`${head}]`), 11)).toBe(11);
  });

  it('never runs past the end of bytes that are not JSON', () => {
    for (const text of ['[', '["abc', '["a\\', '[{"a":[', '[1,2,', '[}]', '[1]]]', '[,,,,]']) {
      const { b, seen } = watched(text);
      countArrayItems(b, 10);
      expect(seen.furthest, text).toBeLessThan(text.length);
    }
  });

  it('counts NDJSON lines that hold more than spaces, tabs and CRs, and stops past the limit', () => {
    expect(countLines(bytes(''), 10)).toBe(0);
    expect(countLines(bytes('\n\n \t\r\n\r\n'), 10)).toBe(0);
    expect(countLines(bytes('{"a":1}'), 10)).toBe(1);
    expect(countLines(bytes('{"a":1}\r\n\n  \n{"b":2}\n x \n'), 10)).toBe(3);
    expect(countLines(bytes('0\n'.repeat(1_000)), 10)).toBe(11);
    const spans: string[] = [];
    const body = bytes('\ufeff{"a":1}\r\n \n\t{"b":"é"}  \nlast');
    forEachLine(body, (start, end) => {
      spans.push(body.subarray(start, end).toString());
    });
    expect(spans).toEqual(['{"a":1}\r', '\t{"b":"é"}  ', 'last']);
    let calls = 0;
    forEachLine(bytes('1\n2\n3\n4\n'), () => ++calls < 2);
    expect(calls).toBe(2);
  });
});
