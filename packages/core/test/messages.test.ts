import { describe, expect, it } from 'vitest';
import {
  TextPut,
  decodeMessage,
  encodeMessage,
  eventFacts,
  jsonOf,
  newEventFactsTable,
  setEventFacts,
  type ChangeMessage,
} from '../src/index.js';

const put = (doc: Record<string, unknown>): ChangeMessage => ({
  v: 1,
  op: 'put',
  tenant: 'acme',
  kind: 'events',
  key: 'k1',
  doc,
  acceptedAt: 1_700_000_000_123,
});

describe('change messages on a text bus', () => {
  it('round-trip puts and deletes, the document last', () => {
    const doc = {
      id: 'k1',
      eventType: 'locationUpdateEvent',
      name: 'q"\\\u00e9\n',
      externalAttributes: { doc: { ',"doc":': 1 }, __proto__x: [1.5, null] },
    };
    const text = String(encodeMessage(put(doc)));
    expect(text.endsWith(`,"doc":${JSON.stringify(doc)}}`)).toBe(true);
    const back = decodeMessage(text);
    expect(back).toEqual(put(doc));
    expect(jsonOf((back as { doc: Record<string, unknown> }).doc)).toBe(JSON.stringify(doc));
    const del: ChangeMessage = { v: 1, op: 'delete', tenant: 'acme', kind: 'vehicles', key: 'k2', acceptedAt: 5 };
    expect(decodeMessage(String(encodeMessage(del)))).toEqual(del);
  });

  it("hands the sender's document text to jsonOf instead of encoding it again", () => {
    // A space the receiver's JSON.stringify would not write: the text must come from the message.
    const text = '{"v":1,"op":"put","tenant":"acme","kind":"events","key":"k1","acceptedAt":7,"doc":{"id": "k1"}}';
    const m = decodeMessage(text) as { doc: Record<string, unknown> };
    expect(m.doc).toEqual({ id: 'k1' });
    expect(jsonOf(m.doc)).toBe('{"id": "k1"}');
  });

  it('takes the text only where it can be nothing but the document: otherwise jsonOf encodes it', () => {
    const textOf = (text: string) => jsonOf((decodeMessage(text) as { doc: Record<string, unknown> }).doc);
    const head = '{"v":1,"op":"put","tenant":"acme","kind":"events","key":"k1"';
    // A member before the document that holds an object with a `,"doc":{` of its own.
    expect(textOf(`${head},"x":{"a":1,"doc":{"id": "no"}},"doc":{"id": "k1"}}`)).toBe('{"id":"k1"}');
    // A member after the document, also one whose name JavaScript lists first ("1").
    expect(textOf(`${head},"doc":{"id": "k1"},"1":5}`)).toBe('{"id":"k1"}');
    expect(textOf(`${head},"doc":{"id": "k1"},"acceptedAt":7}`)).toBe('{"id":"k1"}');
    // Whitespace after the document.
    expect(textOf(`${head},"doc":{"id": "k1"} }`)).toBe('{"id":"k1"}');
    // A first "doc" that is not an object: the text is the last one's, as parsed.
    expect(textOf(`${head},"doc":5,"doc":{"id": "k1"}}`)).toBe('{"id": "k1"}');
    // The document holding members named doc: the outer one is found.
    expect(textOf(`${head},"doc":{"doc":{"doc":{}},"x":",\\"doc\\":{"}}`)).toBe('{"doc":{"doc":{}},"x":",\\"doc\\":{"}');
  });

  it('encodes the document itself when it is not the last member (an older sender)', () => {
    const text = '{"v":1,"op":"put","tenant":"acme","kind":"events","key":"k1","doc":{"id": "k1"},"acceptedAt":7}';
    const m = decodeMessage(text) as { doc: Record<string, unknown> };
    expect(jsonOf(m.doc)).toBe('{"id":"k1"}');
  });
});

describe('TextPut: a put that carries its checked text', () => {
  const doc = { id: 'k1', eventType: 'locationUpdateEvent', lifecycle: 'actual', externalAttributes: { n: [1.5, null, 'é'] } };
  const text = JSON.stringify(doc);

  it('encodes for Kafka exactly as a put of the parsed document would, without parsing it', () => {
    const m = new TextPut({ tenant: 'acme', kind: 'events', key: 'k1', acceptedAt: 7, text, lifecycleRank: 4, modified: 0 });
    const encoded = encodeMessage(m);
    expect(encoded).toBe(encodeMessage({ v: 1, op: 'put', tenant: 'acme', kind: 'events', key: 'k1', acceptedAt: 7, doc }));
    const back = decodeMessage(encoded as string) as { doc: Record<string, unknown> };
    expect(back).toEqual({ v: 1, op: 'put', tenant: 'acme', kind: 'events', key: 'k1', acceptedAt: 7, doc });
    expect(jsonOf(back.doc)).toBe(text);
  });

  it('parses its text once, when `doc` is read, and jsonOf gives the same text back', () => {
    const m = new TextPut({ tenant: 'acme', kind: 'events', key: 'k1', acceptedAt: 7, text, lifecycleRank: 4, modified: 0 });
    expect(m.doc).toEqual(doc);
    expect(m.doc).toBe(m.doc);
    expect(jsonOf(m.doc)).toBe(text);
    // What a reader of PutMessage sees: the members, with doc.
    expect({ v: m.v, op: m.op, tenant: m.tenant, kind: m.kind, key: m.key, acceptedAt: m.acceptedAt }).toEqual({
      v: 1,
      op: 'put',
      tenant: 'acme',
      kind: 'events',
      key: 'k1',
      acceptedAt: 7,
    });
  });

  it('holds its document as UTF-8 bytes when given them: the same json, stamp and Kafka message', () => {
    const plain = '{"id":"k1","lat":52.4000,"s":"\\u00e9"}';
    const m = new TextPut({
      tenant: 'acme',
      kind: 'events',
      key: 'k1',
      acceptedAt: 7,
      text: Buffer.from(plain),
      lifecycleRank: 4,
      modified: 1000,
    });
    expect(m.bytes?.toString()).toBe(plain);
    expect(m.json).toBe(plain);
    expect(m.stamp).toEqual({ modified: 1000, acceptedAt: 7 });
    const encoded = encodeMessage(m);
    expect(Buffer.isBuffer(encoded)).toBe(true);
    expect(encoded.toString()).toBe(
      encodeMessage(
        new TextPut({ tenant: 'acme', kind: 'events', key: 'k1', acceptedAt: 7, text: plain, lifecycleRank: 4, modified: 1000 }),
      ),
    );
    const back = decodeMessage(encoded.toString()) as { doc: Record<string, unknown> };
    expect(back.doc).toEqual({ id: 'k1', lat: 52.4, s: 'é' });
    expect(jsonOf(back.doc)).toBe(plain);
  });

  it('holds a span of a larger buffer (a bulk body) as that buffer and where: bytes, json, doc and the Kafka message of the span alone', () => {
    const plain = '{"id":"k2","s":"Zürich"}';
    const body = Buffer.from(`[{"id":"k1"},${plain},{"id":"k3"}]`);
    const from = body.indexOf(plain);
    const to = from + Buffer.byteLength(plain);
    const m = new TextPut({
      tenant: 'acme',
      kind: 'events',
      key: 'k2',
      acceptedAt: 7,
      text: body,
      lifecycleRank: 4,
      modified: 1000,
      from,
      to,
    });
    expect(m.bytes?.equals(Buffer.from(plain))).toBe(true);
    expect(m.bytes?.buffer).toBe(body.buffer); // a view of the body, not a copy
    expect(m.json).toBe(plain);
    expect(m.doc).toEqual({ id: 'k2', s: 'Zürich' });
    expect(encodeMessage(m).toString()).toBe(
      encodeMessage(
        new TextPut({ tenant: 'acme', kind: 'events', key: 'k2', acceptedAt: 7, text: plain, lifecycleRank: 4, modified: 1000 }),
      ),
    );
    // Given all of a buffer, it hands that buffer itself back.
    const whole = Buffer.from(plain);
    expect(
      new TextPut({ tenant: 'acme', kind: 'events', key: 'k2', acceptedAt: 7, text: whole, lifecycleRank: 4, modified: 1000 }).bytes,
    ).toBe(whole);
  });

  it('carries its facts when read already (its entry of the table of its request), and none otherwise; the Kafka message is the same', () => {
    const table = newEventFactsTable(2);
    const facts = eventFacts({ eventType: 'locationUpdateEvent', creationDate: '2026-01-01T00:00:00Z' });
    setEventFacts(table, 1, facts);
    const m = new TextPut({
      tenant: 'acme',
      kind: 'events',
      key: 'k1',
      acceptedAt: 7,
      text,
      lifecycleRank: 4,
      modified: 0,
      facts: table,
      factsAt: 1,
    });
    expect(m.facts).toEqual(facts);
    expect(
      new TextPut({
        tenant: 'acme',
        kind: 'events',
        key: 'k1',
        acceptedAt: 7,
        text,
        lifecycleRank: 4,
        modified: 0,
        facts: table,
        factsAt: 0,
      }).facts,
    ).toBeUndefined();
    expect(
      new TextPut({ tenant: 'acme', kind: 'events', key: 'k1', acceptedAt: 7, text, lifecycleRank: 4, modified: 0 }).facts,
    ).toBeUndefined();
    expect(encodeMessage(m)).toBe(
      encodeMessage(new TextPut({ tenant: 'acme', kind: 'events', key: 'k1', acceptedAt: 7, text, lifecycleRank: 4, modified: 0 })),
    );
  });
});
