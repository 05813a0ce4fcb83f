/**
 * The answer bodies of a track, read back with parsers that know nothing of ours: GeoJSON checked
 * by @placemarkio/check-geojson, GPX by fast-xml-parser, CSV by csv-parse, JSON by JSON.parse. A
 * day at 1 Hz checks that a body streams in bounded chunks, reading the points as it goes.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { check } from '@placemarkio/check-geojson';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { parse as parseCsv } from 'csv-parse/sync';
import type { Feature, FeatureCollection, LineString, Point } from 'geojson';
import {
  CHUNK_BYTES,
  TRACK_CONTENT_TYPES,
  TRACK_FORMATS,
  decimal,
  trackBody,
  xmlText,
  type TrackFormat,
  type TrackPoint,
} from '../src/track-formats.js';

const T0 = Date.UTC(2025, 5, 1);
const DAY = 86_400;
const META = { vehicle: 'veh-1', from: T0, to: T0 + DAY * 1000 };

/** A UUID-shaped id for point `i`. */
const uuid = (i: number) => `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;

/** Point `i` of a track at 1 Hz, its document the compact JSON an event store answers. */
function point(i: number, extra: Partial<TrackPoint> = {}): TrackPoint {
  const time = T0 + i * 1000;
  const lat = 52.5 + i * 1e-5;
  const lon = 13.4 - i * 1e-5;
  const speedKmh = i % 3 === 0 ? null : 30 + (i % 50);
  const heading = i % 4 === 0 ? undefined : (i * 7) % 360;
  const doc = JSON.stringify({ id: uuid(i), time: new Date(time).toISOString(), position: { latitude: lat, longitude: lon } });
  return { time, lat, lon, id: uuid(i), doc, speedKmh, heading, ...extra };
}

const points = (n: number) => Array.from({ length: n }, (_, i) => point(i));

async function* from<T>(items: Iterable<T>): AsyncGenerator<T> {
  for (const item of items) yield item;
}

/** The whole body and the chunks it came in. */
async function body(format: TrackFormat, pts: Iterable<TrackPoint>, meta: Parameters<typeof trackBody>[2] = META) {
  const chunks: (string | Buffer)[] = [];
  for await (const chunk of trackBody(format, from(pts), meta)) chunks.push(chunk);
  const bytes = Buffer.concat(chunks.map((c) => (typeof c === 'string' ? Buffer.from(c, 'utf8') : c)));
  return { chunks, bytes, text: bytes.toString('utf8') };
}

const xml = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '@',
  parseTagValue: false,
  parseAttributeValue: false,
  isArray: (name) => name === 'trkpt' || name === 'trk' || name === 'trkseg',
});

/** A GPX body, valid XML, as parsed: its root element. */
function gpx(text: string): any {
  expect(XMLValidator.validate(text)).toBe(true);
  const doc = xml.parse(text);
  expect(Object.keys(doc).filter((k) => k !== '?xml')).toEqual(['gpx']);
  return doc.gpx;
}

const csv = (text: string): Record<string, string>[] => parseCsv(text, { columns: true, record_delimiter: '\r\n' });

describe('track formats', () => {
  it('names a media type for each format', () => {
    expect([...TRACK_FORMATS].sort()).toEqual(['csv', 'geojson', 'gpx', 'json', 'ndjson']);
    expect(TRACK_CONTENT_TYPES).toEqual({
      json: 'application/json; charset=utf-8',
      geojson: 'application/geo+json',
      gpx: 'application/gpx+xml',
      csv: 'text/csv; charset=utf-8; header=present',
      ndjson: 'application/x-ndjson',
    });
  });
});

describe('json', () => {
  it('answers the documents as they are, then the cursor asked for once all points are read', async () => {
    const pts = points(5);
    const order: string[] = [];
    const source = async function* () {
      yield* from(pts);
      order.push('exhausted');
    };
    const chunks: string[] = [];
    for await (const c of trackBody('json', source(), {
      ...META,
      next: () => {
        order.push('next');
        return 'cursor "5"';
      },
    })) {
      chunks.push(c.toString());
    }
    const text = chunks.join('');
    expect(text).toBe(`{"items":[${pts.map((p) => p.doc as string).join(',')}],"next":"cursor \\"5\\""}`);
    expect(JSON.parse(text)).toEqual({ items: pts.map((p) => JSON.parse(p.doc as string)), next: 'cursor "5"' });
    expect(order).toEqual(['exhausted', 'next']);
  });

  it('answers bytes as stored, and next null when there is no cursor', async () => {
    // Not re-serialised: spacing, key order and escapes stay.
    const docs = ['{"b": 1, "a":"\\u00e9"}', '{"x":"ünïcödé ✓"}', '{}'];
    const pts = docs.map((d, i) => point(i, { doc: Buffer.from(d, 'utf8') }));
    const { bytes } = await body('json', pts, { ...META, next: () => null });
    expect(bytes.equals(Buffer.from(`{"items":[${docs.join(',')}],"next":null}`, 'utf8'))).toBe(true);
  });

  it('answers an empty list for no points, and one document for one', async () => {
    expect((await body('json', [])).text).toBe('{"items":[],"next":null}');
    const one = point(0);
    expect(JSON.parse((await body('json', [one])).text)).toEqual({ items: [JSON.parse(one.doc as string)], next: null });
  });
});

describe('ndjson', () => {
  it('answers a document a line', async () => {
    const pts = points(4);
    const { text } = await body('ndjson', pts);
    expect(text).toBe(pts.map((p) => `${p.doc as string}\n`).join(''));
    expect(
      text
        .split('\n')
        .slice(0, -1)
        .map((l) => JSON.parse(l)),
    ).toEqual(pts.map((p) => JSON.parse(p.doc as string)));
  });

  it('keeps bytes as stored, and compacts a document with line breaks', async () => {
    const pts = [
      point(0, { doc: Buffer.from('{"a":"é"}', 'utf8') }),
      point(1, { doc: '{\n  "b": [1,\r\n 2]\n}' }),
      point(2, { doc: Buffer.from('{"c":\n"x\\ny"}', 'utf8') }),
    ];
    const { text } = await body('ndjson', pts);
    expect(text).toBe('{"a":"é"}\n{"b":[1,2]}\n{"c":"x\\ny"}\n');
  });

  it('answers nothing for no points, one line for one', async () => {
    expect((await body('ndjson', [])).text).toBe('');
    expect((await body('ndjson', [point(0)])).text).toBe(`${point(0).doc as string}\n`);
  });
});

describe('geojson', () => {
  /** A body that check-geojson finds valid, as a FeatureCollection. */
  const collection = (text: string) => {
    const parsed = check(text);
    expect(parsed.type).toBe('FeatureCollection');
    return parsed as FeatureCollection;
  };

  it('answers valid GeoJSON: a Point feature for each point, then the LineString through them', async () => {
    const pts = points(6);
    const { features } = collection((await body('geojson', pts)).text);
    expect(features).toHaveLength(7);
    features.slice(0, 6).forEach((f, i) => {
      const p = pts[i]!;
      expect(f.geometry).toEqual({ type: 'Point', coordinates: [p.lon, p.lat] });
      const props: Record<string, unknown> = { id: p.id, time: new Date(p.time).toISOString() };
      if (p.speedKmh != null) props.speedKmh = p.speedKmh;
      if (p.heading != null) props.heading = p.heading;
      expect(f.properties).toEqual(props);
    });
    const line = features[6] as Feature<LineString>;
    expect(line.geometry.coordinates).toEqual(pts.map((p) => [p.lon, p.lat]));
    expect(line.properties).toEqual({
      vehicle: 'veh-1',
      from: '2025-06-01T00:00:00.000Z',
      to: '2025-06-02T00:00:00.000Z',
      count: 6,
    });
  });

  it('leaves the LineString out with fewer than two points', async () => {
    expect(collection((await body('geojson', [])).text).features).toEqual([]);
    const one = collection((await body('geojson', [point(0)])).text).features;
    expect(one).toHaveLength(1);
    expect(one[0]!.geometry.type).toBe('Point');
    const two = collection((await body('geojson', points(2))).text).features;
    expect(two.map((f) => f.geometry.type)).toEqual(['Point', 'Point', 'LineString']);
  });

  it('escapes odd vehicle ids, and leaves out points with no finite position and speeds that are not numbers', async () => {
    const vehicle = 'v "1"\\\n\u0001</script>é';
    const pts = [
      point(0, { speedKmh: Number.NaN, heading: Number.POSITIVE_INFINITY }),
      point(1, { lat: Number.NaN }),
      point(2, { lon: Number.POSITIVE_INFINITY }),
      point(3, { time: Number.NaN }),
      point(4, { lat: 1e-7, lon: -0 }),
    ];
    const { features } = collection((await body('geojson', pts, { ...META, vehicle })).text);
    expect(features.map((f) => (f.properties as { id?: string }).id)).toEqual([uuid(0), uuid(4), undefined]);
    expect(features[0]!.properties).toEqual({ id: uuid(0), time: new Date(T0).toISOString() });
    expect((features[1] as Feature<Point>).geometry.coordinates).toEqual([0, 1e-7]);
    expect(features[2]!.properties).toMatchObject({ vehicle, count: 2 });
  });
});

describe('gpx', () => {
  it('answers GPX 1.1: one track named after the vehicle, a track point for each point', async () => {
    const pts = points(5);
    const { text } = await body('gpx', pts);
    expect(text.startsWith('<?xml version="1.0" encoding="UTF-8"?>\n')).toBe(true);
    const root = gpx(text);
    expect(root['@version']).toBe('1.1');
    expect(root['@creator']).toBe('otm-trip-exchange');
    expect(root['@xmlns']).toBe('http://www.topografix.com/GPX/1/1');
    expect(root['@xmlns:gpxtpx']).toBe('http://www.garmin.com/xmlschemas/TrackPointExtension/v2');
    expect(root.trk).toHaveLength(1);
    expect(root.trk[0].name).toBe('veh-1');
    expect(root.trk[0].trkseg).toHaveLength(1);
    const trkpts = root.trk[0].trkseg[0].trkpt;
    expect(trkpts).toHaveLength(5);
    trkpts.forEach((t: any, i: number) => {
      const p = pts[i]!;
      expect(Number(t['@lat'])).toBe(p.lat);
      expect(Number(t['@lon'])).toBe(p.lon);
      expect(t.time).toBe(new Date(p.time).toISOString());
      const ext = t.extensions?.['gpxtpx:TrackPointExtension'];
      if (p.speedKmh == null && p.heading == null) {
        expect(t.extensions).toBeUndefined();
      } else {
        // Speed in m/s, heading as course.
        if (p.speedKmh == null) expect(ext['gpxtpx:speed']).toBeUndefined();
        else expect(Number(ext['gpxtpx:speed']) * 3.6).toBeCloseTo(p.speedKmh, 9);
        if (p.heading == null) expect(ext['gpxtpx:course']).toBeUndefined();
        else expect(Number(ext['gpxtpx:course'])).toBe(p.heading);
      }
    });
  });

  it('writes coordinates as xsd:decimal and courses in [0, 360)', async () => {
    const pts = [point(0, { lat: 1e-7, lon: -2.5e-8, heading: -90, speedKmh: 36 }), point(1, { heading: 720.5 })];
    const { text } = await body('gpx', pts);
    expect(text).toContain('<trkpt lat="0.0000001" lon="-0.000000025">');
    const trkpts = gpx(text).trk[0].trkseg[0].trkpt;
    expect(trkpts[0].extensions['gpxtpx:TrackPointExtension']).toEqual({ 'gpxtpx:speed': '10', 'gpxtpx:course': '270' });
    expect(trkpts[1].extensions['gpxtpx:TrackPointExtension']['gpxtpx:course']).toBe('0.5');
  });

  it('answers an empty segment for no points, one track point for one', async () => {
    const empty = gpx((await body('gpx', [])).text);
    expect(empty.trk[0].name).toBe('veh-1');
    expect(empty.trk[0].trkseg[0]).toBe('');
    const one = gpx((await body('gpx', [point(0)])).text);
    expect(one.trk[0].trkseg[0].trkpt).toHaveLength(1);
  });

  it('escapes the vehicle id, and replaces what XML cannot hold', async () => {
    const vehicle = `<a href="x">&amp; 'b'</a>\u0000\u0007\uFFFF\uD800 ✓ 🚚`;
    const root = gpx((await body('gpx', [point(0), point(1, { lat: Number.NaN })], { ...META, vehicle })).text);
    expect(root.trk[0].name).toBe(`<a href="x">&amp; 'b'</a>\uFFFD\uFFFD\uFFFD\uFFFD ✓ 🚚`);
    expect(root.trk[0].trkseg[0].trkpt).toHaveLength(1);
    expect(xmlText('a&b<c>"d"\'e\'\tf\r\n')).toBe('a&amp;b&lt;c&gt;&quot;d&quot;&apos;e&apos;\tf\r\n');
  });
});

describe('csv', () => {
  it('answers RFC 4180 CSV with a header, CRLF line ends and empty fields for what is absent', async () => {
    const pts = points(5);
    const { text } = await body('csv', pts);
    expect(text.split('\r\n')[0]).toBe('time,lat,lon,speed_kmh,heading,event_id');
    expect(text.endsWith('\r\n')).toBe(true);
    expect(text.replace(/\r\n/g, '')).not.toMatch(/[\r\n]/);
    expect(csv(text)).toEqual(
      pts.map((p) => ({
        time: new Date(p.time).toISOString(),
        lat: String(p.lat),
        lon: String(p.lon),
        speed_kmh: p.speedKmh == null ? '' : String(p.speedKmh),
        heading: p.heading == null ? '' : String(p.heading),
        event_id: p.id,
      })),
    );
  });

  it('quotes fields that need it, and leaves out points with no finite position', async () => {
    const odd = 'a,"b"\r\nc';
    const pts = [point(0, { id: odd, lat: 1e-7 }), point(1, { lon: Number.NaN }), point(2, { id: 'é ✓', speedKmh: Infinity })];
    const { text } = await body('csv', pts);
    expect(text).toContain(',"a,""b""\r\nc"\r\n');
    const rows = csv(text);
    expect(rows.map((r) => r.event_id)).toEqual([odd, 'é ✓']);
    expect(rows[0]!.lat).toBe('0.0000001');
    expect(rows[1]!.speed_kmh).toBe('');
  });

  it('answers the header alone for no points, one record for one', async () => {
    expect((await body('csv', [])).text).toBe('time,lat,lon,speed_kmh,heading,event_id\r\n');
    expect(csv((await body('csv', [point(0)])).text)).toHaveLength(1);
  });
});

describe('streaming', () => {
  /** A day at 1 Hz made as it is read, counting the points read. */
  function day() {
    const read = { count: 0 };
    const source = async function* () {
      for (let i = 0; i < DAY; i++) {
        read.count++;
        yield point(i);
      }
    };
    return { read, source };
  }

  it.each(TRACK_FORMATS)('streams a day at 1 Hz as %s in chunks of about 64 KiB, reading the points as it goes', async (format) => {
    const { read, source } = day();
    const sizes: number[] = [];
    let readAtFirstChunk = -1;
    const parts: Buffer[] = [];
    for await (const chunk of trackBody(format, source(), META)) {
      if (readAtFirstChunk < 0) readAtFirstChunk = read.count;
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
      sizes.push(bytes.length);
      parts.push(bytes);
    }
    const total = Buffer.concat(parts);
    expect(read.count).toBe(DAY);
    // The first chunk goes out after a few hundred points, not after the day.
    expect(readAtFirstChunk).toBeGreaterThan(0);
    expect(readAtFirstChunk).toBeLessThan(2000);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(CHUNK_BYTES);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(128 * 1024);
    // All chunks but the last are nearly full: a chunk is not a point.
    expect(Math.min(...sizes.slice(0, -1))).toBeGreaterThan(CHUNK_BYTES - 1024);
    expect(sizes.length).toBeGreaterThan(total.length / CHUNK_BYTES);
    expect(sizes.length).toBeLessThan(total.length / CHUNK_BYTES + 2);

    const text = total.toString('utf8');
    switch (format) {
      case 'json': {
        const parsed = JSON.parse(text);
        expect(parsed.items).toHaveLength(DAY);
        expect(parsed.items[DAY - 1].id).toBe(uuid(DAY - 1));
        break;
      }
      case 'ndjson':
        expect(text.split('\n')).toHaveLength(DAY + 1);
        break;
      case 'geojson': {
        const parsed = JSON.parse(text) as FeatureCollection;
        expect(parsed.features).toHaveLength(DAY + 1);
        const line = parsed.features[DAY] as Feature<LineString>;
        expect(line.geometry.coordinates).toHaveLength(DAY);
        expect(line.geometry.coordinates[DAY - 1]).toEqual([point(DAY - 1).lon, point(DAY - 1).lat]);
        break;
      }
      case 'gpx':
        expect(gpx(text).trk[0].trkseg[0].trkpt).toHaveLength(DAY);
        break;
      case 'csv':
        expect(csv(text)).toHaveLength(DAY);
        break;
    }
  });

  it('answers a document larger than a chunk in a chunk of its own', async () => {
    const big = JSON.stringify({ note: 'x'.repeat(200 * 1024) });
    const pts = [...points(1000), point(1000, { doc: big }), ...points(1000)];
    const { chunks, text } = await body('ndjson', pts);
    const sizes = chunks.map((c) => Buffer.byteLength(c));
    expect(sizes.filter((s) => s > CHUNK_BYTES)).toEqual([big.length + 1]);
    expect(text.split('\n')).toHaveLength(2002);
  });
});

describe('decimal', () => {
  it('writes numbers without an exponent, reading back as the same number', () => {
    expect(decimal(1e-7)).toBe('0.0000001');
    expect(decimal(-1.25e-10)).toBe('-0.000000000125');
    expect(decimal(1e21)).toBe('1000000000000000000000');
    expect(decimal(-1.5e22)).toBe('-15000000000000000000000');
    expect(decimal(52.52)).toBe('52.52');
    expect(decimal(-0)).toBe('0');
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (n) => {
        const s = decimal(n);
        expect(s).toMatch(/^-?\d+(\.\d+)?$/);
        expect(Number(s)).toBe(n === 0 ? 0 : n);
      }),
    );
  });
});
