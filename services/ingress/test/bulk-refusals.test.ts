/**
 * A bulk request some of whose documents a store refused for lack of room (issue 42): the answer
 * says which were stored and which were not (every document of an atomic request), with the
 * Retry-After of its 503; a failure that is not such a refusal fails the whole request, as a PUT's.
 */
import { describe, expect, it } from 'vitest';
import { AdapterError, StorageRefused, insufficientStorage, type Bus, type Envelope } from '@otm/core';
import { Ingress, checkBulk, type CheckedBulk } from '../src/index.js';

const location = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `5d000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  geoReference: { type: 'latLonPointGeoReference', lat: 52, lon: 5 },
});
const checked = (docs: unknown[]) =>
  checkBulk({ body: JSON.stringify(docs), format: 'json', kind: 'events', maxDepth: 64, maxItems: 100 }) as CheckedBulk;
const readers = { entities: { get: () => Promise.resolve(undefined) }, events: { get: () => Promise.resolve(undefined) } };
const refusal = new StorageRefused('event-log', 'no-space', 'no space left on the disk in /data/events, 0 bytes free');

/** A bus that applies every message but those of the documents in `refused` (by index), which fail with `failure`. */
function bus(refused: Set<number>, failure: unknown, each = true): Bus {
  const outcomes = (envelopes: readonly Envelope[]) =>
    envelopes.map((e) => (refused.has(Number(e.message.key.slice(-2))) ? failure : undefined));
  return {
    publish: (envelopes) => (outcomes(envelopes).some((o) => o !== undefined) ? Promise.reject(failure) : Promise.resolve()),
    ...(each ? { publishEach: (envelopes: readonly Envelope[]) => Promise.resolve(outcomes(envelopes)) } : {}),
    subscribe: () => Promise.reject(new Error('not here')),
    ready: () => Promise.resolve(true),
    close: () => Promise.resolve(),
  };
}

describe('Ingress.bulk when a store refuses some documents', () => {
  const docs = [location(0), location(1), location(2)];

  it('non-atomic: only the documents not stored get an insufficientStorage item; the answer carries Retry-After', async () => {
    const ingress = new Ingress({ bus: bus(new Set([1]), refusal), readers });
    const result = await ingress.bulk('t', 'events', checked(docs), false);
    expect(result.ids).toEqual([docs[0]!.id, '', docs[2]!.id]);
    expect([...result.errors]).toEqual([
      [1, [{ type: 'insufficientStorage', message: expect.stringMatching(/^not stored: store event-log refuses writes: no space left/) }]],
    ]);
    expect(result.retryAfterSeconds).toBe(30);
  });

  it('atomic: every document is refused, those stored too', async () => {
    const ingress = new Ingress({ bus: bus(new Set([2]), refusal), readers });
    const result = await ingress.bulk('t', 'events', checked(docs), true);
    expect(result.ids).toEqual(['', '', '']);
    expect(result.errors.size).toBe(3);
    for (const [, items] of result.errors)
      expect(items).toEqual([
        { type: 'insufficientStorage', message: expect.stringMatching(/^not accepted, with the whole atomic request: not stored/) },
      ]);
    expect(result.retryAfterSeconds).toBe(30);
  });

  it('a bus that cannot tell which (Kafka): every document is refused, with its 503', async () => {
    const kafka = insufficientStorage('not stored: kafka refused the messages for a failed log directory', 5);
    const ingress = new Ingress({ bus: bus(new Set([0]), kafka, false), readers });
    const result = await ingress.bulk('t', 'events', checked(docs), false);
    expect(result.ids).toEqual(['', '', '']);
    expect(result.errors.get(2)).toEqual([{ type: 'insufficientStorage', message: expect.stringMatching(/kafka refused/) }]);
    expect(result.retryAfterSeconds).toBe(5);
  });

  it('a fault that is not a refusal fails the whole request', async () => {
    const fault = new AdapterError('lmdb', 'a record cannot be decoded', { retryable: false });
    const ingress = new Ingress({ bus: bus(new Set([1]), fault), readers });
    await expect(ingress.bulk('t', 'events', checked(docs), false)).rejects.toBe(fault);
  });

  it('nothing refused: the answer as before, no Retry-After', async () => {
    const ingress = new Ingress({ bus: bus(new Set(), refusal), readers });
    const result = await ingress.bulk('t', 'events', checked(docs), false);
    expect(result.ids).toEqual(docs.map((d) => d.id));
    expect(result.errors.size).toBe(0);
    expect(result.retryAfterSeconds).toBeUndefined();
  });
});
