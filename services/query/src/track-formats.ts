/**
 * The answer bodies of a vehicle's track, in the formats a client may ask for: the events as they are
 * (`json`, `ndjson`), and as geometry for map and GIS tools (`geojson`, `gpx`, `csv`).
 *
 * A body streams: `trackBody` reads the points once, in order, and yields the text in chunks of about
 * `CHUNK_BYTES`, so that a day at 1 Hz (86,400 points) never sits in memory whole, only one chunk of
 * it. The one exception is GeoJSON's LineString, which needs every position: its coordinates are kept
 * as numbers in a Float64Array (16 bytes a point, about 1.4 MB for a day at 1 Hz) and written last,
 * after the Point features, which stream. RFC 7946 gives the features of a FeatureCollection no order.
 *
 * GPX 1.1 has no speed or course of a point (GPX 1.0 had; 1.1 dropped them), and its `<extensions>`
 * take only elements of other namespaces: speed (in m/s) and heading (as course, in degrees) go in
 * Garmin's TrackPointExtension v2, which map and sports tools read.
 *
 * A point whose time, latitude or longitude is not a finite number has no place on a map: the formats
 * of positions (GeoJSON, GPX, CSV) leave it out; `json` and `ndjson` answer its document all the same.
 * A speed or heading that is not a finite number is written as absent.
 */

/** One point of a track: where a vehicle was when, and the locationUpdateEvent that says so. */
export interface TrackPoint {
  /** Event time, ms since the epoch. */
  readonly time: number;
  readonly lat: number;
  readonly lon: number;
  /** The event's id (storage key, a UUID). */
  readonly id: string;
  /** The OTM locationUpdateEvent document as JSON text or UTF-8 bytes, exactly as GET answers it. */
  readonly doc: string | Buffer;
  readonly speedKmh?: number | null;
  readonly heading?: number | null;
}

/** What the track of a vehicle is answered as. */
export type TrackFormat = 'json' | 'geojson' | 'gpx' | 'csv' | 'ndjson';

export const TRACK_FORMATS: readonly TrackFormat[] = ['json', 'geojson', 'gpx', 'csv', 'ndjson'];

/** The Content-Type of each format; `header=present` tells CSV readers the first line names the columns (RFC 4180). */
export const TRACK_CONTENT_TYPES: Record<TrackFormat, string> = {
  json: 'application/json; charset=utf-8',
  geojson: 'application/geo+json',
  gpx: 'application/gpx+xml',
  csv: 'text/csv; charset=utf-8; header=present',
  ndjson: 'application/x-ndjson',
};

/** What a track answer says besides its points. */
export interface TrackMeta {
  /** The vehicle's id: the GPX track's name, a property of the GeoJSON LineString. */
  readonly vehicle: string;
  /** The time window asked for, ms since the epoch. */
  readonly from: number;
  readonly to: number;
  /**
   * The cursor of the next page (`json` only), asked once all points are read, so that it can
   * depend on the last of them; absent or null when there is none.
   */
  readonly next?: () => string | null;
}

/** About how many bytes `trackBody` gathers before yielding them. */
export const CHUNK_BYTES = 64 * 1024;

/**
 * The body of a track answer in `format`, in chunks of at most CHUNK_BYTES (more only when a
 * single document is larger). Text chunks are strings; when documents come as bytes, the chunks
 * holding them are Buffers, so that the bytes are answered as stored.
 */
export async function* trackBody(format: TrackFormat, points: AsyncIterable<TrackPoint>, meta: TrackMeta): AsyncGenerator<string | Buffer> {
  const out = new Chunker();
  switch (format) {
    case 'json':
      yield* jsonBody(out, points, meta);
      break;
    case 'ndjson':
      yield* ndjsonBody(out, points);
      break;
    case 'geojson':
      yield* geojsonBody(out, points, meta);
      break;
    case 'gpx':
      yield* gpxBody(out, points, meta);
      break;
    case 'csv':
      yield* csvBody(out, points);
      break;
    default:
      throw new RangeError(`unknown track format ${String(format satisfies never)}`);
  }
  const last = out.end();
  if (last !== undefined) yield last;
}

/**
 * Gathers text and bytes into chunks of about CHUNK_BYTES. `add` is a generator that yields the
 * chunk it completes, if any, for a body generator to pass on with `yield*`.
 */
class Chunker {
  /** Text added since the last Buffer. */
  private text = '';
  /** Bytes added before `text`, when a document came as a Buffer. */
  private parts: Buffer[] = [];
  private bytes = 0;

  *add(piece: string | Buffer): Generator<string | Buffer> {
    const size = typeof piece === 'string' ? Buffer.byteLength(piece) : piece.length;
    // Yield what is gathered before it goes past the limit, so that a chunk exceeds it only by
    // being one piece (a large document) alone.
    if (this.bytes > 0 && this.bytes + size > CHUNK_BYTES) yield this.take();
    if (typeof piece === 'string') {
      this.text += piece;
    } else {
      if (this.text !== '') this.parts.push(Buffer.from(this.text, 'utf8'));
      this.text = '';
      this.parts.push(piece);
    }
    this.bytes += size;
  }

  /** What is left, if anything. */
  end(): string | Buffer | undefined {
    return this.bytes > 0 ? this.take() : undefined;
  }

  private take(): string | Buffer {
    let chunk: string | Buffer = this.text;
    if (this.parts.length > 0) {
      if (this.text !== '') this.parts.push(Buffer.from(this.text, 'utf8'));
      chunk = Buffer.concat(this.parts, this.bytes);
    }
    this.text = '';
    this.parts = [];
    this.bytes = 0;
    return chunk;
  }
}

/** `{"items":[<doc>,...],"next":<cursor or null>}`, the documents as stored. */
async function* jsonBody(out: Chunker, points: AsyncIterable<TrackPoint>, meta: TrackMeta): AsyncGenerator<string | Buffer> {
  yield* out.add('{"items":[');
  let first = true;
  for await (const p of points) {
    const sep = first ? '' : ',';
    first = false;
    if (typeof p.doc === 'string') {
      yield* out.add(sep + p.doc);
    } else {
      if (sep !== '') yield* out.add(sep);
      yield* out.add(p.doc);
    }
  }
  yield* out.add(`],"next":${JSON.stringify(meta.next?.() ?? null)}}`);
}

/**
 * One document a line. A document is stored compact, with no line break; one that has any (JSON
 * allows them between tokens) is compacted, lest it be read as several lines.
 */
async function* ndjsonBody(out: Chunker, points: AsyncIterable<TrackPoint>): AsyncGenerator<string | Buffer> {
  for await (const p of points) {
    if (typeof p.doc === 'string') {
      yield* out.add(hasLineBreak(p.doc) ? `${compact(p.doc)}\n` : `${p.doc}\n`);
    } else if (p.doc.includes(0x0a) || p.doc.includes(0x0d)) {
      yield* out.add(`${compact(p.doc.toString('utf8'))}\n`);
    } else {
      yield* out.add(p.doc);
      yield* out.add('\n');
    }
  }
}

const hasLineBreak = (s: string) => s.includes('\n') || s.includes('\r');
const compact = (json: string) => JSON.stringify(JSON.parse(json));

/**
 * A FeatureCollection: a Point feature for each point as it comes, then the LineString through all
 * of them (when there are at least two: RFC 7946 wants two positions in a LineString).
 */
async function* geojsonBody(out: Chunker, points: AsyncIterable<TrackPoint>, meta: TrackMeta): AsyncGenerator<string | Buffer> {
  const from = iso(meta.from);
  const to = iso(meta.to);
  const line = new Positions();
  yield* out.add('{"type":"FeatureCollection","features":[');
  for await (const p of points) {
    if (!hasPosition(p)) continue;
    let props = `"id":${JSON.stringify(p.id)},"time":"${iso(p.time)}"`;
    if (isFiniteNumber(p.speedKmh)) props += `,"speedKmh":${p.speedKmh}`;
    if (isFiniteNumber(p.heading)) props += `,"heading":${p.heading}`;
    const sep = line.count === 0 ? '' : ',';
    yield* out.add(`${sep}{"type":"Feature","geometry":{"type":"Point","coordinates":[${p.lon},${p.lat}]},"properties":{${props}}}`);
    line.push(p.lon, p.lat);
  }
  if (line.count >= 2) {
    const props = `"vehicle":${JSON.stringify(meta.vehicle)},"from":"${from}","to":"${to}","count":${line.count}`;
    yield* out.add(`,{"type":"Feature","properties":{${props}},"geometry":{"type":"LineString","coordinates":[`);
    // A few positions at a time (under 1 KiB): fewer additions than one a position, and chunks still nearly full.
    const BATCH = 16;
    for (let i = 0; i < line.count; i += BATCH) {
      let text = '';
      for (let j = i; j < Math.min(i + BATCH, line.count); j++) text += `${j === 0 ? '' : ','}[${line.lon(j)},${line.lat(j)}]`;
      yield* out.add(text);
    }
    yield* out.add(']}}');
  }
  yield* out.add(']}');
}

/** Positions as [lon, lat] pairs in a Float64Array that doubles when full: 16 bytes a position. */
class Positions {
  private coords = new Float64Array(2 * 1024);
  count = 0;

  push(lon: number, lat: number): void {
    if (2 * this.count === this.coords.length) {
      const grown = new Float64Array(2 * this.coords.length);
      grown.set(this.coords);
      this.coords = grown;
    }
    this.coords[2 * this.count] = lon;
    this.coords[2 * this.count + 1] = lat;
    this.count++;
  }

  lon(i: number): number {
    return this.coords[2 * i]!;
  }

  lat(i: number): number {
    return this.coords[2 * i + 1]!;
  }
}

const GPX_NS = 'http://www.topografix.com/GPX/1/1';
/** Garmin's extension for what GPX 1.1 lost of a track point: speed (m/s) and course (degrees). */
const TPX_NS = 'http://www.garmin.com/xmlschemas/TrackPointExtension/v2';

/** GPX 1.1: one track named after the vehicle, one segment, a track point for each point. */
async function* gpxBody(out: Chunker, points: AsyncIterable<TrackPoint>, meta: TrackMeta): AsyncGenerator<string | Buffer> {
  yield* out.add(
    '<?xml version="1.0" encoding="UTF-8"?>\n' +
      `<gpx version="1.1" creator="otm-trip-exchange" xmlns="${GPX_NS}" xmlns:gpxtpx="${TPX_NS}">\n` +
      `<trk><name>${xmlText(meta.vehicle)}</name><trkseg>\n`,
  );
  for await (const p of points) {
    if (!hasPosition(p)) continue;
    let ext = '';
    if (isFiniteNumber(p.speedKmh)) ext += `<gpxtpx:speed>${decimal(p.speedKmh / 3.6)}</gpxtpx:speed>`;
    // TrackPointExtension's course is in [0, 360).
    if (isFiniteNumber(p.heading)) ext += `<gpxtpx:course>${decimal(((p.heading % 360) + 360) % 360)}</gpxtpx:course>`;
    if (ext !== '') ext = `<extensions><gpxtpx:TrackPointExtension>${ext}</gpxtpx:TrackPointExtension></extensions>`;
    yield* out.add(`<trkpt lat="${decimal(p.lat)}" lon="${decimal(p.lon)}"><time>${iso(p.time)}</time>${ext}</trkpt>\n`);
  }
  yield* out.add('</trkseg></trk>\n</gpx>\n');
}

/**
 * Text for XML content or a quoted attribute: the five markup characters as entities, and what XML 1.0
 * cannot hold at all, even as a reference (control characters but tab and line ends, lone surrogates,
 * U+FFFE and U+FFFF), replaced by U+FFFD.
 */
export function xmlText(s: string): string {
  return s.replace(/[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu, '\uFFFD').replace(/[&<>"']/g, (c) => XML_ENTITIES[c]!);
}

const XML_ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' };

/** RFC 4180 CSV, with a header line and CRLF line ends: one record a point. */
async function* csvBody(out: Chunker, points: AsyncIterable<TrackPoint>): AsyncGenerator<string | Buffer> {
  yield* out.add('time,lat,lon,speed_kmh,heading,event_id\r\n');
  for await (const p of points) {
    if (!hasPosition(p)) continue;
    const speed = isFiniteNumber(p.speedKmh) ? decimal(p.speedKmh) : '';
    const heading = isFiniteNumber(p.heading) ? decimal(p.heading) : '';
    yield* out.add(`${iso(p.time)},${decimal(p.lat)},${decimal(p.lon)},${speed},${heading},${csvField(p.id)}\r\n`);
  }
}

/** A CSV field, quoted (its quotes doubled) when it holds a comma, a quote or a line end. */
export function csvField(s: string): string {
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

const isFiniteNumber = (v: number | null | undefined): v is number => typeof v === 'number' && Number.isFinite(v);
const hasPosition = (p: TrackPoint) => Number.isFinite(p.time) && Number.isFinite(p.lat) && Number.isFinite(p.lon);
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * A finite number in plain decimal notation, never with an exponent: xsd:decimal (GPX coordinates)
 * has none, and spreadsheets read CSV better without. The digits are those of `String(n)`, the
 * shortest that read back as `n`.
 */
export function decimal(n: number): string {
  const s = String(n);
  const m = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(s);
  if (m === null) return s;
  const digits = m[2]! + (m[3] ?? '');
  const exp = Number(m[4]);
  // d.ddd × 10^exp: the point moves exp places right of the first digit.
  if (exp < 0) return `${m[1]}0.${'0'.repeat(-exp - 1)}${digits}`;
  return `${m[1]}${digits.padEnd(exp + 1, '0')}`;
}
