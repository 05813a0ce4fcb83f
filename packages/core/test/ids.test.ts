import { describe, expect, it } from 'vitest';
import { isUuid, newId, storageKey, uuidV5 } from '../src/index.js';

describe('ids', () => {
  it('keys a UUID by itself, lower-cased', () => {
    expect(storageKey('5F27B818-027A-4008-B410-DE01E1DD3A93')).toBe('5f27b818-027a-4008-b410-de01e1dd3a93');
  });
  it('keys a URI ending in a UUID by that UUID', () => {
    expect(storageKey('https://example.com/trips/5f27b818-027a-4008-b410-de01e1dd3a93/')).toBe('5f27b818-027a-4008-b410-de01e1dd3a93');
  });
  it('keys any other id by its name-based UUID', () => {
    // RFC 4122 / Python uuid.uuid5(uuid.NAMESPACE_URL, 'https://example.com/trip/1')
    expect(uuidV5('https://example.com/trip/1')).toBe('a28fd9ca-493a-5284-a303-ebd2fd785919');
    expect(storageKey('order-17')).toBe(uuidV5('order-17'));
    expect(isUuid(storageKey('order-17'))).toBe(true);
  });
  it('makes random v4 ids', () => {
    expect(newId()).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });
});
