import { describe, expect, it } from 'vitest';
import { decodeVersion, decodeVersionBytes, encodeVersion, keptSize, keptVersion, ownedBytes, ownedUtf8 } from '../src/index.js';

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

  it('gives a cache bytes in memory of their own, not a view that keeps a larger buffer alive', () => {
    const pooled = Buffer.from(json); // a slice of Node's 8 KiB pool
    expect(pooled.buffer.byteLength).toBeGreaterThan(pooled.length);
    const own = ownedBytes(pooled);
    expect(own.equals(pooled)).toBe(true);
    expect([own.byteOffset, own.buffer.byteLength]).toEqual([0, own.length]);
    expect(ownedBytes(own)).toBe(own); // already its own: not copied again
    const utf8 = ownedUtf8(json);
    expect(utf8.equals(pooled)).toBe(true);
    expect(utf8.buffer.byteLength).toBe(utf8.length);

    const chunk = Buffer.concat([Buffer.from('*2\r\n'), Buffer.from(raw), Buffer.alloc(60_000)]); // as a socket read
    const viewed = decodeVersionBytes('trips', 'k1', 2, chunk.subarray(4, 4 + Buffer.byteLength(raw)));
    const kept = keptVersion(viewed);
    expect(kept.bytes!.buffer.byteLength).toBe(kept.bytes!.length);
    expect([kept.json, kept.kind, kept.key, kept.lifecycleRank, kept.stamp]).toEqual([json, 'trips', 'k1', 2, viewed.stamp]);
    expect(keptVersion(kept)).toBe(kept);
    expect(keptSize(kept)).toBe(Buffer.byteLength(json) + 100);
    // A document read as text is kept as its bytes alone, its text made again when asked for.
    const plain = { kind: 'trips' as const, key: 'k1', lifecycleRank: 0, json, value: { id: 'k1' } };
    const keptPlain = keptVersion(plain);
    expect(keptPlain.bytes!.equals(Buffer.from(json))).toBe(true);
    expect(keptPlain.bytes!.buffer.byteLength).toBe(keptPlain.bytes!.length);
    expect(keptPlain.json).toBe(json);
    expect(Object.keys(keptPlain)).not.toContain('value');
  });
});
