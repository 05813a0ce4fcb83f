/**
 * The model's semantics cost work in proportion to the document: a trip with n inline actions,
 * each holding a location, is stored, its inline entities kept on their own and their copies kept
 * up to date without re-reading the whole trip for each of them. Measured in bytes of JSON parsed
 * while the PUT is answered (deterministic, unlike time): quadratic work parses the trip once per
 * inline entity, hundreds of times its size.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { auth, json, startService, type TestService } from '../../services/otm/test/helpers.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => svc.close());

const uuid = (prefix: string, n: number) => `${prefix}-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** A trip holding `n` inline stop actions, each holding an inline location. */
function bigTrip(tripId: string, n: number, name: string) {
  return {
    entityType: 'trip',
    id: tripId,
    name,
    actions: Array.from({ length: n }, (_, i) => ({
      associationType: 'inline',
      entity: {
        actionType: 'stop',
        id: uuid('c1000000', i),
        lifecycle: 'planned',
        name: `${name} stop ${i}`,
        location: {
          associationType: 'inline',
          entity: {
            entityType: 'location',
            id: uuid('c2000000', i),
            name: `${name} place ${i}`,
            geoReference: { type: 'latLonPointGeoReference', lat: 52 + i / 10_000, lon: 4 + i / 10_000 },
          },
        },
      },
    })),
  };
}

/** Bytes of JSON text parsed while `work` runs. */
async function parsedBytes(work: () => Promise<void>): Promise<number> {
  const parse = JSON.parse;
  let bytes = 0;
  const spy = vi
    .spyOn(JSON, 'parse')
    .mockImplementation((text: string, reviver?: (this: unknown, key: string, value: unknown) => unknown) => {
      bytes += text.length;
      return parse(text, reviver);
    });
  try {
    await work();
  } finally {
    spy.mockRestore();
  }
  return bytes;
}

/** PUTs a trip; its answer's status and the bytes of JSON parsed meanwhile, as a multiple of its size. */
async function putTrip(doc: unknown): Promise<{ status: number; parsedPerByte: number }> {
  const payload = JSON.stringify(doc);
  let status = 0;
  const bytes = await parsedBytes(async () => {
    status = (await svc.app.inject({ method: 'PUT', url: '/api/v5/trips', headers: { ...json, ...auth() }, payload })).statusCode;
  });
  return { status, parsedPerByte: bytes / payload.length };
}

describe('a document with many inline entities', () => {
  it('is stored with JSON parsing in proportion to its size (1,000 actions, each with a location)', async () => {
    const { status, parsedPerByte } = await putTrip(bigTrip(uuid('c3000000', 1), 1000, 'first'));
    expect(status).toBe(200);
    // The body once, the stored versions read back a few times at most: not once per inline entity.
    expect(parsedPerByte).toBeLessThan(10);
  });

  it('changing the entities another big trip holds costs each holder one read, not one per entity', async () => {
    // A second trip holding the same 1,000 actions and locations, all renamed: every copy inside
    // the first trip changes.
    const { status, parsedPerByte } = await putTrip(bigTrip(uuid('c3000000', 2), 1000, 'second'));
    expect(status).toBe(200);
    expect(parsedPerByte).toBeLessThan(10);
    // And the first trip shows the new versions, at both depths.
    const first = (await svc.app.inject({ method: 'GET', url: `/api/v5/trips/${uuid('c3000000', 1)}`, headers: auth() })).json();
    expect(first.name).toBe('first');
    expect(first.actions[999].entity.name).toBe('second stop 999');
    expect(first.actions[999].entity.location.entity.name).toBe('second place 999');
    const place = (await svc.app.inject({ method: 'GET', url: `/api/v5/locations/${uuid('c2000000', 7)}`, headers: auth() })).json();
    expect(place.name).toBe('second place 7');
  });
});
