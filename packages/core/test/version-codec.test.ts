import { describe, expect, it } from 'vitest';
import { decodeVersion, decodeVersionBytes, encodeVersion } from '../src/index.js';

describe('stored versions', () => {
  const json = JSON.stringify({ id: 'k1', name: 'Zoë 🚚 \u00e9\n"quoted"', n: 1.5 });
  const raw = encodeVersion(json, { modified: 1_700_000_000_123, acceptedAt: 1_700_000_000_456 });

  it('read as text or as bytes give the same document and stamp', () => {
    const fromText = decodeVersion('vehicles', 'k1', 3, raw);
    const fromBytes = decodeVersionBytes('vehicles', 'k1', 3, Buffer.from(raw));
    expect(fromBytes.json).toBe(json);
    expect({ ...fromText }).toEqual({
      kind: 'vehicles',
      key: 'k1',
      lifecycleRank: 3,
      json,
      stamp: { modified: 1_700_000_000_123, acceptedAt: 1_700_000_000_456 },
    });
    expect([fromBytes.kind, fromBytes.key, fromBytes.lifecycleRank, fromBytes.stamp]).toEqual([
      fromText.kind,
      fromText.key,
      fromText.lifecycleRank,
      fromText.stamp,
    ]);
  });

  it('keeps the bytes of the document as stored, multi-byte characters included', () => {
    const doc = decodeVersionBytes('vehicles', 'k1', 0, Buffer.from(raw));
    expect(doc.bytes!.equals(Buffer.from(json))).toBe(true);
    expect(doc.json).toBe(doc.json); // decoded once, the same text after
  });
});
